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
from loop_agents.loop._usage import NO_USAGE
from loop_agents.loop.attempts import Attempt, AttemptRunner, JudgeRunner
from loop_agents.loop.control.candidates import (
    CandidatePool,
    ajudge_all,
    candidate_agents,
    judge_all,
)
from loop_agents.loop.control.checks import LoopControls
from loop_agents.loop.control.criteria import with_criteria
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, feedback_message
from loop_agents.loop.history._select import HistorySelector, Selected
from loop_agents.loop.history.policies import HistoryPolicy
from loop_agents.loop.iteration_records import combined_run
from loop_agents.loop.outcomes import Outcome, OutcomeBuilder, advice_input, loop_context
from loop_agents.loop.output import OutputMode, keep_final_answer
from loop_agents.loop.selection import Selection, selection_updates
from loop_agents.loop.state import (
    CandidateRun,
    IterationRecord,
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
        self.outcomes = OutcomeBuilder(controls, self.evaluator.name, self.report)
        self._call_advisor = self.report.traced(
            "advisor", self.outcomes.advice_sync, self.outcomes.advice_async
        )

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
            contexts = self.outcomes.candidate_contexts(state, runs)
            judged = judge_all(self.judge, contexts, judge_config) if contexts else []
            outcome = self.outcomes.candidates_outcome(state, runs, judged)
        elif "error" in (state.get("agent_run") or {}):
            outcome = self.outcomes.failure_outcome(state)
        else:
            judged_one = self.judge.invoke(loop_context(state), judge_config)
            outcome = self.outcomes.answer_outcome(state, judged_one)
        reason = self._stop_reason(state, outcome.record)
        if reason is None and self.outcomes.wants_advice(outcome):
            advice = self._call_advisor.invoke(
                advice_input(state, outcome), self.report.config(config, iteration, "advisor")
            )
            self.outcomes.advised(outcome, advice)
            reason = self._stop_reason(state, outcome.record)
        return self._evaluation_updates(state, outcome, reason)

    async def aevaluate(self, state: LoopState, config: RunnableConfig) -> dict[str, Any]:
        """Judge the latest answer (async) and decide whether the loop goes on."""
        iteration = state.get("iteration", 0)
        judge_config = self.report.config(config, iteration, "evaluator")
        runs = state.get("candidate_runs")
        if runs:
            contexts = self.outcomes.candidate_contexts(state, runs)
            judged = await ajudge_all(self.judge, contexts, judge_config) if contexts else []
            outcome = self.outcomes.candidates_outcome(state, runs, judged)
        elif "error" in (state.get("agent_run") or {}):
            outcome = self.outcomes.failure_outcome(state)
        else:
            judged_one = await self.judge.ainvoke(loop_context(state), judge_config)
            outcome = self.outcomes.answer_outcome(state, judged_one)
        reason = self._stop_reason(state, outcome.record)
        if reason is None and self.outcomes.wants_advice(outcome):
            advice = await self._call_advisor.ainvoke(
                advice_input(state, outcome), self.report.config(config, iteration, "advisor")
            )
            self.outcomes.advised(outcome, advice)
            reason = self._stop_reason(state, outcome.record)
        return self._evaluation_updates(state, outcome, reason)

    # -- outcomes -----------------------------------------------------------------

    def _evaluation_updates(
        self, state: LoopState, outcome: Outcome, reason: StopReason | None
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
            selection = selection_updates(records, self.select, state)
            if "messages" in selection:  # a copy of an earlier answer, after this one's
                selection["messages"] = [*updates.get("messages", []), *selection["messages"]]
            updates |= selection
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
