"""SIGKILL a loop's process at several points; a new process resumes it from the database.

With ``durability="sync"`` every step's checkpoint is written before the next step
starts, so the resumed loop has every iteration's answer exactly once and no agent call
that had finished is made again (the evaluation that was cut off runs again). The loops
store ``messages``, ``feedback`` and ``records`` as delta channels (each checkpoint holds
its step's writes; the state is rebuilt by replaying them), also with a full snapshot
every 2 updates, so that the resumed state is rebuilt from a snapshot and the writes
after it; and, for comparison, as full values.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.durable_helpers import transcript

CHILD = Path(__file__).with_name("kill_child.py")
ROOT = CHILD.parent.parent
ACCEPT_AT = 4
KILL_AT = 2

pytestmark = pytest.mark.slow


def start_and_kill(args: list[str], timeout: float = 120, *, program: Path = CHILD) -> None:
    child = subprocess.Popen(
        [sys.executable, str(program), "start", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout
        assert child.stdout is not None
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([child.stdout], [], [], max(left, 0))
            if not ready:
                pytest.fail("the child never reached its kill point")
            line = child.stdout.readline()
            if not line:
                _, err = child.communicate(timeout=10)
                pytest.fail(f"the child ended before its kill point ({child.returncode}):\n{err}")
            if line.strip() == "KILL-POINT":
                break
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def resume(args: list[str], *, program: Path = CHILD) -> dict:
    done = subprocess.run(
        [sys.executable, str(program), "resume", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


STORAGES = {
    "delta": ["--storage", "auto"],
    "delta-snapshots": ["--storage", "auto", "--snapshot-every", "2"],
    "full": ["--storage", "full"],
}


@pytest.mark.parametrize(
    ("api", "storage"),
    [("sync", "delta"), ("async", "delta"), ("sync", "delta-snapshots"), ("async", "full")],
)
@pytest.mark.parametrize("point", ["after_agent", "evaluator", "between"])
def test_sigkill_then_resume_in_a_new_process(database, point, api, storage, tmp_path):
    saver, db = database
    log = tmp_path / "calls.log"
    args = ["--saver", saver, "--db", db, "--log", str(log), *STORAGES[storage]]
    if api == "async":
        args.append("--async")

    start_and_kill([*args, "--kill", f"{point}:{KILL_AT}"])
    before = log.read_text().split("\n")
    result = resume(args)

    assert [tuple(m) for m in result["messages"]] == transcript(ACCEPT_AT)
    assert result["iteration"] == ACCEPT_AT
    assert result["records"] == list(range(1, ACCEPT_AT + 1))
    assert result["stop_reason"] == "accepted"
    assert result["storage"] == ("full" if storage == "full" else "delta")
    if storage != "delta-snapshots":
        # the final step wrote no message: a delta-stored checkpoint holds none of them
        assert result["latest_holds_messages"] == (storage == "full")

    calls = Counter(line for line in log.read_text().split("\n") if line)
    # every agent call that finished before the kill was kept: one call per iteration
    assert {f"agent {i}": 1 for i in range(1, ACCEPT_AT + 1)} == {
        k: v for k, v in calls.items() if k.startswith("agent")
    }
    # the evaluation cut off by the kill runs again; every other one ran once
    expected = {f"evaluator {i}": 1 for i in range(1, ACCEPT_AT + 1)}
    if point == "evaluator":
        expected[f"evaluator {KILL_AT}"] = 2
    assert expected == {k: v for k, v in calls.items() if k.startswith("evaluator")}
    # the kill really came at the chosen point
    last_before_kill = [line for line in before if line][-1]
    assert (
        last_before_kill
        == {
            "after_agent": f"agent {KILL_AT}",
            "evaluator": f"evaluator {KILL_AT}",
            "between": f"evaluator {KILL_AT}",
        }[point]
    )
