"""`run_python` and `arun_python`: start a program in its isolation, read it, clean up."""

from __future__ import annotations

import asyncio
import logging
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TypeVar, Unpack

from loop_agents_checks.sandbox.cleanup import remove_tree
from loop_agents_checks.sandbox.isolation import (
    Plan,
    choose_identity,
    make_plan,
    supervisor_command,
)
from loop_agents_checks.sandbox.limits import (
    GRACE_SECONDS,
    SCRIPT_NAME,
    RunLimits,
    RunOptions,
    make_limits,
)
from loop_agents_checks.sandbox.processes import children, kill_tree_of, kill_uid
from loop_agents_checks.sandbox.result import CappedOutput, RunResult
from loop_agents_checks.sandbox.text_files import write_utf8

__all__ = ["arun_python", "in_thread", "run_python", "run_supervised"]

logger = logging.getLogger("loop_agents")

T = TypeVar("T")

_POLL = 0.02  # seconds between checks whether the program has exited


@contextmanager
def _workspace(code: str, uid: int | None) -> Iterator[tuple[str, str, str]]:
    """A temporary folder with the script and an empty working folder; removed after."""
    root = tempfile.mkdtemp(prefix="loop_agents_run_")
    try:
        script = os.path.join(root, SCRIPT_NAME)
        write_utf8(script, code)
        workdir = os.path.join(root, "work")
        os.mkdir(workdir)
        if uid is not None:  # the program's own user must be able to work there
            for path in (root, script, workdir):
                os.chown(path, uid, uid)
        yield root, workdir, script
    finally:
        try:
            remove_tree(root)
        except OSError as exc:  # pragma: no cover - only if the kernel refused
            logger.warning("%s", exc)


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (``WNOWAIT``)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _read_ready(selector: selectors.BaseSelector, wait: float) -> None:
    """Read whatever the pipes hold now, waiting at most ``wait`` for the first bytes."""
    for key, _ in selector.select(timeout=wait):
        try:
            chunk = os.read(key.fd, 65536)
        except BlockingIOError:
            continue
        if chunk:
            key.data.add(chunk)
        else:
            selector.unregister(key.fileobj)


def _collect(
    proc: subprocess.Popen[bytes],
    selector: selectors.BaseSelector,
    deadline: float,
    cancel: threading.Event | None,
) -> bool:
    """Read the pipes until the supervisor exits or the deadline; whether it timed out."""
    # not until EOF: a program may close its stdout and go on, a child may hold the pipes
    while not _has_exited(proc.pid):
        left = deadline - time.monotonic()
        if left <= 0 or (cancel is not None and cancel.is_set()):
            return True
        if selector.get_map():
            _read_ready(selector, min(left, _POLL))
        else:
            time.sleep(min(left, _POLL))
    return False


def _drain(selector: selectors.BaseSelector, until: float) -> None:
    """Read what is left in the pipes, until they close or ``until``."""
    while selector.get_map():
        left = until - time.monotonic()
        if left <= 0:
            return
        _read_ready(selector, min(left, _POLL))


def _cleanup(plan: Plan, proc: subprocess.Popen[bytes], python: str, until: float) -> None:
    """Kill every process of the run, the supervisor last, and reap the supervisor."""
    within = max(until - time.monotonic(), 0.05)
    if plan.uid is not None:  # one kill(-1) as the run's own user reaches all of them
        kill_uid(plan.uid, python, within=within)
    elif plan.isolation != "process":
        # Killing the namespace's init kills every process in it; bwrap or unshare,
        # which waits for it, then exits: that exit says the namespace is empty.
        if not _has_exited(proc.pid):
            for init in children(proc.pid):
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(init, signal.SIGKILL)
    elif not _has_exited(proc.pid):  # the plain process isolation: the supervisor kills
        with suppress(ProcessLookupError, PermissionError):
            proc.send_signal(signal.SIGTERM)
    if plan.cgroup is not None:
        plan.cgroup.kill(within=max(until - time.monotonic(), 0.05))
    while not _has_exited(proc.pid) and time.monotonic() < until:
        time.sleep(0.005)
    kill_tree_of(proc.pid)  # the supervisor's group, if it is still there
    proc.wait()
    if plan.cgroup is not None:
        plan.cgroup.remove(within=max(until - time.monotonic(), 0.05))


def _program_exit(status_fd: int, returncode: int) -> int:
    """How the program ended, as the supervisor reported it (else how the supervisor did)."""
    try:
        text = os.read(status_fd, 64).decode("ascii", "replace").split()
    except OSError:
        text = []
    if len(text) == 2 and text[1].lstrip("-").isdigit():
        return int(text[1]) if text[0] == "exit" else -int(text[1])
    return returncode if returncode < 0 else -signal.SIGKILL


def _execute(code: str, limits: RunLimits, cancel: threading.Event | None = None) -> RunResult:
    # arun_python runs this in a thread of its own: the event loop never owns a pipe or a
    # child watcher that a leftover process could keep busy
    identity = choose_identity(limits)
    plan: Plan | None = None
    try:
        with status_pipe() as (status_read, status_write), _workspace(code, identity.uid) as work:
            root, workdir, script = work
            plan = make_plan(identity, limits, root, workdir, script, status_write.fd)
            return _start_and_wait(plan, limits, workdir, root, status_read, status_write, cancel)
    finally:
        if plan is not None and plan.cgroup is not None:  # removed already, unless it failed
            plan.cgroup.remove(within=0.2)


@contextmanager
def status_pipe() -> Iterator[tuple[int, _Once]]:
    """The pipe the supervisor reports how the program ended on: (read end, write end)."""
    status_read, write_fd = os.pipe()
    status_write = _Once(write_fd)
    try:
        os.set_blocking(status_read, False)
        yield status_read, status_write
    finally:
        os.close(status_read)
        status_write.close()


class _Once:
    """A file descriptor closed at most once (a number closed twice may be another's)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _start_and_wait(
    plan: Plan,
    limits: RunLimits,
    workdir: str,
    root: str,
    status_read: int,
    status_write: _Once,
    cancel: threading.Event | None,
    *,
    merge_stderr: bool = False,
) -> RunResult:
    started = time.monotonic()
    deadline = started + limits.timeout
    out, err = CappedOutput(limits.max_output), CappedOutput(limits.max_output)
    proc = subprocess.Popen(
        plan.command,
        cwd=workdir,
        env=plan.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        pass_fds=(status_write.fd,),
        start_new_session=True,
        user=plan.uid,
        group=plan.uid,
        extra_groups=[] if plan.uid is not None else None,
    )
    status_write.close()
    timed_out = True
    with selectors.DefaultSelector() as selector:
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            if stream is None:  # stderr merged into stdout
                continue
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ, data=sink)
        try:
            timed_out = _collect(proc, selector, deadline, cancel)
            ended = min(time.monotonic(), deadline)
            _cleanup(plan, proc, limits.python, ended + GRACE_SECONDS / 2)
            _drain(selector, ended + GRACE_SECONDS * 0.9)
        finally:
            if proc.returncode is None:
                kill_tree_of(proc.pid)
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    exit_code = -signal.SIGKILL if timed_out else _program_exit(status_read, proc.returncode or 0)
    return RunResult(
        exit_code=exit_code,
        stdout=out.text(root),
        stderr=err.text(root),
        timed_out=timed_out,
        truncated=bool(out.dropped or err.dropped),
        seconds=time.monotonic() - started,
        isolation=plan.isolation,
    )


def run_python(code: str, **options: Unpack[RunOptions]) -> RunResult:
    r"""Run a Python program in a child process with limits, and wait for it.

    The program runs as ``answer.py`` with ``python -I`` in a fresh empty folder (removed
    after), with a minimal environment (``PATH``, ``HOME`` and ``TMPDIR`` that folder,
    ``LANG``) and stdin closed. The call returns within ``timeout + GRACE_SECONDS``, and
    every process the program started is killed by then.

    Args:
        code: The program's source.
        **options: The limits, keyword-only: `RunLimits`' attributes and defaults
            (``timeout``, ``memory_limit``, ``max_output``, ``max_file_size``, ``python``,
            ``env``, ``isolation``, ``max_processes``).

    Returns:
        A `RunResult`; its ``isolation`` says which isolation the program ran in.

    Raises:
        ValueError: a limit is out of range or ``env`` holds a secret-like name.
        IsolationUnavailable: the isolation asked for cannot run on this machine.

    Example:
        ```python
        result = run_python("print(sum(range(10)))", timeout=5)
        assert result.ok and result.stdout == "45\n"
        ```
    """
    return _execute(code, make_limits(**options))


async def arun_python(code: str, **options: Unpack[RunOptions]) -> RunResult:
    """Like `run_python` (the same arguments), without blocking the event loop.

    Cancelling the awaiting task kills the program and everything it started, waits for
    that (at most the grace), then raises ``CancelledError``.

    Raises:
        ValueError: a limit is out of range or ``env`` holds a secret-like name.
        IsolationUnavailable: the isolation asked for cannot run on this machine.

    Example:
        ```python
        result = await arun_python("while True: pass", timeout=1)
        assert result.timed_out
        ```
    """
    limits = make_limits(**options)
    return await in_thread(lambda cancel: _execute(code, limits, cancel))


def run_supervised(
    argv: list[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    timeout: float,
    max_output: int,
    cancel: threading.Event | None = None,
) -> RunResult:
    r"""Run a command as the caller under the supervisor, stderr merged into stdout.

    No isolation and no resource limit (a command check runs with the caller's rights);
    what it shares with `run_python` is the process tree (every process the command
    started is killed when it ends, overruns ``timeout`` or ``cancel`` is set) and the
    bounded output, read through a pipe.

    Example:
        ```python
        result = run_supervised(["/bin/sh", "-c", "echo hi"], cwd=None, env={}, timeout=5,
                                max_output=65536)
        assert result.ok and result.stdout == "hi\n"
        ```
    """
    limits = make_limits(timeout, None, max_output, None, isolation="process", max_processes=None)
    with status_pipe() as (status_read, status_write):
        command = supervisor_command(
            limits.python, status_write.fd, kill_all=False, rlimits={}, flags=[], program=argv
        )
        plan = Plan(isolation="process", command=command, env=dict(env))
        workdir = cwd or os.getcwd()
        return _start_and_wait(
            plan, limits, workdir, "", status_read, status_write, cancel, merge_stderr=True
        )


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """Await ``work`` run in a thread; cancelled, set its event, wait for it, re-raise."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    cancel = threading.Event()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def body() -> None:
        try:
            result = work(cancel)
        except BaseException as exc:
            with suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(settle, None, exc)
        else:
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=body, name="loop_agents-run", daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        cancel.set()
        with suppress(BaseException):
            await done
        raise
