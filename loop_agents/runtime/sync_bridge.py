"""Running an async agent function from the loop's sync methods (``invoke``/``stream``).

The coroutine runs on one background event loop, in a daemon thread, for the whole
process: async clients (httpx pools inside chat models) bind to the event loop they first
ran on. The caller's context (the run config, the stream writer) is carried over.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _forget_after_fork() -> None:
    # the parent's loop thread does not exist in a child process: the child starts its own
    global _lock, _loop
    _lock, _loop = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's background event loop (started on first use), in a daemon thread."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            name = "loop-agents-sync-bridge"
            threading.Thread(target=_loop.run_forever, name=name, daemon=True).start()
        return _loop


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from sync code and return its result.

    Raises whatever the coroutine raises, and `RuntimeError` when called from the
    background loop itself (it would deadlock).
    """
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("run_coroutine was called from its own event loop; use await")
    # the task is created in a copy of this thread's context (call_soon_threadsafe's)
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
