"""Running an async agent function from the loop's sync methods (``invoke``/``stream``).

The coroutine runs on one background event loop that lives as long as the process, in
its own thread. One loop for every call matters: async clients (httpx pools inside chat
models) bind to the event loop they first ran on, so a fresh ``asyncio.run`` per call
would break them from the second call on. The caller's context (LangChain's run config,
LangGraph's stream writer) is carried over to the task.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's background event loop (started on first use), in a daemon thread."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="loop-agents-sync-bridge", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from sync code and return its result.

    Raises whatever the coroutine raises. Must not be called from the background loop
    itself (an async agent calling the loop's sync ``invoke`` would deadlock); that case
    raises `RuntimeError`.
    """
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("run_coroutine was called from its own event loop; use await")
    context = contextvars.copy_context()
    done: Future[T] = Future()

    def start() -> None:
        task = loop.create_task(coroutine, context=context)

        def finish(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.cancel()
            elif (error := task.exception()) is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())

        task.add_done_callback(finish)

    loop.call_soon_threadsafe(start)
    return done.result()
