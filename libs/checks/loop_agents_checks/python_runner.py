"""The runner evaluator of seed 004: review the code in an answer, run it, judge the output.

The evaluator is a program, not a model. `code_runner` reviews each answer by rules
(exactly one Python code block, which prints its result), runs the code with
`loop_agents_checks.sandbox` (time, memory, output, file-size and process limits, an empty
temporary working folder, no secret of the caller readable, stdin closed, every process it
started killed afterwards) and feeds the error or the output back to the agent, until the
output is the expected answer.

What each isolation guards, and what it does not (the network, files the program's user may
read or write, ...), is in `loop_agents_checks.sandbox`.

Example:
    ```python
    from loop_agents import create_loop_agent
    from loop_agents_checks.python_runner import code_runner

    loop = create_loop_agent(coder, code_runner("63245986", timeout=10), max_iterations=5)
    ```
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_checks.code_review import (
    PYTHON_LANGUAGES,
    CodeReview,
    extract_python_blocks,
    review_code,
)
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
    "PYTHON_LANGUAGES",
    "CodeReview",
    "CodeRunner",
    "Match",
    "RunResult",
    "arun_python",
    "code_runner",
    "extract_python_blocks",
    "normalize_output",
    "output_matches",
    "review_code",
    "run_python",
]

Match = Literal["exact", "substring", "regex"]
"""How ``expected_output`` is compared with what the program printed."""
MATCHES: tuple[str, ...] = get_args(Match)

# -- comparing the output ---------------------------------------------------------------------


def normalize_output(text: str) -> str:
    r"""The text with trailing whitespace dropped from each line and from the end.

    Line endings (``\n``, ``\r\n``, ``\r``) become ``\n``; spaces and tabs at the end of
    each line, and blank lines and newlines at the end of the text, are dropped. Leading
    whitespace and blank lines before or between other lines are kept.

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
        match: ``"exact"``: the whole output equals ``expected`` once both are normalized
            by `normalize_output` (trailing whitespace of each line and of the end aside).
            ``"substring"``: ``expected`` occurs anywhere in the output. ``"regex"``:
            ``re.search(expected, stdout)`` finds a match (anchor it, or use ``\b``, to
            rule out longer numbers).

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
    criteria: str | None = None
    """What the runner checks, without the expected answer (the `Criteria` control)."""

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
        """Show what the runner checks, its time limit and the isolation it runs code in."""
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
    r"""Make the runner evaluator of seed 004: review by rules, run, judge the output.

    For each answer the evaluator

    1. reviews it by rules (`review_code`): exactly one Python code block, which parses
       and prints its result; otherwise it feeds the problems back without running;
    2. runs the code (`run_python` / `arun_python`, with the limits below);
    3. stops the loop when the run is clean and its output is right, else feeds back the
       error, the timeout or the output.

    Args:
        expected_output: What a right program prints. By default the whole output must
            be this text (see ``match``).
        check: Instead of ``expected_output``: a function of the `RunResult` of a clean
            run that says whether the answer is right.
        match: How ``expected_output`` is compared (`output_matches`): ``"exact"`` (the
            default: the whole output, trailing whitespace of each line and of the end
            aside), ``"substring"`` (anywhere in the output) or ``"regex"``
            (``re.search``).
        timeout: Seconds each program may run.
        memory_limit: Bytes of address space each program may use; ``None`` for no limit.
        max_output: Bytes of stdout and of stderr kept (and shown to the coder).
        max_file_size: The largest file a program may write; ``None`` for no limit.
        require_print: Reject code that never calls ``print`` before running it.
        python: The interpreter that runs the code; the current one by default.
        env: Extra environment variables for the program (secret-like names refused).
        isolation: Where the code runs: ``"auto"`` (the first that works of ``"bwrap"``,
            ``"unshare"`` and ``"process"``) or one of them; see `loop_agents_checks.sandbox`.
        max_processes: Processes and threads each program may have at once, itself
            included; ``None`` for no cap.

    Returns:
        A `CodeRunner`: a sync evaluator when called, an async one via ``aevaluate``,
        and a ``Runnable`` that a loop runs either way.

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
