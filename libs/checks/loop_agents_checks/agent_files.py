"""`files_check`: a graph agent's files, tested in the sandbox; the failures are the feedback.

A deep agent keeps its files in its state (``context["agent_state"]["files"]``); the check
writes them into a fresh folder in `loop_agents_checks.sandbox` and runs your tests there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from langchain_core.runnables import RunnableConfig

from loop_agents.evaluators.base import make_evaluator
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_checks.sandbox import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
    Isolation,
    RunResult,
    arun_python,
    make_limits,
    run_python,
)
from loop_agents_checks.sandbox.text_files import utf8_text

MAX_FILES_BYTES = 4 * 1024 * 1024  # the most bytes of files written into the sandbox

_LAUNCHER = """
import json, os, pathlib, sys, traceback
files = json.loads({files!r})
for name, text in files.items():
    path = pathlib.Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
pathlib.Path({test_file!r}).write_text({tests!r}, encoding="utf-8")
sys.path.insert(0, os.getcwd())
namespace = {{"__name__": "__main__", "__file__": {test_file!r}}}
try:
    exec(compile({tests!r}, {test_file!r}, "exec"), namespace)
except BaseException:
    print("Loading the tests failed:", file=sys.stderr)
    traceback.print_exc()
    sys.exit(1)
failed = 0
tests = [(n, f) for n, f in namespace.items() if n.startswith("test") and callable(f)]
for name, test in tests:
    try:
        test()
    except BaseException:
        failed += 1
        print(f"FAILED {{name}}:", file=sys.stderr)
        traceback.print_exc()
    else:
        print(f"passed {{name}}")
print(f"{{len(tests) - failed}} of {{len(tests)}} test functions passed")
sys.exit(1 if failed else 0)
"""


def file_texts(files: object) -> dict[str, str]:
    r"""The agent's files as ``{relative path: text}``.

    A value is a text, a list of lines or a deepagents file record (``{"content": ...}``);
    absolute paths (``/solution.py``) are taken relative to the test folder.

    Raises:
        ValueError: a path that leaves the folder (``..``) or a value that holds no text.

    Example:
        ```python
        file_texts({"/solution.py": {"content": "x = 1\\n"}})  # {'solution.py': 'x = 1\\n'}
        ```
    """
    if not isinstance(files, Mapping):
        raise ValueError(f"the agent's files are {type(files).__name__}, not a mapping")
    texts: dict[str, str] = {}
    for name, value in files.items():
        path = PurePosixPath(str(name).lstrip("/"))
        if not path.parts or ".." in path.parts:
            raise ValueError(f"the file name {name!r} leaves the folder the tests run in")
        content = value.get("content") if isinstance(value, Mapping) else value
        if isinstance(content, list):
            content = "\n".join(str(line) for line in content)
        if not isinstance(content, str):
            raise ValueError(f"the file {name!r} holds {type(content).__name__}, not text")
        texts[str(path)] = content
    return texts


class FilesCheck:
    """The body of a `files_check` evaluator."""

    def __init__(self, tests: str, *, files_key: str, test_file: str, **limits: Any) -> None:
        self.tests = tests
        self.files_key = files_key
        self.test_file = test_file
        self.limits = make_limits(**limits)

    def program(self, context: LoopContext) -> str | LoopEvaluation:
        """The launcher to run, or the verdict when there is nothing to run."""
        state = context.get("agent_state") or {}
        files = state.get(self.files_key)
        if not files:
            return {
                "stop": False,
                "feedback": (
                    f"No files were written (the agent's state has no {self.files_key!r}). "
                    f"Write the solution into files with your file tools; the tests import "
                    f"it from them."
                ),
                "score": 0.0,
            }
        try:
            # lone surrogates (half a character) have no UTF-8: written as U+FFFD
            texts = {name: utf8_text(text) for name, text in file_texts(files).items()}
        except ValueError as error:
            return {
                "stop": False,
                "feedback": f"The files cannot be tested: {error}.",
                "score": 0.0,
            }
        if sum(len(t.encode("utf-8")) for t in texts.values()) > MAX_FILES_BYTES:
            return {
                "stop": False,
                "feedback": f"The files hold more than {MAX_FILES_BYTES} bytes; keep them small.",
                "score": 0.0,
            }
        return _LAUNCHER.format(files=json.dumps(texts), test_file=self.test_file, tests=self.tests)

    def judge(self, result: RunResult, context: LoopContext) -> LoopEvaluation:
        """The verdict of a test run."""
        files = (context.get("agent_state") or {}).get(self.files_key) or {}
        listed = ", ".join(sorted(files))
        if result.timed_out:
            return {
                "stop": False,
                "feedback": (
                    f"The tests did not finish within {self.limits.timeout:g} seconds with "
                    f"the files {listed}; look for an endless loop or a wait for input.\n"
                    f"{_section('Output', result.stdout)}"
                ),
                "score": 0.0,
            }
        if result.exit_code == 0:
            return {"stop": True, "feedback": "", "score": 1.0}
        return {
            "stop": False,
            "feedback": (
                f"The tests failed with the files {listed}. Fix the files (not the tests).\n"
                f"{_section('Failures', result.stderr)}{_section('Output', result.stdout)}"
            ),
            "score": 0.0,
        }


def _section(title: str, text: str) -> str:
    body = text.rstrip("\n")
    return f"{title}:\n```text\n{body}\n```\n" if body else ""


def files_check(
    tests: str,
    *,
    files_key: str = "files",
    test_file: str = "test_agent_files.py",
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    python: str | None = None,
    isolation: Isolation = "auto",
    max_processes: int | None = DEFAULT_MAX_PROCESSES,
    name: str = "files_check",
) -> LoopEvaluatorRunnable:
    r"""Test the files a graph agent wrote (its state's ``files``) in the sandbox.

    The attempt's files (``context["agent_state"][files_key]``) and ``tests`` (as
    ``test_file``) are written into a fresh folder and run there: the answer is accepted
    when the script runs and every top-level ``test_*`` function passes; otherwise the
    failures, with their tracebacks, are the feedback.

    Args:
        tests: The tests, a Python script that imports the agent's files as modules.
        files_key: The agent's state key holding its files (a deep agent's ``files``).
        test_file: The tests' file name in the folder.
        timeout: Seconds the tests may run.
        memory_limit: Bytes of address space they may use (``None``: no limit).
        max_output: Bytes of output kept (and shown to the agent).
        python: The interpreter (default: the current one).
        isolation: The sandbox's isolation (see `loop_agents_checks.sandbox`).
        max_processes: Processes and threads the tests may have at once.
        name: The evaluator's name.

    Returns:
        An evaluator (sync and async).

    Raises:
        TypeError: ``tests`` is not a text.
        ValueError: ``tests`` does not compile, or a limit is out of range.

    Example:
        ```python
        tests = files_check("from solution import add\\nassert add(2, 3) == 5\\n")
        loop = create_loop_agent(create_deep_agent(model=model), tests, 4)
        ```
    """
    if not isinstance(tests, str) or not tests.strip():
        raise TypeError(f"tests must be Python source (a non-empty text); got {tests!r:.60}")
    try:
        compile(tests, test_file, "exec")
    except SyntaxError as error:
        raise ValueError(f"the tests do not compile: {error}") from error
    check = FilesCheck(
        tests,
        files_key=files_key,
        test_file=test_file,
        timeout=timeout,
        memory_limit=memory_limit,
        max_output=max_output,
        python=python,
        isolation=isolation,
        max_processes=max_processes,
    )

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        program = check.program(context)
        if not isinstance(program, str):
            return program
        return check.judge(run_python(program, **check.limits.options()), context)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        program = check.program(context)
        if not isinstance(program, str):
            return program
        return check.judge(await arun_python(program, **check.limits.options()), context)

    criteria = f"The files pass these tests:\n{tests.strip()}"
    return make_evaluator(name, evaluate, aevaluate, criteria=criteria)
