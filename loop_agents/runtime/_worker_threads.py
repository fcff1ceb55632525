"""Sync calls that ``ainvoke`` runs in worker threads, counted for the nodes' time limits.

A node under a time limit sets `WORKERS` for the call it times; `in_worker_thread` counts
the sync agent or evaluator functions running in LangChain's executor under it, so that at
the deadline the node knows a thread still runs (cancelling the wait does not stop it).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor


class WorkerThreads:
    """How many sync calls a timed node has running in worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0

    def change(self, delta: int) -> None:
        """Count a call that starts (+1) or ends (-1)."""
        with self._lock:
            self.running += delta


WORKERS: contextvars.ContextVar[WorkerThreads | None] = contextvars.ContextVar(
    "loop_agents_worker_threads", default=None
)


async def in_worker_thread(config: RunnableConfig, func: Callable[..., Any], *args: Any) -> Any:
    """Run a sync ``func(*args)`` in LangChain's executor, known to a node's time limit.

    Example:
        ```python
        verdict = await in_worker_thread(config, evaluator, context)
        ```

    """
    workers = WORKERS.get()

    def call() -> Any:
        # counted once the thread runs it: a call cancelled while it waited never runs
        if workers is None:
            return func(*args)
        workers.change(+1)
        try:
            return func(*args)
        finally:
            workers.change(-1)

    return await run_in_executor(config, call)
