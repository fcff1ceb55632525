"""Seed 004's coder / reviewer / runner loop with a fake coder (no network)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import coder_reviewer
import pytest
from langchain_core.messages import HumanMessage

from loop_agents import create_loop_agent
from loop_agents.loop.feedback import is_feedback
from loop_agents_checks.python_runner import code_runner
from tests.conftest import ROOT, env_without_model_settings
from tests.fakes import FakeChat, review

code_runner_module = importlib.import_module("loop_agents_checks.python_runner")

TWO_BLOCKS = """\
First the function:
```python
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
```
and then the call:
```python
print(fib(39))
```
"""

RAISES = """\
```python
def fib(n):
    if n < 0:
        raise ValueError("n must not be negative")
    return fib(n - 1) + fib(n - 2) if n > 1 else n

print(fib(-39))
```
"""

RIGHT = """\
```python
a, b = 0, 1
for _ in range(39):
    a, b = b, a + b
print(f"The 39th Fibonacci number is {a}")
```
"""


def _check_three_iterations(result, coder):
    assert result["iteration"] == 3
    assert result["stop_reason"] == "accepted"
    assert result["stop"] is True
    first, second, third = result["feedback"]
    # 1: the review rejects two code blocks without running anything
    assert "2 Python code blocks" in first
    assert "exactly one" in first
    # 2: the program ran and raised; the coder sees the traceback, tidied to answer.py
    assert "failed with exit code 1" in second
    assert 'File "answer.py", line 6' in second
    assert "ValueError: n must not be negative" in second
    # 3: accepted, with the output
    assert "printed the answer" in third
    assert "The 39th Fibonacci number is 63245986" in third
    assert [r["score"] for r in result["records"]] == [0.0, 0.25, 1.0]
    assert [r["evaluator"] for r in result["records"]] == ["code_runner"] * 3

    # the coder was called three times; each retry carried the previous feedback
    assert len(coder.calls) == 3
    assert coder.calls[0][-1].text == coder_reviewer.TASK
    for number, (call, feedback) in enumerate(zip(coder.calls[1:], (first, second), strict=True)):
        assert isinstance(call[-1], HumanMessage)
        assert is_feedback(call[-1])
        assert call[-1].text == review(feedback, number + 1)
    # the transcript: task, then answer/feedback pairs, the accepted answer last
    kinds = [m.type for m in result["messages"]]
    assert kinds == ["human", "ai", "human", "ai", "human", "ai"]
    assert result["messages"][-1].text == RIGHT


async def test_three_iterations_streamed(capsys):
    coder = FakeChat.of(TWO_BLOCKS, RAISES, RIGHT)
    result = await coder_reviewer.run(coder)
    _check_three_iterations(result, coder)
    out = capsys.readouterr().out
    assert "coder, attempt 1" in out
    assert "coder, attempt 3" in out
    assert "runner, score 0.25" in out
    assert "stopped: the program printed 63245986" in out
    assert "print(fib(39))" in out  # the coder's tokens were streamed


def test_three_iterations_sync():
    coder = FakeChat.of(TWO_BLOCKS, RAISES, RIGHT)
    loop = coder_reviewer.build_loop(coder)
    result = loop.invoke({"messages": [HumanMessage(coder_reviewer.TASK)]})
    _check_three_iterations(result, coder)


async def test_async_loop_uses_the_asyncio_runner(monkeypatch):
    def blocking(*args, **kwargs):
        raise AssertionError("the async loop must not call the blocking run_python")

    monkeypatch.setattr(code_runner_module, "run_python", blocking)
    coder = FakeChat.of(RIGHT)
    loop = create_loop_agent(coder, code_runner(coder_reviewer.ANSWER_PATTERN, match="regex"), 2)
    result = await loop.ainvoke({"messages": [HumanMessage("fib 39?")]})
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 1


def test_sync_loop_uses_the_blocking_runner(monkeypatch):
    async def not_here(*args, **kwargs):
        raise AssertionError("the sync loop must not call arun_python")

    monkeypatch.setattr(code_runner_module, "arun_python", not_here)
    runner = code_runner(coder_reviewer.ANSWER_PATTERN, match="regex")
    loop = create_loop_agent(FakeChat.of(RIGHT), runner, 2)
    assert loop.invoke({"messages": [HumanMessage("fib 39?")]})["stop_reason"] == "accepted"


async def test_wrong_output_and_no_print_and_cap(capsys):
    wrong = "```python\nprint(39 * 2)\n```"
    silent = "```python\nx = 39 * 2\n```"
    coder = FakeChat.of(wrong, silent, "I cannot write code.")
    result = await coder_reviewer.run(coder, max_iterations=3)
    assert result["stop_reason"] == "max_iterations"
    ran, silent_fb, prose_fb = result["feedback"]
    assert "output is not the answer" in ran
    assert "78" in ran
    assert "63245986" not in ran  # the runner does not give the answer away
    assert "prints nothing" in silent_fb
    assert "no Python code block" in prose_fb
    assert [r["score"] for r in result["records"]] == [0.5, 0.0, 0.0]
    assert "cap on iterations" in capsys.readouterr().out


def test_a_longer_number_is_not_the_answer():
    wrong = "```python\nprint(f'The 39th Fibonacci number is {163245986}')\n```"
    loop = coder_reviewer.build_loop(FakeChat.of(wrong, RIGHT))
    result = loop.invoke({"messages": [HumanMessage(coder_reviewer.TASK)]})
    assert result["iteration"] == 2
    assert "output is not the answer" in result["feedback"][0]
    assert result["stop_reason"] == "accepted"


@pytest.mark.slow  # the example program in a process of its own (it imports LangChain)
def test_example_without_endpoint_or_extra_exits_with_instructions(tmp_path):
    # shadow llama_cpp with a package that has no server: the `local` extra looks missing
    fake = tmp_path / "shadow" / "llama_cpp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    env = env_without_model_settings()
    env["PYTHONPATH"] = str(tmp_path / "shadow")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "coder_reviewer.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "OPENAI_API_KEY" in proc.stderr
    assert "OPENAI_BASE_URL" in proc.stderr
    assert "pip install" in proc.stderr
    assert "[local]" in proc.stderr
    assert proc.stdout == ""
