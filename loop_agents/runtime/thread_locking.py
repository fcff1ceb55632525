"""One run at a time on a thread: `ThreadBusyError`, `thread_guard`, `athread_guard`.

Two runs on the same ``thread_id`` at once each read the thread's latest checkpoint and
save their own steps after it; whichever saves last becomes the thread's state and the
other run's work is lost without a word. A loop built by `create_loop_agent` therefore
holds the thread for the whole of each run (``invoke``, ``stream``, their async forms,
a resume with ``invoke(None, config)`` or ``Command(resume=...)``) and a second run on
a busy thread either fails at once with `ThreadBusyError` (``concurrent_runs="reject"``,
the default) or waits its turn (``concurrent_runs="wait"``).

The guard is keyed by the checkpointer and the thread (``thread_id`` and
``checkpoint_ns``). It works in-process for every checkpointer (threads and asyncio
tasks) and across processes for SQLite on a file and PostgreSQL (see
`loop_agents.runtime._process_locks`). Every lock dies with its process: a run that was killed
leaves its thread free for the next.

`thread_guard` and `athread_guard` are the same guard for code of your own, e.g. a
parent graph that has the loop as a node.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from loop_agents.runtime._process_locks import (
    AsyncProcessLock,
    ProcessLock,
    aprocess_lock,
    process_lock,
)
from loop_agents.runtime.numbers import describe_number, finite_float

ConcurrentRuns = Literal["reject", "wait"]
"""What a run does when another run holds its thread.

- ``"reject"`` (the default): fail at once with `ThreadBusyError`, before anything is
  called.
- ``"wait"``: wait until the thread is free (at most ``busy_timeout`` seconds, then
  `ThreadBusyError`), then run. Waiting runs are not served in any fixed order.
"""

Holder = Literal["this process", "another process"]

_POLL_FIRST = 0.01
_POLL_MAX = 0.25


class ThreadBusyError(RuntimeError):
    """Another run holds the thread; this run was not started.

    Raised before the loop calls anything (no model call, no checkpoint written), so
    the other run's work is untouched and this call can simply be made again once the
    thread is free.

    Attributes:
        thread_id: The busy thread.
        checkpoint_ns: Its checkpoint namespace (``""`` for a loop run on its own).
        holder: ``"this process"`` (a run of this process holds the thread) or
            ``"another process"`` (the lock in the database, or next to it, is held:
            by another process, or by another checkpointer object on the same
            database).
        waited: Seconds this run waited for the thread (``concurrent_runs="wait"``),
            or ``None`` when it did not wait.

    """

    def __init__(
        self,
        thread_id: str,
        *,
        checkpoint_ns: str = "",
        holder: Holder = "this process",
        waited: float | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.holder = holder
        self.waited = waited
        where = f"thread {thread_id!r}" + (
            f" (checkpoint_ns {checkpoint_ns!r})" if checkpoint_ns else ""
        )
        place = (
            "this process"
            if holder == "this process"
            else "another process (or through another checkpointer on the same database)"
        )
        if waited is None:
            what = (
                f"{where} is busy: another run on it is in progress in {place}. Two runs "
                f"at once on one thread would save their checkpoints over each other's "
                f"and one run's work would be lost, so this run was not started (nothing "
                f"was called). Call again when the other run has ended, or create the "
                f"loop with concurrent_runs='wait' to queue runs on a thread."
            )
        else:
            what = (
                f"{where} stayed busy for {waited:.3g}s (busy_timeout): another run on it "
                f"is still in progress in {place}, so this run was not started (nothing "
                f"was called). Call again later, or raise busy_timeout (None waits as "
                f"long as it takes)."
            )
        super().__init__(what)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.thread_id, self.checkpoint_ns, self.holder, self.waited))


def _rebuild(
    thread_id: str, checkpoint_ns: str, holder: Holder, waited: float | None
) -> ThreadBusyError:
    return ThreadBusyError(thread_id, checkpoint_ns=checkpoint_ns, holder=holder, waited=waited)


def check_concurrent_runs(
    concurrent_runs: object, busy_timeout: object
) -> tuple[ConcurrentRuns, float | None]:
    """Validate the ``concurrent_runs`` and ``busy_timeout`` options.

    Raises:
        TypeError: ``busy_timeout`` is not a number, a ``timedelta`` or ``None``.
        ValueError: ``concurrent_runs`` is neither ``"reject"`` nor ``"wait"``, or
            ``busy_timeout`` is negative, not finite, or given without ``"wait"``.

    Example:
        ```python
        assert check_concurrent_runs("wait", 30) == ("wait", 30.0)
        ```

    """
    if concurrent_runs not in get_args(ConcurrentRuns):
        raise ValueError(
            f"concurrent_runs must be 'reject' (a second run on a busy thread fails with "
            f"ThreadBusyError) or 'wait' (it waits its turn); got {concurrent_runs!r:.60}"
        )
    if busy_timeout is None:
        return concurrent_runs, None  # type: ignore[return-value]
    if isinstance(busy_timeout, timedelta):
        seconds: float | None = busy_timeout.total_seconds()
    elif isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
        raise TypeError(
            f"busy_timeout must be a number of seconds, a datetime.timedelta or None; got "
            f"{type(busy_timeout).__name__} {busy_timeout!r:.60}"
        )
    else:
        seconds = finite_float(busy_timeout)
    if seconds is None or seconds < 0:
        raise ValueError(
            f"busy_timeout must be a finite number of seconds >= 0 (None: wait as long as "
            f"it takes); got {describe_number(busy_timeout)}"
        )
    if concurrent_runs != "wait":
        raise ValueError(
            f"busy_timeout={seconds:g} only applies with concurrent_runs='wait' (how long a "
            f"run waits for its thread); pass concurrent_runs='wait' too, or leave it out"
        )
    return concurrent_runs, seconds


# -- the in-process registry -------------------------------------------------------------

_registry_lock = threading.Lock()
_held: dict[tuple[int, str, str], BaseCheckpointSaver[Any]] = {}
"""Threads held by runs of this process: (id of the saver, thread_id, checkpoint_ns)."""


def _hold_here(saver: BaseCheckpointSaver[Any], thread_id: str, ns: str) -> bool:
    key = (id(saver), thread_id, ns)
    with _registry_lock:
        if key in _held:
            return False
        _held[key] = saver  # keeps the saver alive, so its id is not reused meanwhile
        return True


def _let_go_here(saver: BaseCheckpointSaver[Any], thread_id: str, ns: str) -> None:
    with _registry_lock:
        _held.pop((id(saver), thread_id, ns), None)


def is_held(saver: BaseCheckpointSaver[Any], config: RunnableConfig) -> bool:
    """Whether a run of this process holds ``config``'s thread of ``saver`` now.

    Example:
        ```python
        assert not is_held(saver, {"configurable": {"thread_id": "t1"}})
        ```

    """
    target = thread_of(config)
    if target is None:
        return False
    with _registry_lock:
        return (id(saver), *target) in _held


def thread_of(config: RunnableConfig | None) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of a run's config, or ``None`` without a thread."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        return None
    return str(thread_id), str(configurable.get("checkpoint_ns") or "")


# -- taking the thread -------------------------------------------------------------------


@dataclass
class _Wait:
    """The waiting rule of one run: reject at once, or poll until a deadline."""

    thread_id: str
    ns: str
    concurrent_runs: ConcurrentRuns
    busy_timeout: float | None
    started: float = 0.0
    pause: float = _POLL_FIRST

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def next_pause(self, holder: Holder) -> float:
        """Seconds to sleep before trying again; raises when this run must give up."""
        waited = time.monotonic() - self.started
        if self.concurrent_runs == "reject":
            raise ThreadBusyError(self.thread_id, checkpoint_ns=self.ns, holder=holder)
        if self.busy_timeout is not None and waited >= self.busy_timeout:
            raise ThreadBusyError(
                self.thread_id, checkpoint_ns=self.ns, holder=holder, waited=waited
            )
        pause = self.pause
        self.pause = min(self.pause * 2, _POLL_MAX)
        if self.busy_timeout is not None:
            pause = min(pause, self.busy_timeout - waited)
        return max(pause, 0.0)


@contextmanager
def thread_guard(
    checkpointer: BaseCheckpointSaver[Any] | None,
    config: RunnableConfig | None,
    *,
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
) -> Iterator[None]:
    """Hold ``config``'s thread of ``checkpointer`` while the ``with`` block runs.

    Without a checkpointer or a ``thread_id`` there is no thread to guard and the block
    simply runs. The thread is let go when the block ends, however it ends (an error,
    ``KeyboardInterrupt``, a generator closed early).

    Args:
        checkpointer: The saver the run writes to.
        config: The run's config (``thread_id``, optionally ``checkpoint_ns``).
        concurrent_runs: ``"reject"``: raise `ThreadBusyError` at once when the thread
            is busy; ``"wait"``: wait for it.
        busy_timeout: With ``"wait"``, the longest wait in seconds (``None``: no limit).

    Raises:
        ThreadBusyError: the thread is busy (and stayed busy past ``busy_timeout``).

    Example:
        ```python
        config = {"configurable": {"thread_id": "report-7"}}
        with thread_guard(saver, config, concurrent_runs="wait", busy_timeout=60):
            parent_graph.invoke(inputs, config)
        ```

    """
    mode, limit = check_concurrent_runs(concurrent_runs, busy_timeout)
    target = thread_of(config)
    if checkpointer is None or target is None:
        yield
        return
    thread_id, ns = target
    wait = _Wait(thread_id, ns, mode, limit)
    while not _hold_here(checkpointer, thread_id, ns):
        time.sleep(wait.next_pause("this process"))
    try:
        shared = _take_shared(checkpointer, thread_id, ns, wait)
        try:
            yield
        finally:
            if shared is not None:
                shared.release()
    finally:
        _let_go_here(checkpointer, thread_id, ns)


def _take_shared(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, wait: _Wait
) -> ProcessLock | None:
    lock = process_lock(saver, thread_id, ns)
    if lock is None:
        return None
    try:
        while not lock.try_acquire():
            time.sleep(wait.next_pause("another process"))
    except BaseException:
        lock.release()
        raise
    return lock


@asynccontextmanager
async def athread_guard(
    checkpointer: BaseCheckpointSaver[Any] | None,
    config: RunnableConfig | None,
    *,
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
) -> AsyncIterator[None]:
    """Async form of `thread_guard`: waiting does not block the event loop.

    Example:
        ```python
        async with athread_guard(saver, config):
            await parent_graph.ainvoke(inputs, config)
        ```

    """
    mode, limit = check_concurrent_runs(concurrent_runs, busy_timeout)
    target = thread_of(config)
    if checkpointer is None or target is None:
        yield
        return
    thread_id, ns = target
    wait = _Wait(thread_id, ns, mode, limit)
    while not _hold_here(checkpointer, thread_id, ns):
        await asyncio.sleep(wait.next_pause("this process"))
    try:
        shared = await _atake_shared(checkpointer, thread_id, ns, wait)
        try:
            yield
        finally:
            if shared is not None:
                # shielded: a second cancellation must not leave the lock's connection open
                await asyncio.shield(shared.release())
    finally:
        _let_go_here(checkpointer, thread_id, ns)


async def _atake_shared(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, wait: _Wait
) -> AsyncProcessLock | None:
    lock = await aprocess_lock(saver, thread_id, ns)
    if lock is None:
        return None
    try:
        while not await lock.try_acquire():
            await asyncio.sleep(wait.next_pause("another process"))
    except BaseException:
        await asyncio.shield(lock.release())
        raise
    return lock
