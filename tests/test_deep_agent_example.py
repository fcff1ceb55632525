"""examples/deep_agent_tests.py, offline: a scripted deep agent fixes its file after the tests fail."""

from __future__ import annotations

import deep_agent_tests
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from loop_agents.loop.feedback import is_feedback
from tests.fakes import FakeChat

pytest.importorskip("deepagents")

WRONG = "def slugify(title):\n    return title.lower().replace(' ', '-')\n"
RIGHT = (
    "import re\n\n"
    "def slugify(title):\n"
    "    return '-'.join(re.findall(r'[a-z0-9]+', title.lower()))\n"
)


def scripted(messages: list[AnyMessage]) -> AIMessage:
    reviews = [m for m in messages if is_feedback(m)]
    done = {"content": "write /solution.py", "status": "completed"}
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Done.")
    if not reviews:
        calls = [
            {"name": "write_todos", "args": {"todos": [done]}, "id": "plan"},
            {
                "name": "write_file",
                "args": {"file_path": "/solution.py", "content": WRONG},
                "id": "w",
            },
        ]
        return AIMessage("", tool_calls=calls)
    edit = {"file_path": "/solution.py", "old_string": WRONG, "new_string": RIGHT}
    return AIMessage("", tool_calls=[{"name": "edit_file", "args": edit, "id": f"e{len(reviews)}"}])


def test_the_example_runs_offline_and_the_second_attempt_fixes_the_file():
    loop = deep_agent_tests.build_loop(FakeChat.of(scripted))
    result = loop.invoke({"messages": [HumanMessage(deep_agent_tests.TASK)]})
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert "FAILED test_punctuation_and_spaces" in result["feedback"][0]
    text = deep_agent_tests.report(result)
    assert "attempt 2: accepted" in text
    assert "re.findall" in text


def test_without_an_endpoint_the_example_says_what_to_set(monkeypatch, capsys):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(deep_agent_tests, "load_dotenv", lambda *a, **k: None)
    assert deep_agent_tests.main([]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
