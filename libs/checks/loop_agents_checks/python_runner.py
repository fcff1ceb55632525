"""`code_runner`, seed 004's runner: review the code in an answer, run it, judge the output.

The evaluator is a program, not a model: rules review the answer, `loop_agents_checks.sandbox`
runs it, and the error or the output goes back to the coder until the output is right.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_checks.code_review import CodeReview, review_code
from loop_agents_checks.sandbox import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
    Isolation,
    IsolationUnavailable,
    RunLimits,
    RunResult,
    arun_python,
    make_limits,
    resolve_isolation,
    run_python,
)

__all__ = [
    "MATCHES",
    "CodeRunner",
    "Match",
    "code_runner",
    "normalize_output",
    "output_matches",
]

Match = Literal["exact", "substring", "regex"]  # how expected_output is compared
MATCHES: tuple[str, ...] = get_args(Match)
Check = Callable[[RunResult], bool]  # decides from a clean run whether the answer is right


def normalize_output(text: str) -> str:
    r"""``text`` with ``\n`` line endings, without trailing whitespace per line or at the end.

    Example:
        ```python
        assert normalize_output("a  \r\nb\t\n\n") == "a\nb"
        ```
    """
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def output_matches(stdout: str, expected: str, match: Match = "exact") -> bool:
    r"""Whether a program's ``stdout`` is the ``expected`` output.

    Args:
        stdout: What the program printed.
        expected: The expected output, or a pattern for ``match="regex"``.
        match: ``"exact"``: equal once both are `normalize_output`-ed; ``"substring"``:
            ``expected`` occurs in it; ``"regex"``: ``re.search(expected, stdout)`` matches.

    Example:
        ```python
        assert output_matches("63245986\n", "63245986")
        assert not output_matches("163245986\n", "63245986")
        assert output_matches("fib(39) = 63245986\n", r"\b63245986\b", "regex")
        ```
    """
    if match == "exact":
        return normalize_output(stdout) == normalize_output(expected)
    if match == "substring":
        return expected in stdout
    return re.search(expected, stdout) is not None


class CodeRunner(Runnable[LoopContext, LoopEvaluation]):
    """The evaluator `code_runner` makes: ``runner(context)``, ``await runner.aevaluate(...)``.

    Scores: 0 when the review fails, 0.25 when the program fails or times out, 0.5 when
    it runs but its output is not right, 1 when it is right.
    """

    name: str | None = "code_runner"
    criteria: str | None = None  # what it checks, without the expected answer (`Criteria`)

    def __init__(
        self,
        check: Check,
        *,
        description: str,
        require_print: bool,
        limits: RunLimits,
    ) -> None:
        self.check = check
        self.description = description
        self.require_print = require_print
        self.limits = limits

    def __repr__(self) -> str:
        try:
            isolation = self.isolation
        except IsolationUnavailable:
            isolation = f"{self.limits.isolation} (unavailable)"
        return (
            f"CodeRunner({self.description}, timeout={self.limits.timeout:g}, "
            f"isolation={isolation!r})"
        )

    @property
    def isolation(self) -> str:
        """The isolation the code runs in here (``"auto"`` resolved), e.g. ``"bwrap"``."""
        return resolve_isolation(self.limits)

    def __call__(self, context: LoopContext) -> LoopEvaluation:
        """Evaluate the latest answer synchronously; see `evaluate`."""
        return self.evaluate(context)

    def evaluate(self, context: LoopContext) -> LoopEvaluation:
        """Review the latest answer's code, run it and judge the result (blocking)."""
        review = review_code(context["last_response"].text, require_print=self.require_print)
        if not review.ok or review.code is None:
            return self._rejected(review)
        return self.judge(run_python(review.code, **self.limits.options()))

    async def aevaluate(self, context: LoopContext) -> LoopEvaluation:
        """Review, run and judge without blocking the event loop."""
        review = review_code(context["last_response"].text, require_print=self.require_print)
        if not review.ok or review.code is None:
            return self._rejected(review)
        return self.judge(await arun_python(review.code, **self.limits.options()))

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
        """A run's result as a `LoopEvaluation` with feedback for the coder."""
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
    match: Match = "exact",
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    require_print: bool = True,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    isolation: Isolation = "auto",
    max_processes: int | None = DEFAULT_MAX_PROCESSES,
) -> CodeRunner:
    r"""Seed 004's runner evaluator: review the answer by rules, run it, judge the output.

    The review (`review_code`: exactly one Python block that parses and prints) fails
    without running; a clean run whose output is right stops the loop; otherwise the
    error, the timeout or the output is the feedback.

    Args:
        expected_output: What a right program prints (compared as ``match`` says).
        check: Instead of ``expected_output``: a function of a clean run's `RunResult`
            that says whether the answer is right.
        match: How ``expected_output`` is compared: ``"exact"``, ``"substring"`` or
            ``"regex"`` (see `output_matches`).
        timeout: Seconds each program may run.
        memory_limit: Bytes of address space each program may use; ``None``: no limit.
        max_output: Bytes of stdout and of stderr kept (and shown to the coder).
        max_file_size: The largest file a program may write; ``None``: no limit.
        require_print: Reject code that never calls ``print`` before running it.
        python: The interpreter that runs the code; the current one by default.
        env: Extra environment variables for the program (secret-like names refused).
        isolation: ``"auto"``, ``"bwrap"``, ``"unshare"`` or ``"process"`` (``docs/sandbox.md``).
        max_processes: Processes and threads each program may have at once; ``None``: no cap.

    Returns:
        A `CodeRunner`, a ``Runnable`` a loop runs sync or async.

    Raises:
        TypeError: neither or both of ``expected_output`` and ``check`` are given.
        ValueError: a limit or ``match`` is out of range, the regex does not compile, or
            ``env`` holds a secret-like name.
        IsolationUnavailable: the isolation asked for cannot run on this machine.

    Example:
        ```python
        from loop_agents import create_loop_agent
        from loop_agents_checks.python_runner import code_runner

        runner = code_runner("63245986", timeout=10)  # prints exactly 63245986
        lenient = code_runner(r"\b63245986\b", match="regex")  # "fib(39) = 63245986"
        loop = create_loop_agent(coder, runner, max_iterations=5)
        result = await loop.ainvoke({"messages": [("user", "What is the 39th Fibonacci number?")]})
        ```
    """
    if (expected_output is None) == (check is None):
        raise TypeError(
            "code_runner needs what a right answer prints: give expected_output (the text "
            "the program prints) or check (a function of the RunResult), not both"
        )
    if match not in MATCHES:
        raise ValueError(f"match must be one of {', '.join(map(repr, MATCHES))}; got {match!r}")
    if expected_output is not None:
        if not isinstance(expected_output, str) or not expected_output.strip():
            raise TypeError(f"expected_output must be a non-empty string; got {expected_output!r}")
        wanted = expected_output
        if match == "regex":
            try:
                re.compile(wanted)
            except re.error as exc:
                raise ValueError(
                    f"expected_output is not a valid regular expression ({exc}); got "
                    f"{wanted!r}. Use match='exact' or 'substring' for plain text"
                ) from exc
        output_rule = {
            "exact": "must be the expected answer (the whole output, trailing spaces aside)",
            "substring": "must contain the expected answer",
            "regex": "must contain the expected answer (a pattern is matched)",
        }[match]
        description = f"expected_output={wanted!r}"
        if match != "exact":
            description += f", match={match!r}"
        mode: Match = match

        def matches(result: RunResult) -> bool:
            return output_matches(result.stdout, wanted, mode)

        check = matches
    else:
        assert check is not None
        if match != "exact":
            raise TypeError(
                f"match={match!r} applies to expected_output; a check function decides by itself"
            )
        if not callable(check):
            raise TypeError(f"check must be a function of a RunResult; got {check!r:.60}")
        description = f"check={getattr(check, '__name__', repr(check))}"
        doc = (getattr(check, "__doc__", None) or "").strip()
        output_rule = (
            f"is checked: {doc.splitlines()[0].rstrip('.')}"
            if doc
            else "is checked by a test of its own"
        )
    limits = make_limits(
        timeout,
        memory_limit,
        max_output,
        max_file_size,
        python,
        env,
        isolation=isolation,
        max_processes=max_processes,
    )
    resolve_isolation(limits)  # an isolation that cannot run here: a clear error now
    runner = CodeRunner(check, description=description, require_print=require_print, limits=limits)
    prints = " that prints its result" if require_print else ""
    runner.criteria = (
        f"Answer with exactly one Python code block{prints}. It is run on its own, with a "
        f"time limit of {limits.timeout:g} s, and must finish without an error; its output "
        f"{output_rule}."
    )
    return runner
