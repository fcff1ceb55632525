"""Where the pairs run: an event loop of their own, watched from the eval's.

The *pair loop* runs in a daemon thread as long as the process (async clients cached by
chat models bind to one loop). The eval's loop keeps each pair's time limit
(`run_watched`): a pair over it is cancelled; if it blocks the pair loop (``time.sleep`` in
an ``async def``, a busy coroutine), that loop is abandoned with its thread, and the pairs
stalled on it run again on a new one. Sync calls run in daemon threads, never waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["PairLoop", "PairTimeout", "pair_loop", "run_watched"]

T = TypeVar("T")

PING_SECONDS = 0.5
"""How long a pair loop may take to run a callback before it counts as blocked."""


class PairTimeout(TimeoutError):
    """A pair did not finish in time; ``blocked``: it blocked its loop, which was abandoned."""

    def __init__(self, blocked: bool = False) -> None:
        super().__init__("blocked its event loop" if blocked else "did not finish in time")
        self.blocked = blocked


class _DaemonThreads(ThreadPoolExecutor):
    """An executor whose calls each run in a new daemon thread, never waited for."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a new daemon thread."""
        future: Future[Any] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting pair, as an executor does
                future.set_exception(exc)

        threading.Thread(target=work, name="loop-agents-eval-call", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Return at once: the threads are daemons, left to end (or not) by themselves."""


_lock = threading.Lock()
_current: PairLoop | None = None


class PairLoop:
    """An event loop running in a daemon thread, until an arm blocks it (see the module)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(_DaemonThreads())
        self.loop.set_task_factory(self._task)
        self.abandoned = False
        # each task's pair (a run's token), inherited by the tasks it creates
        self.owners: weakref.WeakKeyDictionary[asyncio.Task[Any], object] = (
            weakref.WeakKeyDictionary()
        )
        # the eval loops waiting on it -> the event that tells them it was abandoned
        self._told: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )
        threading.Thread(
            target=self.loop.run_forever, name="loop-agents-eval-pairs", daemon=True
        ).start()

    def _task(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **options: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        parent = asyncio.current_task(loop)
        if parent is not None and parent in self.owners:
            self.owners[task] = self.owners[parent]
        return task

    def gone(self) -> asyncio.Event:
        """An event of the running (eval's) loop, set when this loop is abandoned."""
        with _lock:
            event = self._told.setdefault(asyncio.get_running_loop(), asyncio.Event())
            if self.abandoned:
                event.set()
        return event

    async def answers(self) -> bool:
        """Whether the loop runs a callback within `PING_SECONDS` (it is not blocked)."""
        ping = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(ping), PING_SECONDS)
        except TimeoutError:
            return False
        return True

    def abandon(self) -> None:
        """Give the loop up: the next pairs run on a new one (it runs on if it unblocks)."""
        global _current
        with _lock:
            self.abandoned = True
            if _current is self:
                _current = None
            told = list(self._told.items())
        for loop, event in told:
            with contextlib.suppress(RuntimeError):  # that eval's loop is closed
                loop.call_soon_threadsafe(event.set)


def pair_loop() -> PairLoop:
    """The process's pair loop (started on first use, again after one is abandoned)."""
    global _current
    with _lock:
        if _current is None:
            _current = PairLoop()
        return _current


async def _owned(make: Callable[[], Awaitable[T]], pairs: PairLoop, token: object) -> T:
    task = asyncio.current_task()
    if task is not None:  # its tasks, and theirs, are the run's: which one blocks its loop
        pairs.owners[task] = token
    return await make()


async def run_watched(make: Callable[[], Awaitable[T]], timeout: float | None) -> T:
    """``await make()`` on the pair loop, ended after ``timeout`` seconds whatever it does.

    A run stalled on a loop abandoned for another pair starts again, with its whole limit.

    Raises:
        PairTimeout: it did not finish in time (cancelled; its loop abandoned if blocked).
        Exception: whatever ``make()`` raises.

    Example:
        ```python
        result = await run_watched(lambda: agent.ainvoke(state), 60)
        ```
    """
    while True:
        pairs = pair_loop()
        gone = pairs.gone()
        token = object()
        future = asyncio.run_coroutine_threadsafe(_owned(make, pairs, token), pairs.loop)
        result = asyncio.wrap_future(future)
        watch = asyncio.ensure_future(gone.wait())
        try:
            done, _ = await asyncio.wait(
                (result, watch), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # the eval is cancelled (Ctrl-C): so is the pair
            future.cancel()
            raise
        finally:
            watch.cancel()
        if result in done:
            return result.result()
        if watch in done:  # abandoned for another pair: run again on the new loop
            continue
        future.cancel()
        if await pairs.answers():
            raise PairTimeout
        stuck = asyncio.current_task(pairs.loop)  # the task blocking the loop, if one is
        if stuck is None or pairs.owners.get(stuck, token) is token:
            pairs.abandon()
            raise PairTimeout(blocked=True)
        await gone.wait()  # another pair blocks it and ends at its own limit; then again
