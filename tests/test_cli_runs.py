"""Saved runs: Ctrl-C then resume, failures that keep the result, ``runs`` and ``show``.

Each test runs the real command in a subprocess against a scripted OpenAI-compatible
server on loopback, and counts the server's calls.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_helpers import Running, cli_env, loop_agents
from tests.scripted_openai import Hang, ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT_1 = "Roses are red,\nviolets are blue."
DRAFT_2 = "A graph with a loop\nwent round in a hoop\nit judged every try\nand asked itself why\nthen shipped the best scoop."
VERDICT_1 = {"score": 55, "feedback": "Not a limerick: it needs five lines."}
VERDICT_2 = {"score": 86, "feedback": "Five lines, AABBA, light."}


def run_id_of(text: str) -> str:
    found = re.search(r"^run ([0-9a-f]{8}) · saved in ", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def first_requests(server: ScriptedOpenAI) -> list[dict]:
    """The agent's requests of iteration 1: the system message and the task only."""
    return [r for r in server.requests if [m["role"] for m in r["messages"]] == ["system", "user"]]


def test_ctrl_c_while_streaming_then_resume_asks_nothing_twice(tmp_path):
    server = ScriptedOpenAI(
        [DRAFT_1, Structured(VERDICT_1), Hang("A graph with"), DRAFT_2, Structured(VERDICT_2)],
        usage_when_asked=True,
    )
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url, LOOP_AGENTS_MODEL="scripted")
        running = Running("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        try:
            run_id = run_id_of(running.wait_for_line(" · saved in "))
            running.wait_for_line("iteration 2 of 3")
            assert server.hanging.wait(60), "the second answer was never requested"
            status, seconds, out, err = running.interrupt()
        finally:
            running.close()
        assert status == 130, err
        assert seconds < 2.0, f"took {seconds:.2f}s to stop"
        assert "Traceback" not in err
        assert "interrupted; 1 of 3 iterations are saved" in err
        assert f"  loop-agents resume {run_id}\n" in err
        assert len(server.requests) == 3  # agent 1, judge 1, agent 2 (cut off)

        done = loop_agents("resume", run_id, "--json", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["run_id"] == run_id
        assert (result["stop_reason"], result["iterations"], result["answer"]) == (
            "accepted",
            2,
            DRAFT_2,
        )
        assert [(r["iteration"], r["answer"], r["score"]) for r in result["records"]] == [
            (1, DRAFT_1, 55.0),
            (2, DRAFT_2, 86.0),
        ]
        # iteration 1 was not asked of the model again: one request for it in all
        assert len(first_requests(server)) == 1
        assert len(server.requests) == 5  # + agent 2 again, judge 2
        resumed_agent = server.requests[3]
        assert [m["content"] for m in resumed_agent["messages"][1:]] == [
            TASK,
            DRAFT_1,
            f"{VERDICT_1['feedback']}\n\nScore: 55/100 (needed: 80)",
        ]
        assert "resuming run" in done.stderr
