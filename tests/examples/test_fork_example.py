"""examples/fork_from_iteration.py: go back to iteration 2 of a finished loop and fork."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fork_from_iteration import EDITS, HINT, main, offline_copywriter, run
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.fakes import review
from tests.scripted_openai import ScriptedOpenAI

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fork_from_iteration.py"


def turns(result):
    return [(m.type, m.text) for m in result["messages"]]


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_fork_redoes_iterations_from_2_with_the_hint(storage, tmp_path):
    calls: list[int] = []

    def copywriter(messages):
        calls.append(sum(1 for m in messages if m.type == "ai") + 1)
        return offline_copywriter(messages)

    lines: list[str] = []
    if storage == "memory":
        original, forked = run(copywriter, InMemorySaver(), lines.append)
    else:
        with SqliteSaver.from_conn_string(str(tmp_path / "fork.sqlite")) as saver:
            original, forked = run(copywriter, saver, lines.append)

    assert calls == [1, 2, 3, 2, 3]  # the fork did not redo iteration 1
    assert turns(original)[2:] == [
        ("human", review(EDITS[0], 1)),
        ("ai", f"Draft 2 [{EDITS[0]}]: Fresh bread, happy mornings."),
        ("human", review(EDITS[1], 2)),
        ("ai", f"Draft 3 [{EDITS[0]} | {EDITS[1]}]: Fresh bread, happy mornings."),
    ]
    assert turns(forked)[:2] == turns(original)[:2]  # the same first draft, not redone
    assert turns(forked)[2:] == [
        ("human", review(EDITS[0], 1)),
        ("human", HINT),
        ("ai", f"Draft 2 [{EDITS[0]} | {HINT}]: Fresh bread, happy mornings."),
        ("human", review(EDITS[1], 2)),
        ("ai", f"Draft 3 [{EDITS[0]} | {HINT} | {EDITS[1]}]: Fresh bread, happy mornings."),
    ]
    assert forked["iteration"] == original["iteration"] == 3
    assert forked["stop_reason"] == "accepted"
    assert any("next=invoke_agent  iteration=1" in line for line in lines)
    assert lines[-1].startswith("--- the original branch is kept")
    assert original["messages"][-1].text in lines[-1]


def test_fork_with_a_chat_model():
    script = ScriptedOpenAI(
        [
            "Bread!",
            "Warm bread!",
            "Fresh bread, every morning!",
            "Kids love our bread!",
            "Fresh bread for little bakers!",
        ]
    )
    model = ChatOpenAI(
        model="gpt-test",
        api_key="sk-test",
        base_url="https://scripted.invalid/v1",
        http_client=httpx.Client(transport=script.transport()),
    )
    original, forked = run(model, InMemorySaver(), lambda line: None)
    assert [m.text for m in original["messages"] if m.type == "ai"][
        -1
    ] == "Fresh bread, every morning!"
    assert [m.text for m in forked["messages"] if m.type == "ai"] == [
        "Bread!",
        "Kids love our bread!",
        "Fresh bread for little bakers!",
    ]
    # the fork's first request carried the first draft, its feedback and the hint
    fork_request = script.requests[3]["messages"]
    assert [m["content"] for m in fork_request][-3:] == ["Bread!", review(EDITS[0], 1), HINT]


def test_main_offline_with_a_database_file(tmp_path, capsys):
    db = tmp_path / "slogan.sqlite"
    assert main(["--offline", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "--- fork from iteration 2: 3 iterations, accepted" in out
    assert db.exists()


def test_runs_as_a_program(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--offline"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "the original branch is kept" in done.stdout
    assert done.stdout.startswith("--offline: a small function plays the copywriter (no model)")


def test_sqlite_support_is_the_sqlite_extra_and_the_example_says_so():
    # the example needs SqliteSaver: the `sqlite` extra brings it, and the example names it
    import tomllib

    project = tomllib.loads((EXAMPLE.parent.parent / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["sqlite"]
    names = {re.split(r"[<>=\[; ]", dep, maxsplit=1)[0] for dep in extra}
    assert {"langgraph-checkpoint-sqlite", "aiosqlite"} <= names
    assert 'pip install "loop-agents[sqlite]"' in EXAMPLE.read_text(encoding="utf-8")
