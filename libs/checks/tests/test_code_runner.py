"""The runner evaluator: extracting, reviewing and running the code of an answer."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from sandbox_helpers import marker, processes_with

from loop_agents_checks.code_review import extract_python_blocks, review_code
from loop_agents_checks.python_runner import (
    CodeRunner,
    code_runner,
    normalize_output,
    output_matches,
)
from loop_agents_checks.sandbox import GRACE_SECONDS, arun_python, run_python


@pytest.fixture(params=["sync", "async"])
def run(request):
    """Run code with run_python or arun_python: every runner test covers both."""
    if request.param == "sync":
        return run_python

    def run_async(code, **kwargs):
        import asyncio

        return asyncio.run(arun_python(code, **kwargs))

    return run_async


def _context(text: str, iteration: int = 1):
    return {
        "iteration": iteration,
        "init_messages": [HumanMessage("task")],
        "last_response": AIMessage(text),
        "feedback": [],
        "messages": [HumanMessage("task"), AIMessage(text)],
    }


# -- extracting and reviewing -------------------------------------------------------------


def test_extract_python_blocks():
    text = (
        "Intro\n```python\nprint(1)\n```\n"
        "```bash\nls\n```\n"
        "```\nprint(2)\n```\n"
        "~~~py\nprint(3)\n~~~\n"
        "```Python3 title=x\nprint(4)\n```\n"
        "```text\n63245986\n```\n"
    )
    assert extract_python_blocks(text) == ["print(1)\n", "print(2)\n", "print(3)\n", "print(4)\n"]
    assert extract_python_blocks("no code at all") == []
    # a longer fence may hold a shorter one
    assert extract_python_blocks("````python\ns = '```'\nprint(s)\n````") == [
        "s = '```'\nprint(s)\n"
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Just prose.", "no Python code block"),
        ("Run:\n```bash\nls\n```\nDone.", "no Python code block"),
        ("Here:\n```python\ndef fib(n):\n    return", "not closed"),
        ("```python\nprint(1)\n```\n```python\nprint(2)\n```", "2 Python code blocks"),
        ("```python\n\n```", "empty"),
        ("```python\nprint(1\n```", "does not compile: SyntaxError at line 1"),
        ("```python\nx = 1 + 1\n```", "prints nothing"),
    ],
)
def test_review_rejects(text, problem):
    review = review_code(text)
    assert not review.ok
    assert len(review.problems) == 1
    assert problem in review.problems[0]


def test_review_accepts_and_ignores_other_languages():
    text = "```python\nimport sys\nsys.stdout.write('x')\n```\n```text\nx\n```"
    review = review_code(text)
    assert review.ok
    assert review.code == "import sys\nsys.stdout.write('x')\n"
    assert review_code("```python\nx = 1\n```", require_print=False).ok


# -- running ------------------------------------------------------------------------------


def test_runs_and_captures(run):
    result = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert result.exit_code == 3
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not result.timed_out
    assert not result.truncated
    assert not result.ok
    assert result.seconds > 0


def test_kills_an_endless_loop_at_the_time_limit(run):
    mark = marker()
    code = (
        "import subprocess\n"
        f"child = subprocess.Popen(['sleep', {mark!r}])\n"
        "print('started', flush=True)\n"
        "while True:\n"
        "    pass\n"
    )
    started = time.monotonic()
    result = run(code, timeout=1.5)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code == -9
    assert result.stdout == "started\n"
    assert 1.5 <= result.seconds < 1.5 + GRACE_SECONDS
    assert elapsed < 8
    assert processes_with(mark) == []  # its child was killed with it


def test_leftover_children_are_killed_when_the_program_exits(run):
    mark = marker()
    code = f"import subprocess\nsubprocess.Popen(['sleep', {mark!r}])\nprint('done')\n"
    result = run(code, timeout=20)
    assert result.ok
    assert result.seconds < 10  # it did not wait for the sleeping child
    assert processes_with(mark) == []


def test_truncates_huge_output(run):
    code = "print('HEAD' + 'x' * 5_000_000 + 'TAIL')\nimport sys\nprint('E' * 100_000, file=sys.stderr)"
    result = run(code, max_output=1000)
    assert result.ok
    assert result.truncated
    assert len(result.stdout) < 1200
    assert result.stdout.startswith("HEADxxx")
    assert result.stdout.rstrip().endswith("xxxTAIL")
    assert "bytes cut: output limit" in result.stdout
    assert len(result.stderr) < 1200


def test_endless_output_is_bounded_and_stopped(run):
    result = run("while True:\n    print('y' * 1000)", timeout=1, max_output=2000)
    assert result.timed_out
    assert result.truncated
    assert len(result.stdout) < 2200


def test_does_not_see_secrets(run, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-parent-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-parent-secret")
    monkeypatch.setenv("PYTHONPATH", "/parent/path")
    result = run("import json, os\nprint(json.dumps(dict(os.environ)))")
    assert result.ok, result.stderr
    env = json.loads(result.stdout)
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"}
    assert "parent-secret" not in result.stdout
    assert "OPENAI_API_KEY" not in env


def test_extra_env_is_passed_but_secrets_are_refused(run):
    result = run("import os\nprint(os.environ['GREETING'])", env={"GREETING": "hi"})
    assert result.stdout == "hi\n"
    with pytest.raises(ValueError, match=r"OPENAI_API_KEY"):
        run("print(1)", env={"OPENAI_API_KEY": "sk-x"})
    with pytest.raises(ValueError, match=r"DB_PASSWORD"):
        code_runner("1", env={"DB_PASSWORD": "x"})


def test_starts_in_an_empty_temporary_folder_that_is_removed(run):
    code = (
        "import json, os, tempfile\n"
        "open('made.txt', 'w').write('x')\n"
        "print(json.dumps({'cwd': os.getcwd(), 'before': sorted(os.listdir('.')) == ['made.txt'],"
        " 'home': os.environ['HOME'], 'tmp': tempfile.gettempdir()}))\n"
    )
    first = run(code)
    second = run("import os\nprint(os.getcwd())\nprint(os.listdir('.'))")
    assert first.ok, first.stderr
    info = json.loads(first.stdout)
    cwd = Path(info["cwd"])
    assert info["before"]  # only what the program made itself
    assert info["home"] == info["cwd"]
    assert info["tmp"] == info["cwd"]
    assert cwd.is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert not cwd.exists()
    assert not cwd.parent.exists()  # the script's folder is gone too
    second_cwd, listing = second.stdout.splitlines()
    assert second_cwd != info["cwd"]
    assert listing == "[]"


def test_stdin_is_closed(run):
    result = run("input()", timeout=10)
    assert result.exit_code == 1
    assert "EOFError" in result.stderr
    assert not result.timed_out


def test_memory_limit(run):
    result = run("x = bytearray(1024 ** 3)\nprint('allocated')", memory_limit=256 * 1024**2)
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr
    assert result.stdout == ""


def test_file_size_limit(run):
    result = run("open('big', 'wb').write(b'0' * 3 * 1024 ** 2)", max_file_size=1024**2)
    assert result.exit_code != 0
    assert "File too large" in result.stderr


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "timeout must be"),
        ({"timeout": float("inf")}, "timeout must be"),
        ({"memory_limit": 10}, "memory_limit must be"),
        ({"max_output": 1}, "max_output must be"),
    ],
)
def test_rejects_bad_limits(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_python("print(1)", **kwargs)


# -- the evaluator ------------------------------------------------------------------------


def test_code_runner_arguments():
    with pytest.raises(TypeError, match="expected_output"):
        code_runner()
    with pytest.raises(TypeError, match="not both"):
        code_runner("1", check=lambda result: True)
    with pytest.raises(TypeError, match="non-empty string"):
        code_runner("  ")
    with pytest.raises(ValueError, match="match must be one of 'exact', 'substring', 'regex'"):
        code_runner("1", match="prefix")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        code_runner("(", match="regex")
    with pytest.raises(TypeError, match="applies to expected_output"):
        code_runner(check=lambda result: True, match="regex")
    with pytest.raises(ValueError, match="isolation must be one of"):
        code_runner("1", isolation="vm")
    with pytest.raises(ValueError, match="max_processes must be"):
        code_runner("1", max_processes=-1)
    runner = code_runner("63245986", timeout=3)
    assert isinstance(runner, CodeRunner)
    assert runner.name == "code_runner"
    assert "63245986" in repr(runner)
    assert f"isolation={runner.isolation!r}" in repr(runner)
    assert runner.isolation in {"bwrap", "unshare", "process"}


# -- comparing the output -----------------------------------------------------------------


def test_expected_output_is_the_whole_output_by_default():
    """Regression: expected 63245986 was accepted when the program printed 163245986."""
    runner = code_runner("63245986")
    assert runner(_context("```python\nprint(163245986)\n```"))["stop"] is False
    assert runner(_context("```python\nprint(632459860)\n```"))["stop"] is False
    assert runner(_context("```python\nprint('fib:', 63245986)\n```"))["stop"] is False
    assert runner(_context("```python\nprint(63245986)\n```"))["stop"] is True
    # trailing whitespace, per line and at the end, does not count
    assert runner(_context("```python\nprint('63245986  \\n\\n')\n```"))["stop"] is True


@pytest.mark.parametrize(
    ("stdout", "expected", "exact"),
    [
        ("63245986\n", "63245986", True),
        ("63245986", "63245986\n", True),
        ("63245986 \t\r\n\n\n", "63245986", True),
        ("a  \nb\t\n", "a\nb", True),
        ("a\r\nb\r\n", "a\nb", True),
        ("163245986\n", "63245986", False),
        (" 63245986\n", "63245986", False),  # leading whitespace counts
        ("\n63245986\n", "63245986", False),  # so does a leading blank line
        ("a\n\nb\n", "a\nb", False),  # and a blank line between lines
        ("", "63245986", False),
    ],
)
def test_exact_match(stdout, expected, exact):
    assert output_matches(stdout, expected) is exact
    assert output_matches(stdout, expected, "exact") is exact


def test_substring_and_regex_only_when_asked_for():
    assert output_matches("163245986\n", "63245986", "substring")
    assert output_matches("fib(39) = 63245986\n", r"\b63245986\b", "regex")
    assert not output_matches("163245986\n", r"\b63245986\b", "regex")
    assert not output_matches("x", "63245986", "substring")
    lenient = code_runner(r"\b63245986\b", match="regex")
    assert "match='regex'" in repr(lenient)
    assert lenient(_context("```python\nprint('The answer is', 63245986)\n```"))["stop"] is True
    assert lenient(_context("```python\nprint(163245986)\n```"))["stop"] is False
    assert (
        code_runner("6324", match="substring")(_context("```python\nprint(63245986)\n```"))["stop"]
        is True
    )


def test_normalize_output():
    assert normalize_output("a  \r\nb\t\n\n") == "a\nb"
    assert normalize_output("  x\n") == "  x"


async def test_evaluator_sync_and_async_agree():
    runner = code_runner("63245986")
    right = _context("```python\nprint(63245986)\n```")
    assert runner(right) == await runner.aevaluate(right)
    evaluation = runner(right)
    assert evaluation["stop"] is True
    assert evaluation["score"] == 1.0
    assert "63245986" in evaluation["feedback"]
    assert runner.invoke(right) == evaluation
    assert await runner.ainvoke(right) == evaluation


def test_evaluator_with_a_check_function():
    runner = code_runner(check=lambda result: result.stdout.strip().isdigit())
    assert runner(_context("```python\nprint(12)\n```"))["stop"] is True
    assert runner(_context("```python\nprint('twelve')\n```"))["stop"] is False


def test_evaluator_reports_a_timeout():
    evaluation = code_runner("1", timeout=1)(
        _context("```python\nprint('start', flush=True)\nwhile True:\n    pass\n```")
    )
    assert evaluation["stop"] is False
    assert evaluation["score"] == 0.25
    assert "did not finish within 1 seconds" in evaluation["feedback"]
    assert "start" in evaluation["feedback"]


def test_the_runner_does_not_inherit_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "secret.txt").write_text("s")
    monkeypatch.chdir(tmp_path)
    result = run_python("import os\nprint(os.listdir('.'))")
    assert result.stdout == "[]\n"
    assert os.getcwd() == str(tmp_path)
