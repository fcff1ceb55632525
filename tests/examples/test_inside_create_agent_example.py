"""examples/inside_create_agent.py: a create_agent agent with LoopMiddleware, offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inside_create_agent import GOOD, LONG, ScriptedChat, main, run
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents.controls.criteria import is_criteria
from loop_agents.loop.feedback import is_feedback
from tests.conftest import env_without_model_settings
from tests.scripted_openai import ScriptedOpenAI, Structured

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inside_create_agent.py"


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
    assert lines[-1] == f"announcement (accepted): {GOOD}"


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
    assert f"announcement (accepted): {GOOD}" in done.stdout


def _program(tmp_path, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=tmp_path,
        env=env_without_model_settings(**settings),
    )


def test_the_first_line_says_that_a_scripted_stand_in_writes(tmp_path):
    done = _program(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "no model is configured (OPENAI_API_KEY or OPENAI_BASE_URL, e.g. in .env): a "
        "scripted stand-in writes the announcement, as with --offline"
    )
    assert f"announcement (accepted): {GOOD}" in done.stdout


FENCED_CALL = '```json\n{"name": "loop_agents", "arguments": {"version": "0.2"}}\n```'
"""What Qwen2.5-Coder-1.5B answered on llama-cpp-python's server: its tool call, as text."""


@pytest.mark.parametrize("answer", [FENCED_CALL, '{"version": "0.2", "words": 12}'])
def test_text_that_is_no_announcement_is_never_accepted(answer):
    lines: list[str] = []
    result = run(
        ScriptedChat(messages=iter(()), script=lambda m: AIMessage(answer)),
        InMemorySaver(),
        lines.append,
    )
    assert result["loop_stop_reason"] == "max_iterations"
    assert not any(r["stop"] for r in result["loop_records"])
    assert "not an announcement" in result["loop_feedback"][0]
    assert lines[-2].startswith("the tool never ran: the model ")
    assert lines[-1].startswith("announcement (not accepted: max_iterations): ")


def test_on_a_server_that_writes_tool_calls_as_text_the_program_says_the_tool_never_ran(tmp_path):
    server = ScriptedOpenAI([FENCED_CALL] * 4)
    with server.serve() as url:
        done = _program(tmp_path, OPENAI_BASE_URL=url, LOOP_AGENTS_MODEL="scripted")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"model: scripted at {url}"
    assert "Call word_count as a tool, not in your reply." in done.stdout
    assert "the tool never ran: the model wrote its tool call as text" in done.stdout
    assert lines[-3].startswith("announcement (not accepted: max_iterations): ```json")
    assert len(server.requests) == 4


def test_on_a_tool_calling_server_the_tool_runs_and_the_answer_is_accepted(tmp_path):
    server = ScriptedOpenAI(
        [Structured({"text": LONG}), LONG, Structured({"text": GOOD}), GOOD]
    )  # each attempt: the word_count call, then the answer
    with server.serve() as url:
        done = _program(tmp_path, OPENAI_BASE_URL=url, LOOP_AGENTS_MODEL="scripted")
    assert done.returncode == 0, done.stderr
    assert "the tool never ran" not in done.stdout
    assert done.stdout.rstrip().endswith(f"announcement (accepted): {GOOD}")
    assert "35 words; keep it to 30 at most." in done.stdout
    # each draft's words, counted by the tool: the first attempt's, then the last's (a
    # repair sends the first again with the second; a fresh sample does not)
    tool_results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_results == ["35"]
    tool_results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_results[-1] == "12"
