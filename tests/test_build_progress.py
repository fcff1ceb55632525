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
