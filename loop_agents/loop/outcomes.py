"""An iteration's outcome: its record, built from the agent call(s) and the verdict(s).

`OutcomeBuilder` is the part of the ``evaluate`` node that turns what happened into an
`IterationRecord`: one judged answer, a failed call (``on_agent_error="feedback"``), or
k judged candidates (the best one selected); it also writes the feedback a verdict left
out (the default sentence, or the advisor's advice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig

from loop_agents.loop._agent import answer_of
from loop_agents.loop._reporting import LoopReporter
from loop_agents.loop._usage import NO_USAGE, CallUsage, counting_tokens
from loop_agents.loop.attempts import Judged
from loop_agents.loop.control.advice import Advisor, default_advice
from loop_agents.loop.control.agent_errors import failure_feedback
from loop_agents.loop.control.candidates import best_candidate, candidate_context
from loop_agents.loop.control.checks import LoopControls
from loop_agents.loop.iteration_records import base_record, candidate_records
from loop_agents.loop.state import (
    AgentRun,
    CandidateRun,
    IterationRecord,
    LoopContext,
    LoopEvaluation,
    LoopState,
)


@dataclass
class Outcome:
    """An iteration's outcome before its state updates: its record and what to append."""

    record: IterationRecord
    answer: AIMessage | None
    produced: list[AnyMessage] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class OutcomeBuilder:
    """Builds the outcomes of one loop's iterations (see the module docstring)."""

    def __init__(self, controls: LoopControls, evaluator: str, report: LoopReporter) -> None:
        self.controls = controls
        self.evaluator_name = evaluator
        self.report = report
        self.advisor = Advisor(controls.advisor, controls.threshold)

    def answer_outcome(self, state: LoopState, judged: Judged) -> Outcome:
        """The outcome of one judged answer (``last_response``)."""
        answer = state["last_response"]
        record = base_record(
            state.get("iteration", 0),
            agent_run(state),
            judged,
            answer,
            self.evaluator_name,
            self.controls.prices,
        )
        return self._with_written_feedback(Outcome(record, answer), judged.evaluation)

    def failure_outcome(self, state: LoopState, error: str | None = None) -> Outcome:
        """The outcome of a failed agent call: its error becomes the feedback."""
        run = agent_run(state)
        error = error or run.get("error") or "the agent call failed"
        record = base_record(
            state.get("iteration", 0), run, None, None, self.evaluator_name, self.controls.prices
        )
        record |= {
            "feedback": failure_feedback(error),
            "feedback_from": "agent_error",
            "error": error,
        }
        if not self.controls.count_failed_attempts:
            record["counted"] = False
        return Outcome(record, None)

    def candidate_contexts(self, state: LoopState, runs: list[CandidateRun]) -> list[LoopContext]:
        """Each answered candidate's `LoopContext`."""
        base = loop_context(state, with_answer=False)
        return [
            candidate_context(base, c["produced"], answer_of(c["produced"]), c["candidate"])
            for c in runs
            if c["produced"]
        ]

    def candidates_outcome(
        self, state: LoopState, runs: list[CandidateRun], judged: list[Judged]
    ) -> Outcome:
        """The outcome of k judged candidates: the best one's verdict, every one recorded."""
        answered = [c for c in runs if c["produced"]]
        by_number = {c["candidate"]: j for c, j in zip(answered, judged, strict=True)}
        if not answered:
            errors = "; ".join(f"candidate {c['candidate']}: {c['run'].get('error')}" for c in runs)
            outcome = self.failure_outcome(state, errors)
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
            agent_run(state),
            Judged(best.evaluation, max(j.seconds for j in judged), usage),
            answer,
            self.evaluator_name,
            self.controls.prices,
        )
        record["candidate"] = number
        record["candidates"] = candidate_records(runs, by_number, number)
        self.report.candidates_judged(record)
        outcome = Outcome(record, answer, chosen["produced"], {"candidate_runs": []})
        return self._with_written_feedback(outcome, best.evaluation)

    def _with_written_feedback(self, outcome: Outcome, evaluation: LoopEvaluation) -> Outcome:
        """Fill in the default sentence for a verdict that asks to go on without feedback."""
        record = outcome.record
        if not record["stop"] and not (evaluation.get("feedback") or "").strip():
            record["feedback"] = default_advice(record["score"], self.controls.threshold)
            record["feedback_from"] = "default"
        return outcome

    def wants_advice(self, outcome: Outcome) -> bool:
        """Whether the advisor should write this outcome's feedback."""
        return self.advisor.model is not None and outcome.record.get("feedback_from") == "default"

    def advice_sync(self, given: dict[str, Any], config: RunnableConfig) -> tuple[str, CallUsage]:
        """Ask the advisor (sync), counting its calls; `advice_input` gives ``given``."""
        with counting_tokens() as used:
            text = self.advisor.invoke(given["request"], given["answer"], given["score"], config)
        return text, used.usage()

    async def advice_async(
        self, given: dict[str, Any], config: RunnableConfig
    ) -> tuple[str, CallUsage]:
        """Ask the advisor (async), counting its calls."""
        with counting_tokens() as used:
            text = await self.advisor.ainvoke(
                given["request"], given["answer"], given["score"], config
            )
        return text, used.usage()

    def advised(self, outcome: Outcome, advice: tuple[str, CallUsage]) -> None:
        """Put the advisor's text, and its calls, into the outcome's record."""
        text, usage = advice
        record = outcome.record
        if text:  # an empty reply keeps the default sentence (and its "default" source)
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


def advice_input(state: LoopState, outcome: Outcome) -> dict[str, Any]:
    """What the advisor is given: the loop's request, the answer and its score."""
    return {
        "request": list(state.get("init_messages") or []),
        "answer": outcome.answer,
        "score": outcome.record["score"],
    }


def agent_run(state: LoopState) -> AgentRun:
    """The latest agent call's measurements (zeros when the state has none)."""
    return state.get("agent_run") or {"seconds": 0.0, "input_tokens": 0, "output_tokens": 0}


def loop_context(state: LoopState, *, with_answer: bool = True) -> LoopContext:
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
