"""The command against a broken runs file and bad input: one line, exit 2, no traceback.

Issue "Hardening, round 3", items 9-13: a damaged ``runs.sqlite``, a runs file locked by
another process, an argument that is not UTF-8, ``--task-file /dev/zero``, and a disk
that fills mid-run each gave a traceback (or ran out of memory). Each now ends with one
line naming the file (or the argument) and the fix, exit status 2; a run whose disk
filled keeps its answers and resumes once there is space. Every test runs the real
``loop-agents`` command in a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_runs import DRAFT_1, DRAFT_2, RUBRIC, TASK, VERDICT_1, VERDICT_2

from tests.cli_helpers import cli_env, loop_agents
from tests.scripted_openai import ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow


def one_line_error(proc: subprocess.CompletedProcess[str], command: str) -> str:
    """The one error line the command printed on stderr, after checking the exit status.

    Before it, a run may have printed its news (``loop-agents: model: ...``); nothing else.
    """
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith("loop-agents: ") for line in lines[:-1]), proc.stderr
    assert lines[-1].startswith(f"loop-agents {command}: error: "), proc.stderr
    return lines[-1]


def saved_run(home: Path, url: str, tmp_path: Path) -> str:
    env = cli_env(home, OPENAI_BASE_URL=url)
    proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["run_id"])


# -- item 9: a damaged runs file ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["not a database", "truncated"])
def test_a_damaged_runs_file_is_named_with_the_fix(damage, tmp_path):
    home = tmp_path / "home"
    runs_file = home / "runs.sqlite"
    run_id = "0badc0de"
    if damage == "not a database":
        home.mkdir()
        runs_file.write_bytes(b"these are not the bytes of a database\n" * 200)
    else:
        server = ScriptedOpenAI([DRAFT_2, Structured(VERDICT_2)] * 2)
        with server.serve() as url:
            for _ in range(2):
                run_id = saved_run(home, url, tmp_path)
        with contextlib.closing(sqlite3.connect(runs_file)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = runs_file.stat().st_size
        with runs_file.open("r+b") as handle:
            handle.truncate(size // 3)
    env = cli_env(home, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    for command in (["runs"], ["show", run_id], ["resume", run_id], ["run", TASK, "--rubric", "x"]):
        proc = loop_agents(*command, env=env, cwd=tmp_path, timeout=60)
        line = one_line_error(proc, command[0])
        assert str(runs_file) in line
        assert "damaged or is not an SQLite database" in line
        assert f"mv {runs_file} {runs_file}.broken" in line
    # the fix it names works: a new file, the run goes on
    runs_file.rename(f"{runs_file}.broken")
    assert loop_agents("runs", env=env, cwd=tmp_path).returncode == 0


# -- item 10: a runs file locked by another process ---------------------------------------

HOLD = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS held (x)")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT INTO held VALUES (1)")
print("locked", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait(10)


def test_a_runs_file_locked_by_another_process_is_named_after_a_short_wait(tmp_path):
    server = ScriptedOpenAI([DRAFT_2, Structured(VERDICT_2)] * 2)
    home = tmp_path / "home"
    with server.serve() as url:
        env = cli_env(home, OPENAI_BASE_URL=url)
        with locked(home / "runs.sqlite"):
            started = time.monotonic()
            proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
            waited = time.monotonic() - started
            line = one_line_error(proc, "run")
            assert f"the runs file {home / 'runs.sqlite'} is locked by another process" in line
            assert "--no-save" in line
            assert waited < 25, waited  # not the 30 s it used to wait (a hang guard only)
            assert server.requests == []  # refused before any model call
        # free again: the same command runs
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr


# -- items 11 and 12: bad input -----------------------------------------------------------


def test_an_argument_that_is_not_utf8_is_refused(tmp_path):
    env = cli_env(tmp_path / "home", OPENAI_API_KEY="sk-test")
    command = [sys.executable, "-m", "loop_agents_cli", "run"]
    for extra in ([b"Name a \xff colour.", b"--rubric", b"x"], [b"t", b"--rubric", b"\xfe"]):
        proc = subprocess.run(
            [*map(os.fsencode, command), *extra], env=env, cwd=tmp_path, capture_output=True,
            timeout=60, check=False,
        )  # fmt: skip
        text = subprocess.CompletedProcess(
            proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
        )
        line = one_line_error(text, "run")
        assert "is not UTF-8 text" in line
    assert not (tmp_path / "home" / "runs.sqlite").exists()


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("/dev/zero", "is a character device, which never ends"),
        ("/dev/urandom", "is a character device, which never ends"),
        (".", "is a folder"),
        ("big.txt", "is larger than 1,048,576 bytes (--max-file-bytes)"),
        ("latin1.txt", "is not UTF-8 text (byte 0xc9 at offset 0)"),
    ],
)
def test_task_files_are_capped_and_endless_ones_refused(file, message, tmp_path):
    (tmp_path / "big.txt").write_bytes(b"a" * (1 << 20) + b"b")
    (tmp_path / "latin1.txt").write_bytes("Écris un poème.".encode("latin-1"))
    env = cli_env(tmp_path / "home", OPENAI_API_KEY="sk-test")
    proc = loop_agents("run", "--task-file", file, "--rubric", "x", env=env, cwd=tmp_path)
    assert message in one_line_error(proc, "run")


def test_the_cap_can_be_raised_and_a_pipe_is_read_up_to_it(tmp_path):
    server = ScriptedOpenAI([DRAFT_2, Structured(VERDICT_2)])
    task = "Write a limerick. " + "More context. " * 80_000  # about 1.1 MB
    (tmp_path / "task.md").write_text(task)
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "--task-file", "-", "--rubric", "x", env=env, cwd=tmp_path, stdin=task
        )
        assert "is larger than 1,048,576 bytes" in one_line_error(proc, "run")
        proc = loop_agents(
            "run", "--task-file", "task.md", "--max-file-bytes", "2000000", "--rubric", RUBRIC,
            "--json", env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0]["messages"][-1]["content"] == task.strip()


# -- item 13: the disk fills mid-run ------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root and mount(8)")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> Path:
    """Write a file in ``folder`` until its disk is full; return it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 512)
    finally:
        os.close(fd)
    return filler


def test_a_disk_that_fills_mid_run_keeps_the_answers_and_the_run_resumes(tmp_path):
    with small_disk(tmp_path / "disk", "8m") as disk:
        home = disk / "home"
        filled: list[Path] = []

        def script() -> Iterator[object]:
            yield DRAFT_1
            yield Structured(VERDICT_1)
            filled.append(fill(disk))  # the first iteration is saved; now the disk is full
            yield DRAFT_2
            yield Structured(VERDICT_2)

        server = ScriptedOpenAI(script())  # type: ignore[arg-type]
        with server.serve() as url:
            env = cli_env(home, OPENAI_BASE_URL=url)
            proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
            line = one_line_error(proc, "run")
            assert f"the disk holding the runs file {home / 'runs.sqlite'} is full" in line
            assert "Free some space; then resume the run with: " in line
            resume = line.split("resume the run with: ", 1)[1]
            printed = json.loads(proc.stdout)  # the result so far is printed too
            assert [r["answer"] for r in printed["records"]] == [DRAFT_1]

            # the answer already made is kept in the file
            shown = loop_agents("show", printed["run_id"], "--json", env=env, cwd=tmp_path)
            assert shown.returncode == 0, shown.stderr
            assert [r["answer"] for r in json.loads(shown.stdout)["records"]] == [DRAFT_1]

            filled[0].unlink()  # space again: the printed command resumes the run
            server._replies = iter([DRAFT_2, Structured(VERDICT_2)])
            bin_first = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"}
            done = subprocess.run(
                resume, shell=True, env=bin_first, cwd=tmp_path, capture_output=True, text=True,
                timeout=120, check=False,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["stop_reason"] == "accepted"
        assert [r["answer"] for r in result["records"]] == [DRAFT_1, DRAFT_2]


def test_a_running_run_without_a_process_is_interrupted_not_running_elsewhere():
    from loop_agents_cli.store import SavedRun

    run = SavedRun("3f9a2c1b", 0.0, 0.0, "t", {}, "running", None, 0, 3, None, None, None)
    assert run.state == "interrupted"
    assert not run.running_elsewhere
