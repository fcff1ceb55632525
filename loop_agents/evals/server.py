"""Running an eval's task/arm pairs on a LangGraph Server, through the SDK client.

Each pair is a stateless run of the served ``eval_task`` graph (see
`loop_agents.serving.eval_task`), awaited with ``client.runs.wait``; the server's model
answers. A run that fails on the server raises `ServerRunError`, which the eval
retries and, after its last try, reports: it is never a pass.

Example:
    ```python
    report = await arun_eval("code", server="http://127.0.0.1:2024", limit=5)
    ```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from loop_agents.evals.arms import ArmOutcome, ArmSettings, PairRunner
from loop_agents.evals.tasks import Task

__all__ = ["GRAPH", "ServerRunError", "check_server_url", "server_runner"]

GRAPH = "eval_task"
"""The graph (or assistant) id the server serves the eval under."""


class ServerRunError(RuntimeError):
    """A run on the LangGraph server failed or returned something that is not an outcome."""


def check_server_url(url: object) -> str:
    """Validate a LangGraph server URL (``http://`` or ``https://`` with a host).

    Raises:
        ValueError: it is not such a URL.

    Example:
        ```python
        check_server_url("http://127.0.0.1:2024")
        ```
    """
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"server must be the URL of a LangGraph server, such as http://127.0.0.1:2024; "
            f"got {url!r}"
        )
    return str(url).rstrip("/")


def _outcome(output: object) -> ArmOutcome:
    if not isinstance(output, Mapping):
        raise ServerRunError(f"the server returned {type(output).__name__}, not an outcome")
    error = output.get("__error__")
    if error is not None:
        if isinstance(error, Mapping):
            raise ServerRunError(f"{error.get('error')}: {error.get('message')}")
        raise ServerRunError(str(error))
    names = [f.name for f in dataclasses.fields(ArmOutcome)]
    optional = {
        f.name for f in dataclasses.fields(ArmOutcome) if f.default is not dataclasses.MISSING
    }
    missing = [n for n in names if n not in output and n not in optional]
    if missing:
        raise ServerRunError(
            f"the server's output lacks {', '.join(missing)}: is {GRAPH!r} the graph of "
            f"loop_agents.serving.eval_task? (got keys {sorted(map(str, output))})"
        )
    values: dict[str, Any] = {n: output[n] for n in names if n in output}
    if "by_attempt" in values:
        values["by_attempt"] = tuple(values["by_attempt"] or ())
    for name in ("transcript", "learned"):
        if name in values:
            values[name] = tuple(values[name] or ())
    return ArmOutcome(**values)


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
        settings: K, the temperatures, the judge threshold, the code timeout (the
            judge's structured-output method is the server's
            ``LOOP_AGENTS_STRUCTURED_OUTPUT``).
        graph: The served graph's id.
        api_key: The server's API key (default: ``LANGGRAPH_API_KEY`` and friends, as
            the SDK reads them).

    Returns:
        An async function ``(task, arm) -> ArmOutcome``.

    Raises:
        ValueError: ``url`` is not an http(s) URL.

    Example:
        ```python
        run = server_runner("http://127.0.0.1:2024", ArmSettings(iterations=3))
        outcome = await run(task, "loop")
        ```
    """
    base = check_server_url(url)
    clients: list[Any] = []

    async def run(task: Task, arm: str) -> ArmOutcome:
        if not clients:  # made on first use, inside the event loop that runs the eval
            from langgraph_sdk import get_client

            options: dict[str, Any] = {"url": base}
            if api_key is not None:
                options["api_key"] = api_key
            clients.append(get_client(**options))
        output = await clients[0].runs.wait(
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
        return _outcome(output)

    return run
