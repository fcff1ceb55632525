"""Agents and evaluators with call counters, for the persistence and resume tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT
from tests.fakes import review

REQUEST = HumanMessage("Write a haiku about rain.")


class Boom(Exception):
    """A failure injected by a test."""


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def answers(messages: list[AnyMessage]) -> list[str]:
    return [m.text for m in messages if m.type == "ai"]


def iteration_of(messages: list[AnyMessage]) -> int:
    """The iteration a call is for: one more than the answers the agent was sent (a loop
    repairs by default: every retry is sent the earlier answers)."""
    return sum(1 for m in messages if m.type == "ai") + 1


@dataclass
class CountingAgent:
    """Answers ``answer N`` for iteration N; fails once at ``fail_at`` when set."""

    fail_at: int | None = None
    calls: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.__name__ = "agent"

    def __call__(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        if iteration == self.fail_at:
            self.fail_at = None
            raise Boom(f"agent failed at iteration {iteration}")
        return f"answer {iteration}"

    def per_iteration(self) -> Counter[int]:
        return Counter(self.calls)


@dataclass
class AsyncCountingAgent(CountingAgent):
    async def __call__(self, messages: list[AnyMessage]) -> str:  # type: ignore[override]
        await asyncio.sleep(0)
        return CountingAgent.__call__(self, messages)


@dataclass
class CountingEvaluator:
    """Accepts iteration ``accept_at``, asks for more before; fails once at ``fail_at``."""

    accept_at: int
    fail_at: int | None = None
    calls: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.__name__ = "evaluator"

    def __call__(self, context: LoopContext) -> LoopEvaluation:
        iteration = context["iteration"]
        self.calls.append(iteration)
        if iteration == self.fail_at:
            self.fail_at = None
            raise Boom(f"evaluator failed at iteration {iteration}")
        if iteration >= self.accept_at:
            return {"stop": True, "score": float(iteration)}
        return {"stop": False, "feedback": f"feedback {iteration}"}


def transcript(n: int, feedback_format: str = DEFAULT_FEEDBACK_FORMAT) -> list[tuple[str, str]]:
    """The conversation of a loop accepted at iteration ``n`` (feedback in that format)."""
    turns = [("human", REQUEST.text)]
    for i in range(1, n + 1):
        turns.append(("ai", f"answer {i}"))
        if i < n:
            turns.append(("human", review(f"feedback {i}", i, feedback_format)))
    return turns


def frequent_snapshot_keys(every: int) -> dict[str, Any]:
    """Delta-channel annotations that snapshot every ``every`` updates (1000 by default).

    Put in place of ``loop_agents.loop.storage.DELTA_KEYS`` (before ``create_loop_agent``),
    they make a short loop store full snapshots between its delta writes.
    """
    from typing import Annotated

    from langgraph.channels.delta import DeltaChannel

    from loop_agents.loop.agent_state import AgentStateDeltaChannel, updated
    from loop_agents.loop.storage import append_messages, extend_list

    return {
        "messages": Annotated[list, DeltaChannel(append_messages, snapshot_frequency=every)],
        "feedback": Annotated[list, DeltaChannel(extend_list, snapshot_frequency=every)],
        "records": Annotated[list, DeltaChannel(extend_list, snapshot_frequency=every)],
        "attempt_states": Annotated[list, DeltaChannel(extend_list, snapshot_frequency=every)],
        "agent_state": Annotated[
            dict, AgentStateDeltaChannel(updated, dict, snapshot_frequency=every)
        ],
    }
