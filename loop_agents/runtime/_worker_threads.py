"""Sync calls that ``ainvoke`` runs in worker threads, known to the nodes' time limits.

A node under a time limit sets `WORKERS` for the call it times; `in_worker_thread` puts the
sync agent or evaluator calls running in LangChain's executor under it in that set, so that
at the deadline the node knows a thread still runs (cancelling the wait does not stop it).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor

WORKERS: contextvars.ContextVar[set[object] | None] = contextvars.ContextVar(
    "loop_agents_worker_threads", default=None
)


async def in_worker_thread(config: RunnableConfig, func: Callable[..., Any], *args: Any) -> Any:
    """Run a sync ``func(*args)`` in LangChain's executor, known to a node's time limit."""
    workers = WORKERS.get()

    def call() -> Any:
        # counted once the thread runs it: a call cancelled while it waited never runs
        if workers is None:
            return func(*args)
        running = object()
        workers.add(running)  # a set's add and discard are atomic
        try:
            return func(*args)
        finally:
            workers.discard(running)

    return await run_in_executor(config, call)
