"""Run the Python code in an agent's answer, and an evaluator that judges answers by running them.

This is seed 004's *runner*: the evaluator is a program, not a model. `code_runner` reviews
the answer by rules (exactly one Python code block, which prints its result), runs the code
in a child process and feeds the error or the output back to the agent, until the output
holds the expected answer.

The child process runs with guards against **accidents** (an endless loop, a runaway
allocation, a flood of output, a stray file, a leaked API key), not against a hostile
program. It is **not a security sandbox**:

| guarded | how |
| --- | --- |
| time | wall-clock limit; the whole process group is killed when it is reached |
| CPU | ``RLIMIT_CPU`` a little above the time limit, as a backstop |
| memory | ``RLIMIT_AS`` (address space); allocations beyond it raise ``MemoryError`` |
| output | at most ``max_output`` bytes per stream kept (head and tail), the rest dropped |
| files written | ``RLIMIT_FSIZE`` caps the size of any one file the program writes |
| working folder | a fresh empty temporary folder (also ``HOME``, ``TMPDIR``), removed after |
| environment | minimal: ``PATH``, ``HOME``, ``TMPDIR``, ``LANG``; no API keys, tokens, secrets |
| stdin | ``/dev/null``: ``input()`` raises ``EOFError`` instead of waiting forever |

Not stopped: reading or writing files elsewhere that your user may access, network access,
starting other programs, killing your processes, exhausting disk space with many files, or
anything else a program running as your user may do. Run code from models you do not trust
in a container or a virtual machine.

Example:
    ```python
    from loop_agents import create_loop_agent
    from loop_agents.code_runner import code_runner

    loop = create_loop_agent(coder, code_runner("63245986", timeout=10), max_iterations=5)
    ```
"""

from __future__ import annotations

import ast
import asyncio
import math
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

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

DEFAULT_TIMEOUT = 10.0
"""Seconds a program may run."""
DEFAULT_MEMORY_LIMIT = 512 * 1024 * 1024
"""Bytes of address space a program may use (``RLIMIT_AS``)."""
DEFAULT_MAX_OUTPUT = 10_000
"""Bytes of stdout and of stderr kept."""
DEFAULT_MAX_FILE_SIZE = 16 * 1024 * 1024
"""Bytes any one file written by the program may have (``RLIMIT_FSIZE``)."""

SCRIPT_NAME = "answer.py"
"""The file name the program is given; tracebacks show it."""

PYTHON_LANGUAGES = frozenset({"", "python", "python3", "py", "py3"})
"""Code fence info strings that count as Python; ``""`` is an unlabeled fence."""

_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<code>.*?)"
    r"^[ \t]{0,3}(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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
            code, (f"The program does not compile: SyntaxError at {where}: {exc.msg}.",)
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


# -- running code ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """What happened when a program ran.

    Attributes:
        exit_code: The process's exit status; negative when a signal ended it
            (``-9`` after the time limit).
        stdout: What it printed (decoded as UTF-8, undecodable bytes replaced).
        stderr: Its error output, e.g. a traceback.
        timed_out: Whether it was killed at the time limit.
        truncated: Whether some stdout or stderr was dropped for the output limit.
        seconds: Wall-clock run time.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the program finished in time with exit code 0."""
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class _Limits:
    timeout: float
    memory_limit: int | None
    max_output: int
    max_file_size: int | None
    python: str
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout, int | float) and math.isfinite(self.timeout)) or (
            self.timeout <= 0
        ):
            raise ValueError(f"timeout must be a number of seconds > 0; got {self.timeout!r}")
        for name in ("memory_limit", "max_file_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1024 * 1024):
                raise ValueError(
                    f"{name} must be a number of bytes >= 1 MiB, or None for no limit; "
                    f"got {value!r}"
                )
        if not isinstance(self.max_output, int) or self.max_output < 16:
            raise ValueError(f"max_output must be a number of bytes >= 16; got {self.max_output!r}")
        secrets = sorted(name for name in self.env if _SECRET_NAME.search(name))
        if secrets:
            raise ValueError(
                f"env must not pass secrets to code from an answer; remove {secrets} "
                f"(names with KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL are refused)"
            )


class _Capped:
    """Keeps the first and last bytes of a stream, at most ``limit`` in all."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            self.dropped += excess
            del self.tail[:excess]

    def text(self, workdir: str) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            text = f"{head}\n... [{self.dropped} bytes cut: output limit] ...\n{tail}"
        else:
            text = (self.head + self.tail).decode("utf-8", "replace")
        return _tidy_paths(text, workdir)


def _tidy_paths(text: str, root: str) -> str:
    """Show the script as ``answer.py`` in tracebacks, not by its temporary path."""
    return text.replace(os.path.join(root, SCRIPT_NAME), SCRIPT_NAME)


def _bootstrap(limits: _Limits) -> str:
    """The child's first program: set the resource limits, then become the real program.

    Limits are set in the child (never in this process) and survive ``execv``; a limit is
    lowered to the hard limit already in force when that one is lower.
    """
    cpu = math.ceil(limits.timeout) + 1
    wanted = [("RLIMIT_CPU", cpu), ("RLIMIT_CORE", 0)]
    if limits.memory_limit is not None:
        wanted.append(("RLIMIT_AS", limits.memory_limit))
    if limits.max_file_size is not None:
        wanted.append(("RLIMIT_FSIZE", limits.max_file_size))
    return "\n".join(
        [
            "import os, resource, sys",
            "def limit(name, value):",
            "    which = getattr(resource, name)",
            "    hard = resource.getrlimit(which)[1]",
            "    if hard != resource.RLIM_INFINITY:",
            "        value = min(value, hard)",
            "    resource.setrlimit(which, (value, value))",
            *(f"limit({name!r}, {value})" for name, value in wanted),
            "os.execv(sys.executable, [sys.executable, '-I', '-X', 'utf8', sys.argv[1]])",
        ]
    )


@contextmanager
def _workspace(code: str, limits: _Limits) -> Iterator[tuple[list[str], str, dict[str, str]]]:
    """A temporary folder holding the script and an empty working folder; removed after."""
    with tempfile.TemporaryDirectory(prefix="loop_agents_run_", ignore_cleanup_errors=True) as root:
        script = os.path.join(root, SCRIPT_NAME)
        Path(script).write_text(code, encoding="utf-8")
        workdir = os.path.join(root, "work")
        os.mkdir(workdir)
        env = {
            "PATH": os.environ.get("PATH", _SAFE_PATH),
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **limits.env,
        }
        command = [limits.python, "-I", "-c", _bootstrap(limits), script]
        yield command, workdir, env


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _limits(
    timeout: float,
    memory_limit: int | None,
    max_output: int,
    max_file_size: int | None,
    python: str | None,
    env: Mapping[str, str] | None,
) -> _Limits:
    return _Limits(
        timeout=timeout,
        memory_limit=memory_limit,
        max_output=max_output,
        max_file_size=max_file_size,
        python=python or sys.executable,
        env=dict(env or {}),
    )


def run_python(
    code: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    r"""Run a Python program in a child process with limits, and wait for it.

    The program runs as ``answer.py`` with ``python -I`` (isolated mode) in a fresh empty
    temporary folder that is removed afterwards, with a minimal environment (``PATH``,
    ``HOME`` and ``TMPDIR`` set to that folder, ``LANG``) and stdin closed. A guard
    against accidents, not a security sandbox: see the module docstring.

    Args:
        code: The program's source.
        timeout: Wall-clock seconds before the program (with everything it started) is
            killed.
        memory_limit: Bytes of address space (``RLIMIT_AS``); ``None`` for no limit.
        max_output: Bytes kept of stdout and of stderr each; the head and the tail are
            kept and the middle is dropped.
        max_file_size: The largest file, in bytes, the program may write; ``None`` for no
            limit.
        python: The interpreter; the current one by default.
        env: Extra environment variables for the program. Names that look like secrets
            (containing KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL) are refused.

    Returns:
        A `RunResult`.

    Raises:
        ValueError: a limit is out of range or ``env`` holds a secret-like name.

    Example:
        ```python
        result = run_python("print(sum(range(10)))", timeout=5)
        assert result.ok and result.stdout == "45\n"
        ```
    """
    limits = _limits(timeout, memory_limit, max_output, max_file_size, python, env)
    with _workspace(code, limits) as (command, workdir, child_env):
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err, timed_out = _collect(proc, limits, started)
        finally:
            _kill_group(proc.pid)  # the program's leftover children, and it on errors
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        seconds = time.monotonic() - started
        root = os.path.dirname(workdir)
        return RunResult(
            exit_code=proc.returncode,
            stdout=out.text(root),
            stderr=err.text(root),
            timed_out=timed_out,
            truncated=bool(out.dropped or err.dropped),
            seconds=seconds,
        )


def _collect(
    proc: subprocess.Popen[bytes], limits: _Limits, started: float
) -> tuple[_Capped, _Capped, bool]:
    """Read stdout and stderr until the program ends or the time limit; kill what is left.

    When the program exits, whatever it started and left running is killed at once (the
    exited program is not reaped yet, so its process group id cannot be reused meanwhile).
    """
    out, err = _Capped(limits.max_output), _Capped(limits.max_output)
    deadline = started + limits.timeout
    with selectors.DefaultSelector() as selector:
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                selector.register(stream, selectors.EVENT_READ, data=sink)
        exited = False
        while not (exited and not selector.get_map()):
            if not exited and _has_exited(proc.pid):
                exited = True
                _kill_group(proc.pid)
            left = deadline - time.monotonic()
            if left <= 0 and not exited:
                _kill_group(proc.pid)
                return out, err, True
            wait = 0.05 if exited else min(max(left, 0.0), 0.05)
            if not selector.get_map():
                time.sleep(wait)
                continue
            for key, _ in selector.select(timeout=wait):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.add(chunk)
                else:
                    selector.unregister(key.fileobj)
    return out, err, False


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (``WNOWAIT``)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


async def arun_python(
    code: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """Like `run_python`, with an asyncio subprocess: the event loop is not blocked.

    Args:
        code: The program's source.
        timeout: Wall-clock seconds before the program is killed.
        memory_limit: Bytes of address space; ``None`` for no limit.
        max_output: Bytes kept of stdout and of stderr each.
        max_file_size: The largest file the program may write; ``None`` for no limit.
        python: The interpreter; the current one by default.
        env: Extra environment variables; secret-like names are refused.

    Returns:
        A `RunResult`.

    Raises:
        ValueError: a limit is out of range or ``env`` holds a secret-like name.

    Example:
        ```python
        result = await arun_python("while True: pass", timeout=1)
        assert result.timed_out
        ```
    """
    limits = _limits(timeout, memory_limit, max_output, max_file_size, python, env)
    with _workspace(code, limits) as (command, workdir, child_env):
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=workdir,
            env=child_env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out, err = _Capped(limits.max_output), _Capped(limits.max_output)
        timed_out = False
        assert proc.stdout is not None
        assert proc.stderr is not None
        readers = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
        try:
            timed_out = not await _exit_within(proc, started + limits.timeout)
            _kill_group(proc.pid)  # at the time limit, or what the program left running
            with suppress(TimeoutError):  # a pipe held open by a process that escaped
                await asyncio.wait_for(asyncio.shield(readers), timeout=5)
        finally:
            readers.cancel()
            _kill_group(proc.pid)
            await proc.wait()
        seconds = time.monotonic() - started
        root = os.path.dirname(workdir)
        return RunResult(
            exit_code=proc.returncode if proc.returncode is not None else -signal.SIGKILL,
            stdout=out.text(root),
            stderr=err.text(root),
            timed_out=timed_out,
            truncated=bool(out.dropped or err.dropped),
            seconds=seconds,
        )


async def _exit_within(proc: asyncio.subprocess.Process, deadline: float) -> bool:
    """Wait until the program exits (not its pipes: a child it started may hold them)."""
    while proc.returncode is None and not _has_exited(proc.pid):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, 0.02))
    return True


async def _drain(stream: asyncio.StreamReader, sink: _Capped) -> None:
    while chunk := await stream.read(65536):
        sink.add(chunk)


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
        limits: _Limits,
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
        return {
            "timeout": self.limits.timeout,
            "memory_limit": self.limits.memory_limit,
            "max_output": self.limits.max_output,
            "max_file_size": self.limits.max_file_size,
            "python": self.limits.python,
            "env": self.limits.env,
        }

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
    limits = _limits(timeout, memory_limit, max_output, max_file_size, python, env)
    return CodeRunner(check, description=description, require_print=require_print, limits=limits)
