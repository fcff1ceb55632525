"""The loop's two nodes: ``invoke_agent`` (call the agent) and ``evaluate`` (judge, decide).

Each node has a sync and an async form; `create_loop_agent` binds both into one node so
that ``invoke``/``stream`` and ``ainvoke``/``astream`` both work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.types import Overwrite

from loop_agents._agent import AgentCaller, AgentLike, answer_of, usage, with_fresh_ids
from loop_agents._evaluation import Evaluator, EvaluatorCaller
from loop_agents._history_select import HistorySelector, Selected
from loop_agents._reporting import LoopReporter
from loop_agents._usage import NO_USAGE, CallUsage, counting_tokens
from loop_agents.advice import Advisor, default_advice
from loop_agents.agent_errors import OnAgentError, failure_feedback
from loop_agents.attempts import Attempt, AttemptRunner, Judged, JudgeRunner
from loop_agents.budgets import PriceTable
from loop_agents.candidates import (
    CandidatePool,
    ajudge_all,
    best_candidate,
    candidate_agents,
    candidate_context,
    judge_all,
)
from loop_agents.criteria import with_criteria
from loop_agents.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, feedback_message
from loop_agents.history import HistoryPolicy
from loop_agents.iteration_records import base_record, candidate_records, combined_run
from loop_agents.output import OutputMode, keep_final_answer
from loop_agents.selection import Selection, selection_updates
from loop_agents.state import (
    AgentRun,
    CandidateRun,
    IterationRecord,
    LoopContext,
    LoopEvaluation,
    LoopState,
    StopReason,
)
from loop_agents.stopping import StopPolicy, wall_clock

STEPS_PER_ITERATION = 2
"""LangGraph steps one iteration takes: ``invoke_agent`` then ``evaluate``."""


@dataclass(frozen=True)
class LoopControls:
    """The loop-control options of `create_loop_agent`, checked (see `loop_agents.graph`).

    Attributes:
        candidates: Answers per iteration (`loop_agents.candidates`).
        candidate_temperature: Each candidate's temperature, or ``None``.
        threshold: The score at which a score-only verdict accepts (`loop_agents.advice`).
        advisor: The model that writes feedback for a verdict without any, or ``None``.
        criteria: The criteria shown to the agent before its first attempt, or ``None``.
        prices: The price table (`loop_agents.budgets`), or ``None``.
        on_agent_error: ``"raise"`` or ``"feedback"`` (`loop_agents.agent_errors`).
        count_failed_attempts: Whether a failed attempt counts toward ``max_iterations``.

    """

    candidates: int = 1
    candidate_temperature: list[float] | None = None
    threshold: float | None = None
    advisor: Runnable[list[BaseMessage], object] | None = None
    criteria: str | None = None
    prices: PriceTable | None = None
    on_agent_error: OnAgentError = "raise"
    count_failed_attempts: bool = True


@dataclass
class _Outcome:
    """An iteration's outcome before its state updates: its record and what to append."""

    record: IterationRecord
    answer: AIMessage | None
    produced: list[AnyMessage] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


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
        controls: LoopControls | None = None,
    ) -> None:
        self.controls = controls = controls or LoopControls()
        self.agent = AgentCaller(agent)
        self.evaluator = EvaluatorCaller(
            evaluator, threshold=controls.threshold, advised=controls.advisor is not None
        )
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
        self.attempt = AttemptRunner(self._call_agent, controls.on_agent_error)
        self.judge = JudgeRunner(self._call_evaluator)
        self.pool: CandidatePool | None = None
        if controls.candidates > 1:
            callers = [
                self.agent if a is agent else AgentCaller(a)
                for a in candidate_agents(
                    agent, controls.candidates, controls.candidate_temperature
                )
            ]
            self.pool = CandidatePool(
                [
                    AttemptRunner(
                        self.report.traced("agent", c.invoke, c.ainvoke), controls.on_agent_error
                    )
                    for c in callers
                ]
            )
        self.advisor = Advisor(controls.advisor, controls.threshold)
        self._call_advisor = self.report.traced("advisor", self._advice_sync, self._advice_async)

    # -- invoke_agent -------------------------------------------------------------

    def _open(self, state: LoopState) -> tuple[dict[str, Any], list[AnyMessage], int]:
        updates, history = _start_iteration(state)
        if self.controls.criteria is not None:
            updates, history = with_criteria(updates, history, self.controls.criteria)
        iteration = _iteration_number(state, updates)
        self.report.iteration_started(iteration)
        return updates, history, iteration

    def invoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (sync) and return the state updates of this iteration."""
        updates, history, iteration = self._open(state)
        selected = self.history.invoke(
            state, updates, history, self.report.config(config, iteration, "compaction")
        )
        agent_config = self.report.config(config, iteration, "agent")
        updates |= selected.updates
        if self.pool is not None:
            started = time.perf_counter()
            attempts = self.pool.invoke(selected.messages, agent_config)
            seconds = time.perf_counter() - started
            return self._candidate_updates(updates, history, attempts, seconds, selected, iteration)
        attempt = self.attempt.invoke(selected.messages, agent_config)
        return self._attempt_updates(updates, history, attempt, selected, iteration)

    async def ainvoke_agent(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Call the agent (async) and return the state updates of this iteration."""
        updates, history, iteration = self._open(state)
        selected = await self.history.ainvoke(
            state, updates, history, self.report.config(config, iteration, "compaction")
        )
        agent_config = self.report.config(config, iteration, "agent")
        updates |= selected.updates
        if self.pool is not None:
            started = time.perf_counter()
            attempts = await self.pool.ainvoke(selected.messages, agent_config)
            seconds = time.perf_counter() - started
            return self._candidate_updates(updates, history, attempts, seconds, selected, iteration)
        attempt = await self.attempt.ainvoke(selected.messages, agent_config)
        return self._attempt_updates(updates, history, attempt, selected, iteration)

    def _attempt_updates(
        self,
        updates: dict[str, Any],
        history: list[AnyMessage],
        attempt: Attempt,
        selected: Selected,
        iteration: int,
    ) -> dict[str, Any]:
        if attempt.produced is None:
            run = attempt.run(selected.usage)
            self.report.agent_failed(iteration, cast(str, attempt.error))
            return updates | {"agent_run": run}
        updates = _agent_updates(updates, history, attempt.produced, attempt.seconds)
        updates["agent_run"] = attempt.run(selected.usage)
        self.report.agent_finished(iteration, updates["last_response"], updates["agent_run"])
        return updates

    def _candidate_updates(
        self,
        updates: dict[str, Any],
        history: list[AnyMessage],
        attempts: list[Attempt],
        seconds: float,
        selected: Selected,
        iteration: int,
    ) -> dict[str, Any]:
        runs: list[CandidateRun] = []
        taken = list(history)
        for number, attempt in enumerate(attempts, 1):
            produced = with_fresh_ids(attempt.produced, taken) if attempt.produced else []
            taken.extend(produced)
            run = attempt.run(NO_USAGE)
            runs.append({"candidate": number, "produced": produced, "run": run})
            if attempt.produced is None:
                self.report.agent_failed(iteration, cast(str, attempt.error), candidate=number)
            else:
                self.report.agent_finished(iteration, answer_of(produced), run, candidate=number)
        return updates | {
            "candidate_runs": runs,
            "agent_run": combined_run(runs, seconds, selected.usage),
        }

    # -- evaluate -----------------------------------------------------------------

    def evaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (sync) and decide whether the loop goes on."""
        iteration = state.get("iteration", 0)
        judge_config = self.report.config(config, iteration, "evaluator")
        runs = state.get("candidate_runs")
        if runs:
            contexts = self._candidate_contexts(state, runs)
            judged = judge_all(self.judge, contexts, judge_config) if contexts else []
            outcome = self._candidates_outcome(state, runs, judged)
        elif "error" in (state.get("agent_run") or {}):
            outcome = self._failure_outcome(state)
        else:
            judged_one = self.judge.invoke(_context(state), judge_config)
            outcome = self._answer_outcome(state, judged_one)
        reason = self._stop_reason(state, outcome.record)
        if reason is None and self._wants_advice(outcome):
            advice = self._call_advisor.invoke(
                _advice_input(state, outcome), self.report.config(config, iteration, "advisor")
            )
            reason = self._advised(state, outcome, advice)
        return self._evaluation_updates(state, outcome, reason)

    async def aevaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (async) and decide whether the loop goes on."""
        iteration = state.get("iteration", 0)
        judge_config = self.report.config(config, iteration, "evaluator")
        runs = state.get("candidate_runs")
        if runs:
            contexts = self._candidate_contexts(state, runs)
            judged = await ajudge_all(self.judge, contexts, judge_config) if contexts else []
            outcome = self._candidates_outcome(state, runs, judged)
        elif "error" in (state.get("agent_run") or {}):
            outcome = self._failure_outcome(state)
        else:
            judged_one = await self.judge.ainvoke(_context(state), judge_config)
            outcome = self._answer_outcome(state, judged_one)
        reason = self._stop_reason(state, outcome.record)
        if reason is None and self._wants_advice(outcome):
            advice = await self._call_advisor.ainvoke(
                _advice_input(state, outcome), self.report.config(config, iteration, "advisor")
            )
            reason = self._advised(state, outcome, advice)
        return self._evaluation_updates(state, outcome, reason)

    # -- outcomes -----------------------------------------------------------------

    def _answer_outcome(self, state: LoopState, judged: Judged) -> _Outcome:
        answer = state["last_response"]
        record = base_record(
            state.get("iteration", 0),
            _agent_run(state),
            judged,
            answer,
            self.evaluator.name,
            self.controls.prices,
        )
        return self._with_written_feedback(_Outcome(record, answer), judged.evaluation)

    def _failure_outcome(self, state: LoopState, error: str | None = None) -> _Outcome:
        run = _agent_run(state)
        error = error or run.get("error") or "the agent call failed"
        record = base_record(
            state.get("iteration", 0), run, None, None, self.evaluator.name, self.controls.prices
        )
        record |= {
            "feedback": failure_feedback(error),
            "feedback_from": "agent_error",
            "error": error,
        }
        if not self.controls.count_failed_attempts:
            record["counted"] = False
        return _Outcome(record, None)

    def _candidate_contexts(self, state: LoopState, runs: list[CandidateRun]) -> list[LoopContext]:
        base = _context(state, with_answer=False)
        return [
            candidate_context(base, c["produced"], answer_of(c["produced"]), c["candidate"])
            for c in runs
            if c["produced"]
        ]

    def _candidates_outcome(
        self, state: LoopState, runs: list[CandidateRun], judged: list[Judged]
    ) -> _Outcome:
        answered = [c for c in runs if c["produced"]]
        by_number = {c["candidate"]: j for c, j in zip(answered, judged, strict=True)}
        if not answered:
            errors = "; ".join(f"candidate {c['candidate']}: {c['run'].get('error')}" for c in runs)
            outcome = self._failure_outcome(state, errors)
            outcome.record["candidates"] = candidate_records(runs, {}, None)
            outcome.extra = {"candidate_runs": []}
            return outcome
        number = best_candidate([(n, j.evaluation) for n, j in by_number.items()])
        chosen = next(c for c in runs if c["candidate"] == number)
        best = by_number[number]
        answer = answer_of(chosen["produced"])
        usage = NO_USAGE
        for verdict in judged:
            usage = usage + verdict.usage
        record = base_record(
            state.get("iteration", 0),
            _agent_run(state),
            Judged(best.evaluation, max(j.seconds for j in judged), usage),
            answer,
            self.evaluator.name,
            self.controls.prices,
        )
        record["candidate"] = number
        record["candidates"] = candidate_records(runs, by_number, number)
        self.report.candidates_judged(record)
        outcome = _Outcome(record, answer, chosen["produced"], {"candidate_runs": []})
        return self._with_written_feedback(outcome, best.evaluation)

    def _with_written_feedback(self, outcome: _Outcome, evaluation: LoopEvaluation) -> _Outcome:
        """Fill in the default sentence for a verdict that asks to go on without feedback."""
        record = outcome.record
        if not record["stop"] and not (evaluation.get("feedback") or "").strip():
            record["feedback"] = default_advice(record["score"], self.controls.threshold)
            record["feedback_from"] = "default"
        return outcome

    def _wants_advice(self, outcome: _Outcome) -> bool:
        return self.advisor.model is not None and outcome.record.get("feedback_from") == "default"

    def _advice_sync(self, given: dict[str, Any], config: RunnableConfig) -> tuple[str, CallUsage]:
        with counting_tokens() as used:
            text = self.advisor.invoke(given["request"], given["answer"], given["score"], config)
        return text, used.usage()

    async def _advice_async(
        self, given: dict[str, Any], config: RunnableConfig
    ) -> tuple[str, CallUsage]:
        with counting_tokens() as used:
            text = await self.advisor.ainvoke(
                given["request"], given["answer"], given["score"], config
            )
        return text, used.usage()

    def _advised(
        self, state: LoopState, outcome: _Outcome, advice: tuple[str, CallUsage]
    ) -> StopReason | None:
        """Put the advisor's text into the record; the stop reason with its calls counted."""
        text, usage = advice
        record = outcome.record
        record["feedback"] = text
        record["feedback_from"] = "advisor"
        record["advisor_input_tokens"] = usage.input_tokens
        record["advisor_output_tokens"] = usage.output_tokens
        previous_cost = record.get("cost")
        record["requests"] = record.get("requests", 0) + usage.requests
        if self.controls.prices is not None:
            extra = self.controls.prices.cost(usage)
            record["cost"] = (
                None if previous_cost is None or extra is None else previous_cost + extra
            )
        return self._stop_reason(state, record)

    # -- updates ------------------------------------------------------------------

    def _evaluation_updates(
        self, state: LoopState, outcome: _Outcome, reason: StopReason | None
    ) -> dict[str, Any]:
        record = outcome.record
        iteration = record["iteration"]
        text = record["feedback"]
        if self.output_mode == "last_message" and outcome.answer is not None:
            record["answer"] = outcome.answer  # the attempts leave ``messages`` when the loop ends
        records = [*state.get("records", []), record]
        updates: dict[str, Any] = {
            "stop": record["stop"],
            "feedback": [text],
            "records": [record],
            "stop_reason": reason,
            **outcome.extra,
        }
        if outcome.produced:
            updates["messages"] = list(outcome.produced)
            updates["last_response"] = outcome.answer
        self.report.evaluation_finished(record)
        if reason is None:
            # with its id: a delta channel replays the stored write, and a message given
            # without one would get it only as it is stored, after the router read it
            message = feedback_message(
                text, iteration=iteration, feedback_format=self.feedback_format
            )
            updates["messages"] = [*updates.get("messages", []), *with_fresh_ids([message], ())]
        else:
            updates |= selection_updates(records, self.select, state)
            final = updates.get("last_response", outcome.answer)
            if final is None and updates.get("selected_iteration") is not None:
                final = state.get("last_response")
            self.report.loop_finished(reason, records, updates["selected_iteration"], final)
        if reason is not None and self.output_mode == "last_message":
            updates = keep_final_answer(state, updates)
        return updates

    def _stop_reason(self, state: LoopState, record: IterationRecord) -> StopReason | None:
        remaining = state.get("remaining_steps")
        return self.policy.stop_reason(
            accepted=record["stop"],
            iteration=state.get("iteration", 0),
            records=[*state.get("records", []), record],
            started_at=state.get("started_at"),
            out_of_steps=remaining is not None and remaining <= STEPS_PER_ITERATION,
        )


def _advice_input(state: LoopState, outcome: _Outcome) -> dict[str, Any]:
    """What the advisor is given: the loop's request, the answer and its score."""
    return {
        "request": list(state.get("init_messages") or []),
        "answer": outcome.answer,
        "score": outcome.record["score"],
    }


def _agent_run(state: LoopState) -> AgentRun:
    return state.get("agent_run") or {"seconds": 0.0, "input_tokens": 0, "output_tokens": 0}


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


def _context(state: LoopState, *, with_answer: bool = True) -> LoopContext:
    """The evaluator's `LoopContext` (without an answer: the base of candidates' ones)."""
    feedback = list(state.get("feedback") or [])
    context: dict[str, Any] = {
        "iteration": state.get("iteration", 0),
        "init_messages": list(state.get("init_messages") or []),
        "feedback": feedback,
        "messages": list(state.get("messages") or []),
    }
    if with_answer:
        context["last_response"] = state["last_response"]
    return cast(LoopContext, context)
