"""SIGKILL a create_agent agent with LoopMiddleware at several points; a new process resumes it.

With a SQLite or PostgreSQL checkpointer on the agent and ``durability="sync"``, the resumed run has
every iteration's answer exactly once, no model call that had finished is made again
(the evaluation that was cut off runs again), and the loop's records and conversation
are those of a run that was never killed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.durable_helpers import transcript
from tests.integration_tests.test_kill_resume import resume, start_and_kill

CHILD = Path(__file__).with_name("middleware_kill_child.py")
ACCEPT_AT = 4
KILL_AT = 2

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("api", "storage"), [("sync", "delta"), ("async", "delta"), ("sync", "full")]
)
@pytest.mark.parametrize("point", ["after_model", "evaluator", "between"])
def test_sigkill_then_resume_in_a_new_process(database, point, api, storage, tmp_path):
    saver, db = database
    log = tmp_path / "calls.log"
    args = ["--saver", saver, "--db", db, "--log", str(log), "--storage", storage]
    if api == "async":
        args.append("--async")

    start_and_kill([*args, "--kill", f"{point}:{KILL_AT}"], program=CHILD)
    before = [line for line in log.read_text().split("\n") if line]
    result = resume(args, program=CHILD)

    assert [tuple(m) for m in result["messages"]] == transcript(ACCEPT_AT)
    assert result["iteration"] == ACCEPT_AT
    assert result["records"] == list(range(1, ACCEPT_AT + 1))
    assert result["answers"] == [f"answer {i}" for i in range(1, ACCEPT_AT + 1)]
    assert result["stop_reason"] == "accepted"

    calls = Counter(line for line in log.read_text().split("\n") if line)
    assert {f"agent {i}": 1 for i in range(1, ACCEPT_AT + 1)} == {
        k: v for k, v in calls.items() if k.startswith("agent")
    }
    expected = {f"evaluator {i}": 1 for i in range(1, ACCEPT_AT + 1)}
    if point == "evaluator":
        expected[f"evaluator {KILL_AT}"] = 2
    assert expected == {k: v for k, v in calls.items() if k.startswith("evaluator")}
    assert (
        before[-1]
        == {
            "after_model": f"agent {KILL_AT}",
            "evaluator": f"evaluator {KILL_AT}",
            "between": f"evaluator {KILL_AT}",
        }[point]
    )
