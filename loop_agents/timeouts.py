"""Time limits and retry policies for the loop's two nodes.

`create_loop_agent` takes ``agent_timeout``/``evaluator_timeout`` and
``agent_retry_policy``/``evaluator_retry_policy``. Retries are LangGraph's own
(``add_node(..., retry_policy=...)``). A time limit is enforced in the node's async form
and, when exceeded, raises `LoopTimeoutError`, which names the node, the iteration and
the limit. A running sync call cannot be cancelled, so a loop with a time limit is run
with ``ainvoke``/``astream``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.errors import NodeTimeoutError
from langgraph.types import RetryPolicy

from loop_agents._function_runnable import FunctionRunnable
from loop_agents.state import LoopState

NodeName = Literal["invoke_agent", "evaluate"]
SyncNode = Callable[[LoopState, RunnableConfig], dict[str, Any]]
AsyncNode = Callable[[LoopState, RunnableConfig], Awaitable[dict[str, Any]]]
RetryPolicies = RetryPolicy | Sequence[RetryPolicy]

_OPTION: dict[NodeName, str] = {"invoke_agent": "agent_timeout", "evaluate": "evaluator_timeout"}
_CALL: dict[NodeName, str] = {"invoke_agent": "the agent call", "evaluate": "the evaluation"}


class LoopTimeoutError(NodeTimeoutError):
    """A node of a loop ran longer than its time limit.

    A subclass of LangGraph's ``NodeTimeoutError``, so a ``RetryPolicy`` with the
    default ``retry_on`` retries it. The loop's checkpoint is kept: with a
    checkpointer, ``ainvoke(None, config)`` on the same thread resumes the loop at the
    iteration that timed out.

    Attributes:
        node: ``"invoke_agent"`` or ``"evaluate"``.
        iteration: The iteration whose agent call or evaluation timed out.
        timeout: The limit, in seconds.
        elapsed: How long the call ran before it was cancelled, in seconds.

    """

    iteration: int

    def __init__(self, node: NodeName, iteration: int, timeout: float, elapsed: float) -> None:
        super().__init__(node, elapsed, kind="run", run_timeout=timeout)
        self.iteration = iteration
        self.args = (
            f"node {node!r} timed out at iteration {iteration}: {_CALL[node]} ran longer "
            f"than {_OPTION[node]}={timeout:g}s and was cancelled (elapsed {elapsed:.3f}s). "
            f"With a checkpointer, ainvoke(None, config) on the same thread resumes the "
            f"loop at iteration {iteration}; raise {_OPTION[node]} if the call needs longer.",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node, self.iteration, self.timeout, self.elapsed))


def check_timeout(option: str, value: object) -> float | None:
    """Validate a time-limit option; return it in seconds (``None`` for no limit).

    Raises:
        TypeError: ``value`` is not a number, a ``timedelta`` or ``None``.
        ValueError: ``value`` is not a positive, finite number of seconds.

    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(
            f"{option} must be a number of seconds, a datetime.timedelta or None; got "
            f"{type(value).__name__} {value!r:.60}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"{option} must be a positive, finite number of seconds; got {value!r}. "
            f"Pass None for no limit."
        )
    return seconds


def check_retry_policy(option: str, value: object) -> RetryPolicies | None:
    """Validate a retry option: a ``RetryPolicy``, a sequence of them, or ``None``.

    Raises:
        TypeError: ``value`` is anything else.

    """
    if value is None or isinstance(value, RetryPolicy):
        return value
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and value
        and all(isinstance(p, RetryPolicy) for p in value)
    ):
        return list(value)
    raise TypeError(
        f"{option} must be a langgraph.types.RetryPolicy, a non-empty sequence of them "
        f"(the first whose retry_on matches applies) or None; got "
        f"{type(value).__name__} {value!r:.80}. Example: "
        f"RetryPolicy(max_attempts=3, retry_on=openai.RateLimitError)"
    )


def iteration_of(node: NodeName, state: LoopState) -> int:
    """The iteration a node is working on, for messages about it."""
    if node == "evaluate":
        return state.get("iteration", 0)
    if state.get("stop_reason") is not None:
        return 1  # a new loop starts on this thread
    return state.get("iteration", 0) + 1


def loop_node(
    node: NodeName, func: SyncNode, afunc: AsyncNode, timeout: float | None
) -> FunctionRunnable[LoopState, dict[str, Any]]:
    """The runnable for one of the loop's nodes, with ``timeout`` enforced when set."""
    if timeout is None:
        return FunctionRunnable(func, afunc, name=node, trace=False)
    limit = timeout

    def sync_with_limit(state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        raise TypeError(
            f"{_OPTION[node]}={limit:g}s is enforced only when the loop runs with "
            f"ainvoke()/astream(): a running sync call cannot be cancelled. Call the loop "
            f"with ainvoke()/astream(), or create it without {_OPTION[node]}."
        )

    async def async_with_limit(state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        started = time.monotonic()
        try:
            async with asyncio.timeout(limit) as scope:
                return await afunc(state, config)
        except TimeoutError as exc:
            if not scope.expired():
                raise  # the call raised TimeoutError itself
            elapsed = time.monotonic() - started
            raise LoopTimeoutError(node, iteration_of(node, state), limit, elapsed) from exc

    return FunctionRunnable(sync_with_limit, async_with_limit, name=node, trace=False)
