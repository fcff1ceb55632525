"""scripts/build_progress.py: `make local` shows where the llama.cpp build is and how long it took."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "build_progress.py"

FAKE_BUILD = textwrap.dedent(
    """\
    import sys
    print("Collecting llama-cpp-python")
    for step in (1, 82, 164):
        print(f"  [{step}/164] Building CXX object vendor/llama.cpp/src/file{step}.cpp.o")
    print("  [ 50%] Linking CXX shared library libggml.so")
    print("Successfully installed llama-cpp-python-0.3.36")
    sys.exit(int(sys.argv[1]))
    """
)


def build(tmp_path, status: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, str(SCRIPT), "--log", str(tmp_path / "build.log"), "--every", "0",
            "--what", "make local", "--expect", "about 8 minutes",
            "--", sys.executable, "-c", FAKE_BUILD, str(status),
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_progress_lines_and_how_long_it_took(tmp_path):
    proc = build(tmp_path, 0)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        f"make local: started (about 8 minutes); the full log is in {tmp_path / 'build.log'}"
    )
    assert any(line.startswith("make local: compiling, 82/164 files (50%) · ") for line in lines)
    assert any(line.startswith("make local: compiling, 50% · ") for line in lines)
    assert lines[-1].startswith("make local: done in ")
    assert "Building CXX object" not in proc.stdout  # the details stay in the log
    assert "Successfully installed" in (tmp_path / "build.log").read_text()


def test_a_failed_build_shows_the_end_of_its_log_and_its_status(tmp_path):
    proc = build(tmp_path, 3)
    assert proc.returncode == 3
    assert "make local: failed after " in proc.stdout
    assert "(exit status 3); the log ends with:" in proc.stdout
    assert "  Successfully installed llama-cpp-python-0.3.36" in proc.stdout


def test_a_missing_command_is_reported(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--log", str(tmp_path / "l"), "--", "no-such-program-x"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 127
    assert "cannot run 'no-such-program-x'" in proc.stderr


SILENT_BUILD = textwrap.dedent(
    """\
    import time
    print("Collecting llama-cpp-python", flush=True)
    time.sleep(0.8)  # pip resolving: nothing printed
    for step in range(1, 11):
        print(f"  [{step}/20] Building CXX object f{step}.o", flush=True)
        time.sleep(0.05)
    time.sleep(1.2)  # one long compile step: nothing printed
    print("  [20/20] Linking CXX shared library libllama.so", flush=True)
    """
)


def test_lines_keep_coming_while_the_build_is_silent_with_the_time_left(tmp_path):
    proc = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--log", str(tmp_path / "build.log"), "--every", "0.2",
            "--what", "make local", "--", sys.executable, "-c", SILENT_BUILD,
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # while pip resolves, the package it collects
    assert any(line.startswith("make local: collecting llama-cpp-python") for line in lines)
    # during the long compile step: several lines, each with an estimate of the time left
    waiting = [line for line in lines if line.startswith("make local: compiling, 10/20 files")]
    assert len(waiting) >= 3, proc.stdout
    assert all(" left" in line for line in waiting), waiting
    assert lines[-1].startswith("make local: done in ")


def test_the_packages_of_a_requirements_file_are_counted(tmp_path):
    lock = tmp_path / "dev.txt"
    lock.write_text("# a lock\nhttpx==0.28.1 \\\n    --hash=sha256:x\n    # via x\nrich==14.0.0\n")
    proc = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--log", str(tmp_path / "l"), "--every", "0",
            "--what", "make venv", "--requirements", str(lock), "--",
            sys.executable, "-c", "print('Collecting httpx==0.28.1')",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "make venv: collecting httpx==0.28.1 (1 of 2 packages collected) · " in proc.stdout


def test_time_left_from_the_rate_so_far():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from build_progress import time_left
    finally:
        sys.path.pop(0)
    assert time_left(50, 200, 60.0) == "about 3m 00s left"
    assert time_left(2, 200, 60.0) is None  # too few files to tell
    assert time_left(200, 200, 60.0) is None
