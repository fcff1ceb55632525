"""Running an eval's pairs on a LangGraph Server: each a stateless run of ``eval_task``.

A run that fails on the server raises `ServerRunError`: retried, then reported, never a pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from loop_agents_evals.arms import PairRunner
from loop_agents_evals.report import TaskResult
from loop_agents_evals.settings import ArmSettings, check_server_url
from loop_agents_evals.tasks import Task

__all__ = ["GRAPH", "ServerRunError", "server_runner"]

GRAPH = "eval_task"
"""The graph (or assistant) id the server serves the eval under."""


class ServerRunError(RuntimeError):
    """A run on the LangGraph server failed or returned something that is not an outcome."""


def _outcome(output: object, task: Task, arm: str) -> TaskResult:
    if not isinstance(output, Mapping):
        raise ServerRunError(f"the server returned {type(output).__name__}, not an outcome")
    error = output.get("__error__")
    if error is not None:
        if isinstance(error, Mapping):
            raise ServerRunError(f"{error.get('error')}: {error.get('message')}")
        raise ServerRunError(str(error))
    try:
        return TaskResult.from_json({**output, "task_id": task.id, "arm": arm, "part": task.part})
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerRunError(
            f"the server's output is not an outcome ({exc}): is {GRAPH!r} the graph of "
            f"loop_agents_evals.eval_task? (got keys {sorted(map(str, output))})"
        ) from None


def server_runner(
    url: str,
    settings: ArmSettings,
    *,
    graph: str = GRAPH,
    api_key: str | None = None,
) -> PairRunner:
    """A pair runner that runs each task and arm as a run of ``graph`` on the server.

    Args:
        url: The server's URL.
        settings: K, the temperatures, the judge threshold, the code timeout.
        graph: The served graph's id.
        api_key: The server's API key (default: as the SDK reads it).

    Raises:
        ValueError: ``url`` is not an http(s) URL.

    Example:
        ```python
        run = server_runner("http://127.0.0.1:2024", ArmSettings(iterations=3))
        outcome = await run(task, "loop")
        ```
    """
    base = check_server_url(url)
    clients: dict[int, Any] = {}  # one per event loop: an async client binds to its loop

    async def run(task: Task, arm: str) -> TaskResult:
        client = clients.get(id(asyncio.get_running_loop()))
        if client is None:
            from langgraph_sdk import get_client

            options: dict[str, Any] = {"url": base}
            if api_key is not None:
                options["api_key"] = api_key
            client = clients[id(asyncio.get_running_loop())] = get_client(**options)
        output = await client.runs.wait(
            None,
            graph,
            input={
                "task": task.to_json(),
                "arm": arm,
                "iterations": settings.iterations,
                "temperature": settings.temperature_of(arm),
                "judge_temperature": settings.judge_temperature,
                "judge_threshold": settings.judge_threshold,
                "code_timeout": settings.code_timeout,
            },
            metadata={"eval_task": task.id, "eval_arm": arm},
            on_completion="delete",
            raise_error=False,
        )
        return _outcome(output, task, arm)

    return run
