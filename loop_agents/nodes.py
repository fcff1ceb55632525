"""The loop's two nodes: ``invoke_agent`` (call the agent) and ``evaluate`` (judge, decide).

Each node has a sync and an async form; `create_loop_agent` binds both into one node so
that ``invoke``/``stream`` and ``ainvoke``/``astream`` both work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Overwrite

from loop_agents._agent import AgentCaller, AgentLike, answer_of, usage, with_fresh_ids
from loop_agents._evaluation import Evaluator, EvaluatorCaller
from loop_agents.feedback import feedback_message
from loop_agents.state import (
    IterationRecord,
    LoopContext,
    LoopEvaluation,
    LoopState,
    StopReason,
)

STEPS_PER_ITERATION = 2
"""LangGraph steps one iteration takes: ``invoke_agent`` then ``evaluate``."""


class LoopNodes:
    """The loop's node functions, bound to one agent, one evaluator and one cap."""

    def __init__(self, agent: AgentLike, evaluator: Evaluator, max_iterations: int) -> None:
        self.agent = AgentCaller(agent)
        self.evaluator = EvaluatorCaller(evaluator)
        self.max_iterations = max_iterations

    # -- invoke_agent -------------------------------------------------------------

    def invoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (sync) and return the state updates of this iteration."""
        updates, history = _start_iteration(state)
        started = time.perf_counter()
        produced = self.agent.invoke(history, config)
        return _agent_updates(updates, history, produced, time.perf_counter() - started)

    async def ainvoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (async) and return the state updates of this iteration."""
        updates, history = _start_iteration(state)
        started = time.perf_counter()
        produced = await self.agent.ainvoke(history, config)
        return _agent_updates(updates, history, produced, time.perf_counter() - started)

    # -- evaluate -----------------------------------------------------------------

    def evaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (sync) and decide whether the loop goes on."""
        context = _context(state)
        started = time.perf_counter()
        evaluation = self.evaluator.invoke(context, config)
        return self._evaluation_updates(state, evaluation, time.perf_counter() - started)

    async def aevaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (async) and decide whether the loop goes on."""
        context = _context(state)
        started = time.perf_counter()
        evaluation = await self.evaluator.ainvoke(context, config)
        return self._evaluation_updates(state, evaluation, time.perf_counter() - started)

    def _evaluation_updates(
        self, state: LoopState, evaluation: LoopEvaluation, seconds: float
    ) -> dict[str, Any]:
        iteration = state.get("iteration", 0)
        text = evaluation.get("feedback", "")
        reason = self._stop_reason(state, evaluation)
        agent_run = state.get("agent_run") or {
            "seconds": 0.0,
            "input_tokens": 0,
            "output_tokens": 0,
        }
        record: IterationRecord = {
            "iteration": iteration,
            "answer": state["last_response"],
            "stop": evaluation["stop"],
            "feedback": text,
            "score": evaluation.get("score"),
            "evaluator": self.evaluator.name,
            "agent_seconds": agent_run["seconds"],
            "evaluation_seconds": seconds,
            "input_tokens": agent_run["input_tokens"],
            "output_tokens": agent_run["output_tokens"],
        }
        updates: dict[str, Any] = {
            "stop": evaluation["stop"],
            "feedback": [text],
            "records": [record],
            "stop_reason": reason,
        }
        if reason is None:
            updates["messages"] = [feedback_message(text, iteration=iteration)]
        return updates

    def _stop_reason(self, state: LoopState, evaluation: LoopEvaluation) -> StopReason | None:
        if evaluation["stop"]:
            return "accepted"
        if state.get("iteration", 0) >= self.max_iterations:
            return "max_iterations"
        remaining = state.get("remaining_steps")
        if remaining is not None and remaining <= STEPS_PER_ITERATION:
            return "recursion_limit"
        return None


def _start_iteration(state: LoopState) -> tuple[dict[str, Any], list[AnyMessage]]:
    """The updates that open an iteration, and the messages the agent is sent.

    The first iteration of a loop fixes ``init_messages``. A loop that already ended on
    this thread (``stop_reason`` set) is followed by a new one: its counters restart and
    the conversation in ``messages`` is kept.
    """
    messages = list(state.get("messages") or [])
    previous_done = state.get("stop_reason") is not None
    if not previous_done and state.get("iteration", 0) > 0:
        return {"iteration": 1}, messages
    init = _initial_messages(state, messages, previous_done)
    updates: dict[str, Any] = {
        "init_messages": init,
        "loop_init_ids": [cast(str, m.id) for m in init],
        "stop_reason": None,
    }
    if previous_done:
        updates |= {
            "iteration": Overwrite(1),
            "feedback": Overwrite([]),
            "records": Overwrite([]),
            "stop": False,
        }
    else:
        updates["iteration"] = 1
    if not messages:
        updates["messages"] = init
        messages = list(init)
    return updates, messages


def _initial_messages(
    state: LoopState, messages: list[AnyMessage], previous_done: bool
) -> list[AnyMessage]:
    given = list(state.get("init_messages") or [])
    if previous_done:
        recorded = state.get("loop_init_ids") or []
        if not given or [m.id for m in given] == recorded:
            given = _after_previous_answer(messages, state.get("last_response"))
    elif not given:
        given = messages
    if not given:
        raise ValueError(
            "a loop needs a request to start from: pass {'messages': [HumanMessage(...)]} "
            "(or the seed form {'init_messages': [...], 'messages': [...]}) with at least "
            "one message"
        )
    return with_fresh_ids(given, ()) if any(m.id is None for m in given) else given


def _after_previous_answer(
    messages: Sequence[AnyMessage], answer: AIMessage | None
) -> list[AnyMessage]:
    ids = [m.id for m in messages]
    if answer is not None and answer.id in ids:
        return list(messages[ids.index(answer.id) + 1 :])
    last_ai = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
    return list(messages[last_ai + 1 :])


def _agent_updates(
    updates: dict[str, Any],
    history: list[AnyMessage],
    produced: list[AnyMessage],
    seconds: float,
) -> dict[str, Any]:
    produced = with_fresh_ids(produced, history)
    tokens_in, tokens_out = usage(produced)
    new_messages = [*updates.get("messages", []), *produced]
    return updates | {
        "messages": new_messages,
        "last_response": answer_of(produced),
        "agent_run": {"seconds": seconds, "input_tokens": tokens_in, "output_tokens": tokens_out},
    }


def _context(state: LoopState) -> LoopContext:
    feedback = list(state.get("feedback") or [])
    return {
        "iteration": state.get("iteration", 0),
        "init_messages": list(state.get("init_messages") or []),
        "last_response": state["last_response"],
        "feedback": feedback,
        "messages": list(state.get("messages") or []),
    }
