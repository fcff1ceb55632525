"""examples/deep_agent_tests.py, offline: a scripted deep agent fixes its file after the tests fail."""

from __future__ import annotations

import subprocess
import sys

import deep_agent_tests
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from loop_agents.loop.feedback import is_feedback
from loop_agents_cli.models import local_model
from tests.conftest import ROOT, env_without_model_settings
from tests.fakes import FakeChat
from tests.scripted_openai import Calls, Fail, ScriptedOpenAI

HANG = 600
"""Seconds after which a wait is a hang, not a slow machine."""

pytest.importorskip("deepagents")

WRONG = "def slugify(title):\n    return title.lower().replace(' ', '-')\n"
RIGHT = (
    "import re\n\n"
    "def slugify(title):\n"
    "    return '-'.join(re.findall(r'[a-z0-9]+', title.lower()))\n"
)


def scripted(messages: list[AnyMessage]) -> AIMessage:
    """Writes a wrong file; told that the tests failed, edits it, as a model that reads would.

    It is told in a review (a repair) or in the points a new request lists (an informed
    fresh sample): the default `Adaptive` may send either.
    """
    reviews = [m for m in messages if is_feedback(m) or "FAILED test_" in m.text]
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


LLAMA_CPP_PYTHON_REFUSAL = (
    "10 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'messages', 0, "
    "'ChatCompletionRequestSystemMessage', 'content'), 'msg': 'Input should be a valid "
    "string', 'input': [{'type': 'text', 'text': 'You have access to ...'}]}\n"
)
"""The start of what llama-cpp-python 0.3.36's server answers a deep agent (HTTP 500)."""


def _run_example(tmp_path, base_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "deep_agent_tests.py")],
        cwd=tmp_path,
        env=env_without_model_settings(
            OPENAI_BASE_URL=base_url,
            LOOP_AGENTS_MODEL="SmolLM2-135M-Instruct",
            LOOP_AGENTS_MAX_TOKENS="64",
        ),
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )


def _assert_one_line_why(proc: subprocess.CompletedProcess[str], base_url: str) -> None:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1, proc.stderr[-3000:]  # one line, no traceback
    assert proc.stderr.startswith(
        f"deep_agent_tests: the server at {base_url} (llama-cpp-python's, as the bundled "
        "offline model's) cannot serve a deep agent: it takes a message's content only as a "
        "string, and a deep agent sends its instructions as a list of content blocks"
    )


def test_a_server_that_takes_content_only_as_text_is_said_in_one_line(tmp_path):
    server = ScriptedOpenAI([Fail(500, LLAMA_CPP_PYTHON_REFUSAL)] * 3)  # the client retries
    with server.serve() as url:
        proc = _run_example(tmp_path, url)
    _assert_one_line_why(proc, url)
    other = ScriptedOpenAI([Fail(400, "model 'x' not found")] * 3)
    with other.serve() as url:
        proc = _run_example(tmp_path, url)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"deep_agent_tests: the server at {url} refused a request: HTTP 400: model 'x' not found\n"
    )


@pytest.mark.slow
@pytest.mark.skipif(not local_model.is_installed(), reason="the `local` extra is not installed")
def test_against_the_bundled_server_the_example_says_in_one_line_why_not(tmp_path):
    with local_model.LocalModelServer(n_threads=1, startup_timeout=HANG) as server:
        proc = _run_example(tmp_path, server.base_url)
    _assert_one_line_why(proc, server.base_url)


def test_the_program_on_a_tool_calling_server_fixes_its_file(tmp_path):
    plan = {"todos": [{"content": "write /solution.py", "status": "completed"}]}
    edit = {"file_path": "/solution.py", "old_string": WRONG, "new_string": RIGHT}
    server = ScriptedOpenAI(
        [
            Calls(
                ("write_todos", plan),
                ("write_file", {"file_path": "/solution.py", "content": WRONG}),
            ),
            "Done.",
            Calls(("edit_file", edit)),
            "Done.",
        ]
    )  # each attempt: the tool calls, then the answer
    with server.serve() as url:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "deep_agent_tests.py")],
            capture_output=True, text=True, timeout=HANG, check=False, cwd=tmp_path,
            env=env_without_model_settings(OPENAI_BASE_URL=url, LOOP_AGENTS_MODEL="scripted"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("attempt 1: The tests failed with the files /solution.py.")
    assert "attempt 2: accepted\nstopped: accepted\n--- /solution.py ---\nimport re" in done.stdout
