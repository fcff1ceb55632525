"""The runner evaluator of seed 004: review the code in an answer, run it, judge the output.

The evaluator is a program, not a model. `code_runner` reviews each answer by rules
(exactly one Python code block, which prints its result), runs the code with
`loop_agents.python_runner` (time, memory, output and file-size limits, an empty temporary
working folder, no inherited secrets, stdin closed) and feeds the error or the output back
to the agent, until the output holds the expected answer.

The limits guard against **accidents**, not against a hostile program: this is **not a
security sandbox** (see `loop_agents.python_runner` for what is and is not stopped).

Example:
    ```python
    from loop_agents import create_loop_agent
    from loop_agents.code_runner import code_runner

    loop = create_loop_agent(coder, code_runner("63245986", timeout=10), max_iterations=5)
    ```
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.python_runner import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
    SCRIPT_NAME,
    RunLimits,
    RunResult,
    arun_python,
    make_limits,
    run_python,
)
from loop_agents.state import LoopContext, LoopEvaluation

__all__ = [
    "CodeReview",
    "CodeRunner",
    "RunResult",
    "arun_python",
    "code_runner",
    "extract_python_blocks",
    "review_code",
    "run_python",
]

PYTHON_LANGUAGES = frozenset({"", "python", "python3", "py", "py3"})
"""Code fence info strings that count as Python; ``""`` is an unlabeled fence."""

_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<code>.*?)"
    r"^[ \t]{0,3}(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

_OPENING_FENCE = re.compile(
    r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*(python3?|py3?)?[ \t]*$", re.MULTILINE | re.IGNORECASE
)

# -- extracting and reviewing code ----------------------------------------------------------


def extract_python_blocks(text: str) -> list[str]:
    r"""Return the Python code blocks of a Markdown answer, in order.

    A block is a fenced code block (three or more backticks or tildes) whose language is
    ``python``, ``python3``, ``py``, ``py3`` or not given. Blocks in other languages
    (``bash``, ``text``, ...) are left out.

    Args:
        text: The answer, e.g. ``context["last_response"].text``.

    Returns:
        The code of each Python block without its fences, possibly empty.

    Example:
        ```python
        answer = "Here:\n```python\nprint(1 + 1)\n```\nand the output:\n```text\n2\n```"
        assert extract_python_blocks(answer) == ["print(1 + 1)\n"]
        ```
    """
    blocks: list[str] = []
    for match in _FENCE.finditer(text):
        info = match.group("info").strip().split(maxsplit=1)
        language = info[0].lower() if info else ""
        if language in PYTHON_LANGUAGES:
            blocks.append(match.group("code"))
    return blocks


@dataclass(frozen=True)
class CodeReview:
    """The rule-based review of an answer, before anything runs.

    Attributes:
        code: The program, when the answer has exactly one Python block; else ``None``.
        problems: What is wrong, one sentence each, addressed to the coder; empty when
            the code may run.
    """

    code: str | None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the code passed the review and may run."""
        return self.code is not None and not self.problems


def review_code(text: str, *, require_print: bool = True) -> CodeReview:
    r"""Review an answer by rules: exactly one Python block that parses and prints its result.

    Args:
        text: The answer.
        require_print: Require a call of ``print`` (or ``sys.stdout.write``) in the code.

    Returns:
        A `CodeReview`; its ``problems`` say what to fix.

    Example:
        ```python
        review = review_code("```python\nx = 1 + 1\n```")
        assert review.problems == (
            "The program prints nothing: print the result with print(...).",
        )
        ```
    """
    blocks = extract_python_blocks(text)
    if not blocks and _OPENING_FENCE.search(_FENCE.sub("", text)):
        return CodeReview(
            None,
            (
                "The Python code block is not closed (the answer may have been cut off): "
                "write a short program and end the block with ```.",
            ),
        )
    if not blocks:
        return CodeReview(
            None,
            (
                "The answer has no Python code block: put the whole program in one "
                "```python ... ``` block.",
            ),
        )
    if len(blocks) > 1:
        return CodeReview(
            None,
            (
                f"The answer has {len(blocks)} Python code blocks; put the whole program in "
                f"exactly one ```python ... ``` block.",
            ),
        )
    code = blocks[0]
    if not code.strip():
        return CodeReview(code, ("The Python code block is empty: write the program in it.",))
    try:
        tree = ast.parse(code, filename=SCRIPT_NAME)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "the code"
        return CodeReview(
            code,
            (f"The program does not compile: SyntaxError at {where}: {exc.msg.rstrip('.?!')}.",),
        )
    if require_print and not _prints(tree):
        return CodeReview(code, ("The program prints nothing: print the result with print(...).",))
    return CodeReview(code)


def _prints(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in {"print", "pprint"}:
            return True
        if isinstance(func, ast.Attribute) and func.attr in {"write", "print", "pprint"}:
            return True
    return False


# -- the evaluator ----------------------------------------------------------------------------

Check = Callable[[RunResult], bool]
"""Decides from a clean run whether the answer is right."""


class CodeRunner(Runnable[LoopContext, LoopEvaluation]):
    """An evaluator that reviews the code in an answer, runs it and judges its output.

    Made by `code_runner`. Call it like a function (``runner(context)``, synchronous) or
    await ``runner.aevaluate(context)``; as a ``Runnable`` it is run synchronously by a
    loop's ``invoke``/``stream`` and with an asyncio subprocess by ``ainvoke``/``astream``.

    Scores: 0 when the review fails, 0.25 when the program fails or times out, 0.5 when
    it runs but its output is not right, 1 when it is right.
    """

    name: str | None = "code_runner"

    def __init__(
        self,
        check: Check,
        *,
        description: str,
        require_print: bool,
        limits: RunLimits,
    ) -> None:
        """Use `code_runner` to make one."""
        self.check = check
        self.description = description
        self.require_print = require_print
        self.limits = limits

    def __repr__(self) -> str:
        """Show what the runner checks and its time limit."""
        return f"CodeRunner({self.description}, timeout={self.limits.timeout:g})"

    def __call__(self, context: LoopContext) -> LoopEvaluation:
        """Evaluate the latest answer synchronously; see `evaluate`."""
        return self.evaluate(context)

    def evaluate(self, context: LoopContext) -> LoopEvaluation:
        """Review the latest answer's code, run it and judge the result (blocking).

        Example:
            ```python
            evaluation = code_runner("63245986").evaluate(context)
            ```
        """
        review = review_code(context["last_response"].text, require_print=self.require_print)
        if not review.ok or review.code is None:
            return self._rejected(review)
        return self.judge(run_python(review.code, **self._run_options()))

    async def aevaluate(self, context: LoopContext) -> LoopEvaluation:
        """Review, run and judge without blocking the event loop.

        Example:
            ```python
            evaluation = await code_runner("63245986").aevaluate(context)
            ```
        """
        review = review_code(context["last_response"].text, require_print=self.require_print)
        if not review.ok or review.code is None:
            return self._rejected(review)
        return self.judge(await arun_python(review.code, **self._run_options()))

    def invoke(
        self, input: LoopContext, config: RunnableConfig | None = None, **kwargs: Any
    ) -> LoopEvaluation:
        """Evaluate synchronously (the loop's ``invoke``/``stream``)."""
        return self.evaluate(input)

    async def ainvoke(
        self, input: LoopContext, config: RunnableConfig | None = None, **kwargs: Any
    ) -> LoopEvaluation:
        """Evaluate with an asyncio subprocess (the loop's ``ainvoke``/``astream``)."""
        return await self.aevaluate(input)

    def _run_options(self) -> dict[str, Any]:
        return self.limits.options()

    def _rejected(self, review: CodeReview) -> LoopEvaluation:
        problems = "\n".join(f"- {problem}" for problem in review.problems)
        return {
            "stop": False,
            "feedback": (
                f"The code reviewer found problems; fix them and send the whole program "
                f"again:\n{problems}"
            ),
            "score": 0.0,
        }

    def judge(self, result: RunResult) -> LoopEvaluation:
        """Turn a run's result into a `LoopEvaluation` with feedback for the coder.

        Example:
            ```python
            runner = code_runner("45")
            assert runner.judge(run_python("print(sum(range(10)))"))["stop"] is True
            ```
        """
        note = " (output cut: it was too long)" if result.truncated else ""
        if result.timed_out:
            return {
                "stop": False,
                "feedback": (
                    f"The program did not finish within {self.limits.timeout:g} seconds and "
                    f"was stopped{note}. Make it faster (no endless loops, no input()).\n"
                    f"{_section('Output before it was stopped', result.stdout)}"
                ),
                "score": 0.25,
            }
        if result.exit_code != 0:
            how = (
                f"was killed by signal {-result.exit_code}"
                if result.exit_code < 0
                else f"failed with exit code {result.exit_code}"
            )
            return {
                "stop": False,
                "feedback": (
                    f"The program {how}{note}. Fix the error and send the whole program "
                    f"again.\n{_section('Error', result.stderr)}"
                    f"{_section('Output', result.stdout) if result.stdout.strip() else ''}"
                ),
                "score": 0.25,
            }
        if self.check(result):
            return {
                "stop": True,
                "feedback": f"The program ran and printed the answer{note}.\n"
                f"{_section('Output', result.stdout)}",
                "score": 1.0,
            }
        return {
            "stop": False,
            "feedback": (
                f"The program ran but its output is not the answer to the task{note}. Check "
                f"the logic (and indexing) and send the whole program again.\n"
                f"{_section('Output', result.stdout)}"
            ),
            "score": 0.5,
        }


def _section(title: str, text: str) -> str:
    body = text.rstrip("\n") or "(nothing)"
    return f"{title}:\n```text\n{body}\n```\n"


def code_runner(
    expected_output: str | None = None,
    *,
    check: Check | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    require_print: bool = True,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CodeRunner:
    """Make the runner evaluator of seed 004: review by rules, run, judge the output.

    For each answer the evaluator

    1. reviews it by rules (`review_code`): exactly one Python code block, which parses
       and prints its result; otherwise it feeds the problems back without running;
    2. runs the code (`run_python` / `arun_python`, with the limits below);
    3. stops the loop when the run is clean and its output is right, else feeds back the
       error, the timeout or the output.

    Args:
        expected_output: The loop stops when the program's stdout contains this text.
        check: Instead of ``expected_output``: a function of the `RunResult` of a clean
            run that says whether the answer is right.
        timeout: Seconds each program may run.
        memory_limit: Bytes of address space each program may use; ``None`` for no limit.
        max_output: Bytes of stdout and of stderr kept (and shown to the coder).
        max_file_size: The largest file a program may write; ``None`` for no limit.
        require_print: Reject code that never calls ``print`` before running it.
        python: The interpreter that runs the code; the current one by default.
        env: Extra environment variables for the program (secret-like names refused).

    Returns:
        A `CodeRunner`: a sync evaluator when called, an async one via ``aevaluate``,
        and a ``Runnable`` that a loop runs either way.

    Raises:
        TypeError: neither or both of ``expected_output`` and ``check`` are given.
        ValueError: a limit is out of range or ``env`` holds a secret-like name.

    Example:
        ```python
        from loop_agents import create_loop_agent
        from loop_agents.code_runner import code_runner

        runner = code_runner("63245986", timeout=10)
        loop = create_loop_agent(coder, runner, max_iterations=5)
        result = await loop.ainvoke({"messages": [("user", "What is the 39th Fibonacci number?")]})
        ```
    """
    if (expected_output is None) == (check is None):
        raise TypeError(
            "code_runner needs what a right answer prints: give expected_output (a text the "
            "output must contain) or check (a function of the RunResult), not both"
        )
    if expected_output is not None:
        if not isinstance(expected_output, str) or not expected_output.strip():
            raise TypeError(f"expected_output must be a non-empty string; got {expected_output!r}")
        wanted = expected_output
        description = f"expected_output={wanted!r}"

        def contains(result: RunResult) -> bool:
            return wanted in result.stdout

        check = contains
    else:
        assert check is not None
        if not callable(check):
            raise TypeError(f"check must be a function of a RunResult; got {check!r:.60}")
        description = f"check={getattr(check, '__name__', repr(check))}"
    limits = make_limits(timeout, memory_limit, max_output, max_file_size, python, env)
    return CodeRunner(check, description=description, require_print=require_print, limits=limits)
