"""Time limits of calls: `TimeLimit`, `LoopTimeoutError`, and the checks of limits and policies.

At its deadline the loop stops waiting for a call and raises `LoopTimeoutError`; a call that
does not stop is *abandoned* (left to finish, a WARNING logged). See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from langgraph.errors import NodeTimeoutError
from langgraph.types import RetryPolicy

from loop_agents.runtime._worker_threads import WORKERS
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.steps import Call, RetryPolicies

NodeName = Literal["invoke_agent", "evaluate"]

_OPTION: dict[NodeName, str] = {"invoke_agent": "agent_timeout", "evaluate": "evaluator_timeout"}
_CALL: dict[NodeName, str] = {"invoke_agent": "the agent call", "evaluate": "the evaluation"}

# Why not LangGraph's own time limits (add_node(..., timeout=...), langgraph 1.2.24): they
# refuse sync nodes ("Node timeouts are only supported for async nodes"), where the limit
# must hold under invoke too; a node's limit would also cover its other calls (a history
# summary, each candidate of a fan-out) where ours is per call; and a call that swallows its
# cancellation is neither waited for nor reported as abandoned.
CANCEL_GRACE = 0.2  # seconds a cancelled async call is given to stop before it is abandoned

logger = logging.getLogger("loop_agents")

_abandoned: set[asyncio.Task[Any]] = set()  # referenced until they end (asyncio: weakly)


class LoopTimeoutError(NodeTimeoutError):
    """A call of a loop's node ran longer than its time limit.

    A LangGraph ``NodeTimeoutError``, so the default ``retry_on`` retries it. With a
    checkpointer, ``ainvoke(None, config)`` on the thread resumes at that iteration.

    Attributes:
        node: ``"invoke_agent"`` or ``"evaluate"``.
        iteration: The iteration whose agent call or evaluation timed out.
        timeout: The limit, in seconds.
        elapsed: How long the call ran before it was cancelled, in seconds.
        abandoned: Whether the call was left running (it did not stop when cancelled).

    """

    iteration: int
    abandoned: bool

    def __init__(
        self,
        node: NodeName,
        iteration: int,
        timeout: float,
        elapsed: float,
        *,
        abandoned: bool = False,
    ) -> None:
        super().__init__(node, elapsed, kind="run", run_timeout=timeout)
        self.iteration = iteration
        self.abandoned = abandoned
        ended = (
            "was abandoned: it did not stop when cancelled (or, a sync call, could not be), "
            "so the loop stopped waiting for it and it may still be running"
            if abandoned
            else "was cancelled"
        )
        self.args = (
            f"node {node!r} timed out at iteration {iteration}: {_CALL[node]} ran longer "
            f"than {_OPTION[node]}={timeout:g}s and {ended} (elapsed {elapsed:.3f}s). "
            f"With a checkpointer, ainvoke(None, config) (invoke in sync code) on the "
            f"same thread resumes the loop at iteration {iteration}; raise "
            f"{_OPTION[node]} if the call needs longer.",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        rebuild = partial(LoopTimeoutError, abandoned=self.abandoned)
        return (rebuild, (self.node, self.iteration, self.timeout, self.elapsed))


def check_timeout(option: str, value: object, *, zero: bool = False) -> float | None:
    """Validate a time-limit option; return it in seconds (``None`` for no limit).

    ``zero=True`` allows 0 (``busy_timeout``: try once, do not wait).

    Raises:
        TypeError: ``value`` is not a number, a ``timedelta`` or ``None``.
        ValueError: ``value`` is not a positive (or, ``zero``, 0), finite number of seconds.

    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = finite_float(value)  # None for inf, nan and ints too large for a float
        seconds = math.inf if number is None else number
    else:
        raise TypeError(
            f"{option} must be a number of seconds, a datetime.timedelta or None; got "
            f"{type(value).__name__} {value!r:.60}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        kind = "positive, finite number of seconds"
        if zero:
            kind = "finite number of seconds >= 0 (0: try once)"
        raise ValueError(
            f"{option} must be a {kind}; got {describe_number(value)}. Pass None for no limit."
        )
    return seconds


def check_retry_policy(option: str, value: object) -> RetryPolicies | None:
    """Validate a retry option: a ``RetryPolicy``, a sequence of them, or ``None``.

    Raises:
        TypeError: ``value`` is anything else.

    """
    if value is None or isinstance(value, RetryPolicy):
        return value
    policies = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []
    if policies and all(isinstance(p, RetryPolicy) for p in policies):
        return policies
    raise TypeError(
        f"{option} must be a langgraph.types.RetryPolicy, a non-empty sequence of them "
        f"(the first whose retry_on matches applies) or None; got "
        f"{type(value).__name__} {value!r:.80}. Example: "
        f"RetryPolicy(max_attempts=3, retry_on=openai.RateLimitError)"
    )


@dataclass(frozen=True)
class TimeLimit:
    """The time limit of a call of ``node`` at ``iteration``: ``seconds``, then it is left."""

    node: NodeName
    iteration: int
    seconds: float

    def run(self, call: Call) -> Any:
        """Make ``call`` synchronously in a thread of its own; wait at most ``seconds``."""
        started = time.monotonic()
        outcome: Future[Any] = Future()
        context = contextvars.copy_context()  # the run's config and stream writer

        def make_call() -> None:
            try:
                outcome.set_result(context.run(call.sync, call.input, call.config))
            except BaseException as error:  # handed to the waiting thread
                outcome.set_exception(error)

        # a daemon thread: an abandoned call must not keep the process from exiting
        threading.Thread(target=make_call, name=f"loop-agents {self.node}", daemon=True).start()
        try:
            return outcome.result(timeout=self.seconds)  # its own result or error
        except TimeoutError:
            if outcome.done():
                return outcome.result()  # it raised TimeoutError itself, or ended just now
        raise self._timed_out(started, "cannot be stopped (a sync call)")

    async def arun(self, call: Call) -> Any:
        """Await ``call`` at most ``seconds``, whatever it does with cancellation."""
        started = time.monotonic()
        workers: set[object] = set()  # its sync calls running in worker threads
        context = contextvars.copy_context()  # the run's config and stream writer, and:
        context.run(WORKERS.set, workers)
        # a task of its own, so the wait ends at the deadline even if the call swallows
        # CancelledError
        task = context.run(asyncio.ensure_future, call.async_(call.input, call.config))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.seconds)
            if done and time.monotonic() - started <= self.seconds + CANCEL_GRACE:
                return task.result()  # its own result or error (a TimeoutError too)
            if not done:
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE)
        except BaseException:  # the node was cancelled: so is the call
            task.cancel()
            raise
        how = None  # why the call was abandoned, if it was
        if not done:
            _abandoned.add(task)
            how = "did not stop when cancelled"
        elif workers:
            how = "runs in a worker thread (a sync call)"
        task.add_done_callback(_forget)  # and collects what it ended with: too late
        raise self._timed_out(started, how)

    def _timed_out(self, started: float, abandoned: str | None) -> LoopTimeoutError:
        """The error at the deadline; a WARNING when the call was abandoned (and why)."""
        if abandoned is not None:
            logger.warning(
                "loop node %r, iteration %d: %s ran past %s=%gs and %s; it was abandoned "
                "(the loop stopped waiting for it; it may still be running)",
                self.node,
                self.iteration,
                _CALL[self.node],
                _OPTION[self.node],
                self.seconds,
                abandoned,
            )
        elapsed = time.monotonic() - started
        return LoopTimeoutError(
            self.node, self.iteration, self.seconds, elapsed, abandoned=abandoned is not None
        )


def _forget(task: asyncio.Task[Any]) -> None:
    """Drop a task from `_abandoned` when it ends; collect its error so none is reported."""
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()
