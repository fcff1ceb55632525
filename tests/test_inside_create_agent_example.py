"""examples/inside_create_agent.py: a create_agent agent with LoopMiddleware, offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from inside_create_agent import GOOD, LONG, ScriptedChat, main, run
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents.controls.criteria import is_criteria
from loop_agents.loop.feedback import is_feedback
from tests.conftest import env_without_model_settings

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inside_create_agent.py"


def test_the_announcer_is_told_twice_and_its_third_answer_is_accepted():
    lines: list[str] = []
    result = run(ScriptedChat(messages=iter(())), InMemorySaver(), lines.append)
    assert result["loop_stop_reason"] == "accepted"
    assert [r["stop"] for r in result["loop_records"]] == [False, False, True]
    assert result["loop_records"][0]["answer"].text == LONG
    assert result["loop_feedback"][:2] == [
        "35 words; keep it to 30 at most.",
        "Name the version: 0.2.",
    ]
    assert result["messages"][-1].text == GOOD
    # the rules were shown before the first try; each attempt counted its words
    assert sum(1 for m in result["messages"] if is_criteria(m)) == 1
    assert sum(1 for m in result["messages"] if isinstance(m, ToolMessage)) == 3
    assert sum(1 for m in result["messages"] if is_feedback(m)) == 2
    assert lines[:2] == ["iteration 1 of 4", "  judged: feedback: 35 words; keep it to 30 at most."]
    assert lines[-1] == f"announcement: {GOOD}"


def test_main_offline_with_a_database_file(tmp_path, capsys):
    db = tmp_path / "announce.sqlite"
    assert main(["--offline", "--db", str(db)]) == 0
    assert "stopped: accepted after 3 iterations" in capsys.readouterr().out
    assert db.exists()


def test_runs_as_a_program_without_a_model(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env_without_model_settings(),
    )
    assert done.returncode == 0, done.stderr
    assert f"announcement: {GOOD}" in done.stdout
