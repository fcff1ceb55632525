"""One run at a time on a thread: `ThreadBusyError`, `thread_guard`, `athread_guard`.

The guard is keyed by the checkpointer, ``thread_id`` and ``checkpoint_ns``; it holds in one
process for every checkpointer, and across processes for SQLite on a file and PostgreSQL
(`loop_agents.runtime._process_locks`). See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, Literal, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from loop_agents.runtime._process_locks import aprocess_lock, process_lock
from loop_agents.runtime.time_limits import check_timeout

ConcurrentRuns = Literal["reject", "wait"]
"""What a run does when another run holds its thread: ``"reject"`` (the default) fails at
once with `ThreadBusyError`, before anything is called; ``"wait"`` waits until the thread
is free (at most ``busy_timeout`` seconds), in no fixed order."""

Holder = Literal["this process", "another process"]


class ThreadBusyError(RuntimeError):
    """Another run holds the thread; this run was not started (nothing was called).

    Attributes:
        thread_id: The busy thread.
        checkpoint_ns: Its checkpoint namespace (``""`` for a loop run on its own).
        holder: ``"this process"``, or ``"another process"`` (the lock in or next to the
            database is held: by another process, or another checkpointer on it).
        waited: Seconds this run waited (``concurrent_runs="wait"``), else ``None``.

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
        ns, holder, waited = self.checkpoint_ns, self.holder, self.waited
        rebuild = partial(ThreadBusyError, checkpoint_ns=ns, holder=holder, waited=waited)
        return (rebuild, (self.thread_id,))


def check_concurrent_runs(
    concurrent_runs: object, busy_timeout: object
) -> tuple[ConcurrentRuns, float | None]:
    """Validate ``concurrent_runs`` and ``busy_timeout``; return them (seconds or ``None``).

    Raises:
        TypeError: ``busy_timeout`` is not a number, a ``timedelta`` or ``None``.
        ValueError: an unknown ``concurrent_runs``, or a bad ``busy_timeout``.
    """
    if concurrent_runs not in get_args(ConcurrentRuns):
        raise ValueError(
            f"concurrent_runs must be 'reject' (a second run on a busy thread fails with "
            f"ThreadBusyError) or 'wait' (it waits its turn); got {concurrent_runs!r:.60}"
        )
    seconds = check_timeout("busy_timeout", busy_timeout, zero=True)
    if seconds is not None and concurrent_runs != "wait":
        raise ValueError(
            f"busy_timeout={seconds:g} only applies with concurrent_runs='wait' (how long a "
            f"run waits for its thread); pass concurrent_runs='wait' too, or leave it out"
        )
    return concurrent_runs, seconds  # type: ignore[return-value]


_registry_lock = threading.Lock()
_held: dict[tuple[int, str, str], BaseCheckpointSaver[Any]] = {}  # (id of the saver, thread)


def is_held(saver: BaseCheckpointSaver[Any], config: RunnableConfig) -> bool:
    """Whether a run of this process holds ``config``'s thread of ``saver`` now."""
    wait = _wait_of(saver, config, "reject", None)
    return wait is not None and wait.key in _held


@dataclass
class _Wait:
    """One run's claim on its thread: rejected at once, or polled until a deadline."""

    saver: BaseCheckpointSaver[Any]
    thread_id: str
    ns: str
    concurrent_runs: ConcurrentRuns
    busy_timeout: float | None
    started: float = field(default_factory=time.monotonic)
    pause: float = 0.01

    @property
    def key(self) -> tuple[int, str, str]:
        return (id(self.saver), self.thread_id, self.ns)

    def hold_here(self) -> bool:
        """Hold the thread among this process's runs; ``False`` when one of them has it."""
        with _registry_lock:
            if self.key in _held:
                return False
            _held[self.key] = self.saver  # kept alive: its id is not reused meanwhile
            return True

    def let_go_here(self) -> None:
        with _registry_lock:
            _held.pop(self.key, None)

    def next_pause(self, holder: Holder) -> float:
        """Seconds to sleep before trying again; raises when this run must give up."""
        waited = time.monotonic() - self.started
        if self.concurrent_runs == "reject":
            raise ThreadBusyError(self.thread_id, checkpoint_ns=self.ns, holder=holder)
        if self.busy_timeout is not None and waited >= self.busy_timeout:
            raise ThreadBusyError(
                self.thread_id, checkpoint_ns=self.ns, holder=holder, waited=waited
            )
        pause, self.pause = self.pause, min(self.pause * 2, 0.25)
        if self.busy_timeout is not None:
            pause = min(pause, self.busy_timeout - waited)
        return max(pause, 0.0)


def _wait_of(
    checkpointer: BaseCheckpointSaver[Any] | None,
    config: RunnableConfig | None,
    concurrent_runs: object,
    busy_timeout: object,
) -> _Wait | None:
    """The run's claim on its thread, or ``None`` when there is no thread to guard."""
    mode, limit = check_concurrent_runs(concurrent_runs, busy_timeout)
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if checkpointer is None or thread_id is None:
        return None
    ns = str(configurable.get("checkpoint_ns") or "")
    return _Wait(checkpointer, str(thread_id), ns, mode, limit)


@contextmanager
def thread_guard(
    checkpointer: BaseCheckpointSaver[Any] | None,
    config: RunnableConfig | None,
    *,
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
) -> Iterator[None]:
    """Hold ``config``'s thread of ``checkpointer`` while the ``with`` block runs.

    Without a checkpointer or a ``thread_id`` the block simply runs. The thread is let go
    however the block ends (an error, ``KeyboardInterrupt``, a generator closed early).

    Args:
        checkpointer: The saver the run writes to.
        config: The run's config (``thread_id``, optionally ``checkpoint_ns``).
        concurrent_runs: ``"reject"`` or ``"wait"`` (see `ConcurrentRuns`).
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
    wait = _wait_of(checkpointer, config, concurrent_runs, busy_timeout)
    if wait is None:
        yield
        return
    while not wait.hold_here():
        time.sleep(wait.next_pause("this process"))
    try:
        lock = process_lock(wait.saver, wait.thread_id, wait.ns)
        try:
            while lock is not None and not lock.try_acquire():
                time.sleep(wait.next_pause("another process"))
            yield
        finally:
            if lock is not None:
                lock.release()
    finally:
        wait.let_go_here()


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
    wait = _wait_of(checkpointer, config, concurrent_runs, busy_timeout)
    if wait is None:
        yield
        return
    while not wait.hold_here():
        await asyncio.sleep(wait.next_pause("this process"))
    try:
        lock = await aprocess_lock(wait.saver, wait.thread_id, wait.ns)
        try:
            while lock is not None and not await lock.try_acquire():
                await asyncio.sleep(wait.next_pause("another process"))
            yield
        finally:
            if lock is not None:
                # shielded: a second cancellation must not leave the lock's connection open
                await asyncio.shield(lock.release())
    finally:
        wait.let_go_here()
