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

from loop_agents.loop._agent import AgentCaller, AgentLike, answer_of, usage, with_fresh_ids
from loop_agents.loop._evaluation import Evaluator, EvaluatorCaller
from loop_agents.loop._reporting import LoopReporter
from loop_agents.loop._usage import counting_tokens
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, feedback_message
from loop_agents.loop.history._select import HistorySelector
from loop_agents.loop.history.policies import HistoryPolicy
from loop_agents.loop.output import OutputMode, keep_final_answer
from loop_agents.loop.selection import Selection, selection_updates
from loop_agents.loop.state import (
    IterationRecord,
    LoopContext,
    LoopEvaluation,
    LoopState,
    StopReason,
)
from loop_agents.loop.stopping import StopPolicy, wall_clock

STEPS_PER_ITERATION = 2
"""LangGraph steps one iteration takes: ``invoke_agent`` then ``evaluate``."""


class LoopNodes:
    """The loop's node functions, bound to one agent, one evaluator and one cap."""

    def __init__(
        self,
        agent: AgentLike,
        evaluator: Evaluator,
        max_iterations: int,
        *,
        name: str = "loop_agent",
        output_mode: OutputMode = "full_state",
        policy: StopPolicy | None = None,
        select: Selection = "last",
        history: HistoryPolicy = "full",
        feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT,
    ) -> None:
        self.agent = AgentCaller(agent)
        self.evaluator = EvaluatorCaller(evaluator)
        self.max_iterations = max_iterations
        self.policy = policy or StopPolicy(max_iterations)
        self.select = select
        self.output_mode = output_mode
        self.feedback_format = feedback_format
        self.history = HistorySelector(history, feedback_format)
        # events on the custom stream; agent/evaluator calls as runs named per iteration
        self.report = LoopReporter(name, max_iterations)
        self._call_agent = self.report.traced("agent", self.agent.invoke, self.agent.ainvoke)
        self._call_evaluator = self.report.traced(
            "evaluator", self.evaluator.invoke, self.evaluator.ainvoke
        )

    # -- invoke_agent -------------------------------------------------------------

    def invoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (sync) and return the state updates of this iteration."""
        updates, history = _start_iteration(state)
        iteration = _iteration_number(state, updates)
        self.report.iteration_started(iteration)
        selected = self.history.invoke(
            state, updates, history, self.report.config(config, iteration, "compaction")
        )
        started = time.perf_counter()
        produced = self._call_agent.invoke(
            selected.messages, self.report.config(config, iteration, "agent")
        )
        updates = _agent_updates(
            updates | selected.updates, history, produced, time.perf_counter() - started
        )
        updates["agent_run"] |= _history_tokens(selected.tokens)
        self.report.agent_finished(iteration, updates["last_response"], updates["agent_run"])
        return updates

    async def ainvoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (async) and return the state updates of this iteration."""
        updates, history = _start_iteration(state)
        iteration = _iteration_number(state, updates)
        self.report.iteration_started(iteration)
        selected = await self.history.ainvoke(
            state, updates, history, self.report.config(config, iteration, "compaction")
        )
        started = time.perf_counter()
        produced = await self._call_agent.ainvoke(
            selected.messages, self.report.config(config, iteration, "agent")
        )
        updates = _agent_updates(
            updates | selected.updates, history, produced, time.perf_counter() - started
        )
        updates["agent_run"] |= _history_tokens(selected.tokens)
        self.report.agent_finished(iteration, updates["last_response"], updates["agent_run"])
        return updates

    # -- evaluate -----------------------------------------------------------------

    def evaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (sync) and decide whether the loop goes on."""
        context = _context(state)
        started = time.perf_counter()
        with counting_tokens() as used:
            evaluation = self._call_evaluator.invoke(
                context, self.report.config(config, context["iteration"], "evaluator")
            )
        seconds = time.perf_counter() - started
        return self._evaluation_updates(state, evaluation, seconds, used.totals)

    async def aevaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (async) and decide whether the loop goes on."""
        context = _context(state)
        started = time.perf_counter()
        with counting_tokens() as used:
            evaluation = await self._call_evaluator.ainvoke(
                context, self.report.config(config, context["iteration"], "evaluator")
            )
        seconds = time.perf_counter() - started
        return self._evaluation_updates(state, evaluation, seconds, used.totals)

    def _evaluation_updates(
        self,
        state: LoopState,
        evaluation: LoopEvaluation,
        seconds: float,
        evaluator_tokens: tuple[int, int] = (0, 0),
    ) -> dict[str, Any]:
        iteration = state.get("iteration", 0)
        text = evaluation.get("feedback", "")
        agent_run = state.get("agent_run") or {
            "seconds": 0.0,
            "input_tokens": 0,
            "output_tokens": 0,
        }
        answer = state["last_response"]
        record: IterationRecord = {
            "iteration": iteration,
            "answer_id": cast(str, answer.id),
            "stop": evaluation["stop"],
            "feedback": text,
            "score": evaluation.get("score"),
            "evaluator": self.evaluator.name,
            "decided_by": evaluation.get("decided_by") or [self.evaluator.name],
            "agent_seconds": agent_run["seconds"],
            "evaluation_seconds": seconds,
            "input_tokens": agent_run["input_tokens"],
            "output_tokens": agent_run["output_tokens"],
            "evaluator_input_tokens": evaluator_tokens[0],
            "evaluator_output_tokens": evaluator_tokens[1],
            "history_input_tokens": agent_run.get("history_input_tokens", 0),
            "history_output_tokens": agent_run.get("history_output_tokens", 0),
        }
        if self.output_mode == "last_message":
            record["answer"] = answer  # the attempts leave ``messages`` when the loop ends
        records = [*state.get("records", []), record]
        reason = self._stop_reason(state, evaluation, records)
        updates: dict[str, Any] = {
            "stop": evaluation["stop"],
            "feedback": [text],
            "records": [record],
            "stop_reason": reason,
        }
        self.report.evaluation_finished(record)
        if reason is None:
            # with its id: a delta channel replays the stored write, and a message given
            # without one would get it only as it is stored, after the router read it
            message = feedback_message(
                text, iteration=iteration, feedback_format=self.feedback_format
            )
            updates["messages"] = with_fresh_ids([message], ())
        else:
            updates |= selection_updates(records, self.select, state)
            final = updates.get("last_response", answer)
            self.report.loop_finished(reason, records, updates["selected_iteration"], final)
        if reason is not None and self.output_mode == "last_message":
            updates = keep_final_answer(state, updates)
        return updates

    def _stop_reason(
        self, state: LoopState, evaluation: LoopEvaluation, records: list[IterationRecord]
    ) -> StopReason | None:
        remaining = state.get("remaining_steps")
        return self.policy.stop_reason(
            accepted=evaluation["stop"],
            iteration=state.get("iteration", 0),
            records=records,
            started_at=state.get("started_at"),
            out_of_steps=remaining is not None and remaining <= STEPS_PER_ITERATION,
        )


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
        "started_at": wall_clock(),
        "selected_iteration": None,
        "selected_score": None,
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


def _iteration_number(state: LoopState, updates: dict[str, Any]) -> int:
    """The number of the iteration `_start_iteration` opened (1 when a new loop starts)."""
    if isinstance(updates["iteration"], Overwrite):
        return 1
    return state.get("iteration", 0) + 1


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


def _history_tokens(tokens: tuple[int, int]) -> dict[str, int]:
    """The history policy's model-call tokens, for ``agent_run`` (nothing when none)."""
    if tokens == (0, 0):
        return {}
    return {"history_input_tokens": tokens[0], "history_output_tokens": tokens[1]}


def _context(state: LoopState) -> LoopContext:
    feedback = list(state.get("feedback") or [])
    return {
        "iteration": state.get("iteration", 0),
        "init_messages": list(state.get("init_messages") or []),
        "last_response": state["last_response"],
        "feedback": feedback,
        "messages": list(state.get("messages") or []),
    }
