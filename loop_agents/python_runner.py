r"""Run a Python program in a child process with limits against accidents (not a sandbox).

`run_python` (blocking) and `arun_python` (asyncio, does not block the event loop) run a
program as ``answer.py`` with ``python -I`` and return a `RunResult`. They are the runner
of `loop_agents.code_runner.code_runner`.

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
| leftovers | processes the program started are killed when it exits or times out |

Not stopped: reading or writing files elsewhere that your user may access, network access,
starting programs that leave the process group, killing your processes, filling the disk
with many files, or anything else a program running as your user may do. Run code from
models you do not trust in a container or a virtual machine.

Example:
    ```python
    from loop_agents.python_runner import run_python

    result = run_python("print(6 * 7)", timeout=5)
    assert result.ok and result.stdout == "42\n"
    ```
"""

from __future__ import annotations

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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunLimits", "RunResult", "arun_python", "make_limits", "run_python"]

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

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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
class RunLimits:
    """The limits a program runs under; validated when made.

    Attributes:
        timeout: Wall-clock seconds before the program and what it started are killed.
        memory_limit: Bytes of address space (``RLIMIT_AS``); ``None`` for no limit.
        max_output: Bytes kept of stdout and of stderr each (head and tail).
        max_file_size: The largest file, in bytes, the program may write; ``None`` for
            no limit.
        python: The interpreter; the current one by default.
        env: Extra environment variables; names that look like secrets are refused.

    Raises:
        ValueError: a limit is out of range or ``env`` holds a secret-like name.

    Example:
        ```python
        limits = RunLimits(timeout=5, memory_limit=256 * 1024**2)
        result = run_python("print(1)", **limits.options())
        ```
    """

    timeout: float = DEFAULT_TIMEOUT
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    max_output: int = DEFAULT_MAX_OUTPUT
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE
    python: str = field(default_factory=lambda: sys.executable)
    env: Mapping[str, str] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """These limits as keyword arguments of `run_python` and `arun_python`."""
        return {
            "timeout": self.timeout,
            "memory_limit": self.memory_limit,
            "max_output": self.max_output,
            "max_file_size": self.max_file_size,
            "python": self.python,
            "env": self.env,
        }

    def __post_init__(self) -> None:
        """Check every limit; see the class docstring."""
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


def _bootstrap(limits: RunLimits) -> str:
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
def _workspace(code: str, limits: RunLimits) -> Iterator[tuple[list[str], str, dict[str, str]]]:
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


def make_limits(
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RunLimits:
    """`RunLimits` from the keyword arguments of `run_python` (``None`` python: this one)."""
    return RunLimits(
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
    limits = make_limits(timeout, memory_limit, max_output, max_file_size, python, env)
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
    proc: subprocess.Popen[bytes], limits: RunLimits, started: float
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
            if not exited and (_has_exited(proc.pid) or _reaped(proc)):
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
    """Whether the child has exited, without reaping it (``WNOWAIT``).

    Where ``os.waitid`` is missing this says ``False``; callers then rely on reaping.
    """
    if not hasattr(os, "waitid"):  # pragma: no cover - platforms without waitid
        return False
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _reaped(proc: subprocess.Popen[bytes]) -> bool:
    """Fallback where ``os.waitid`` is missing: reap the child if it has exited."""
    return not hasattr(os, "waitid") and proc.poll() is not None


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
    limits = make_limits(timeout, memory_limit, max_output, max_file_size, python, env)
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
