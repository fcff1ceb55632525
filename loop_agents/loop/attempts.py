"""One call of the agent: its messages or its (model-caused) failure, and what it used.

`AttemptRunner` calls the agent (through the loop's traced runnable), counts the model
calls made meanwhile (`loop_agents.loop._usage`) and, with ``on_agent_error="feedback"``,
turns a model-caused failure into an `Attempt` with an ``error`` instead of raising
(see `loop_agents.loop.control.agent_errors`). The ``invoke_agent`` node uses it for the single
answer of an iteration and for each of ``candidates=k``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AnyMessage
from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop._agent import usage as message_usage
from loop_agents.loop._usage import CallUsage, counting_tokens
from loop_agents.loop.control.agent_errors import (
    OnAgentError,
    answer_problem,
    error_text,
    is_model_error,
)
from loop_agents.loop.state import AgentRun, LoopContext, LoopEvaluation


@dataclass(frozen=True)
class Attempt:
    """What one agent call gave.

    Attributes:
        produced: The messages it produced, its answer last (``None`` when it failed).
        error: Why it failed (``None`` when it answered).
        seconds: Wall-clock seconds of the call.
        usage: The model calls made during it.

    """

    produced: list[AnyMessage] | None
    error: str | None
    seconds: float
    usage: CallUsage

    def run(self, history: CallUsage) -> AgentRun:
        """The `AgentRun` of this call, with the history policy's calls ``history``."""
        tokens_in, tokens_out = message_usage(self.produced or [])
        calls = self.usage + history
        run: AgentRun = {
            "seconds": self.seconds,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "requests": calls.requests,
            "models": {name: [pair[0], pair[1]] for name, pair in calls.models.items()},
        }
        if calls.unmetered:
            run["unmetered"] = dict(calls.unmetered)
        if history.input_tokens or history.output_tokens:
            run["history_input_tokens"] = history.input_tokens
            run["history_output_tokens"] = history.output_tokens
        if self.error is not None:
            run["error"] = self.error
        return run


class AttemptRunner:
    """Calls the agent once, sync or async, as one `Attempt`."""

    def __init__(
        self, call: Runnable[list[AnyMessage], list[AnyMessage]], on_error: OnAgentError
    ) -> None:
        self.call = call
        self.feedback = on_error == "feedback"

    def _outcome(self, produced: list[AnyMessage]) -> tuple[list[AnyMessage] | None, str | None]:
        problem = answer_problem(produced) if self.feedback else None
        return (None, problem) if problem is not None else (produced, None)

    def _failure(self, error: Exception) -> str:
        if not (self.feedback and is_model_error(error)):
            raise error
        return error_text(error)

    def invoke(self, messages: list[AnyMessage], config: RunnableConfig) -> Attempt:
        """Call the agent synchronously."""
        started = time.perf_counter()
        produced: list[AnyMessage] | None = None
        with counting_tokens() as used:
            try:
                produced, error = self._outcome(self.call.invoke(messages, config))
            except Exception as exc:  # model-caused errors only; others re-raised
                error = self._failure(exc)
        return Attempt(produced, error, time.perf_counter() - started, used.usage())

    async def ainvoke(self, messages: list[AnyMessage], config: RunnableConfig) -> Attempt:
        """Call the agent asynchronously."""
        started = time.perf_counter()
        produced: list[AnyMessage] | None = None
        with counting_tokens() as used:
            try:
                produced, error = self._outcome(await self.call.ainvoke(messages, config))
            except Exception as exc:  # model-caused errors only; others re-raised
                error = self._failure(exc)
        return Attempt(produced, error, time.perf_counter() - started, used.usage())


def run_usage(run: AgentRun | dict[str, Any]) -> CallUsage:
    """The model calls an `AgentRun` recorded (agent and history policy)."""
    models = run.get("models") or {}
    return CallUsage(
        0,
        0,
        int(run.get("requests", 0)),
        {name: (int(pair[0]), int(pair[1])) for name, pair in models.items()},
        {name: int(calls) for name, calls in (run.get("unmetered") or {}).items()},
    )


@dataclass(frozen=True)
class Judged:
    """One evaluation: the verdict, how long it took and the model calls it made."""

    evaluation: LoopEvaluation
    seconds: float
    usage: CallUsage


class JudgeRunner:
    """Calls the evaluator once (sync or async) and counts its model calls."""

    def __init__(self, call: Runnable[LoopContext, LoopEvaluation]) -> None:
        self.call = call

    def invoke(self, context: LoopContext, config: RunnableConfig) -> Judged:
        """Evaluate synchronously."""
        started = time.perf_counter()
        with counting_tokens() as used:
            evaluation = self.call.invoke(context, config)
        return Judged(evaluation, time.perf_counter() - started, used.usage())

    async def ainvoke(self, context: LoopContext, config: RunnableConfig) -> Judged:
        """Evaluate asynchronously."""
        started = time.perf_counter()
        with counting_tokens() as used:
            evaluation = await self.call.ainvoke(context, config)
        return Judged(evaluation, time.perf_counter() - started, used.usage())
