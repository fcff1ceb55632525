"""An iteration's record, built from its `Outcome`: the attempts, their verdicts, the calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage

from loop_agents.loop.agent_state import restored
from loop_agents.loop.evaluation import missing_feedback_error, undecided_error
from loop_agents.loop.protocol import NO_USAGE, Attempt, Outcome, Verdict
from loop_agents.loop.state import AgentRun, CandidateRecord, IterationRecord, LoopState
from loop_agents.runtime.usage import CallUsage, usage_of_metadata

EMPTY_RUN: AgentRun = {"seconds": 0.0, "input_tokens": 0, "output_tokens": 0}


def run_of(attempt: Attempt, history: CallUsage = NO_USAGE) -> AgentRun:
    """The `AgentRun` kept for ``attempt`` (with the history policy's calls, if any)."""
    tokens = message_tokens(attempt)
    run: AgentRun = {
        "seconds": attempt.seconds,
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "cached_input_tokens": tokens[2],
        "usage": attempt.usage.stored(),
    }
    if history.requests:
        run["history"] = history.stored()
    if attempt.error is not None:
        run["error"] = attempt.error
    return run


def message_tokens(attempt: Attempt) -> tuple[int, int, int]:
    """The tokens the attempt's AI messages report (input, output, cached input)."""
    total = (0, 0, 0)
    for message in attempt.produced or []:
        if isinstance(message, AIMessage) and message.usage_metadata:
            counts = usage_of_metadata(message.usage_metadata)
            total = (total[0] + counts[0], total[1] + counts[1], total[2] + counts[2])
    return total


def attempts_of(state: LoopState) -> tuple[list[Attempt], CallUsage]:
    """The attempts ``invoke_agent`` left for ``evaluate``, and the history calls' usage."""
    run = state.get("agent_run") or EMPTY_RUN
    history = CallUsage.of_stored(run.get("history") or {})
    candidates = state.get("candidate_runs")
    if candidates:
        before = state.get("agent_state") or {}
        attempts = [
            Attempt(
                c["produced"] or None,
                c["run"].get("error"),
                restored(before, c, whole="state", change="changes"),
                c["run"]["seconds"],
                CallUsage.of_stored(c["run"].get("usage") or {}),
                c["candidate"],
            )
            for c in candidates
        ]
        return attempts, history
    error, answer = run.get("error"), state.get("last_response")
    produced: list[AnyMessage] | None = None if error is not None or answer is None else [answer]
    usage = CallUsage.of_stored(run.get("usage") or {})
    after = dict(state.get("agent_state") or {})
    return [Attempt(produced, error, after, run["seconds"], usage)], history


def verdict_of(stored: Mapping[str, Any], name: str) -> Verdict:
    """The `Verdict` of a judged attempt (``stop`` is ``None`` when only a score is given)."""
    evaluation = stored["evaluation"]  # checked by the evaluator's caller
    feedback = evaluation.get("feedback")
    return Verdict(
        stop=evaluation.get("stop"),
        feedback=feedback if isinstance(feedback, str) else None,
        score=evaluation.get("score"),
        decided_by=list(evaluation.get("decided_by") or [name]),
        seconds=stored["seconds"],
        usage=CallUsage.of_stored(stored["usage"]),
    )


def check_decided(outcome: Outcome, where: str) -> None:
    """Raise `InvalidEvaluationError` when the controls left no decision or no feedback."""
    verdict = outcome.verdict
    if verdict is None:
        return
    if verdict.stop is None:
        raise undecided_error(where)
    if not verdict.stop and not (verdict.feedback or "").strip():
        raise missing_feedback_error(where)


def record_of(outcome: Outcome, run: AgentRun, evaluator: str) -> IterationRecord:
    """The `IterationRecord` of ``outcome``; ``run`` is the iteration's agent run."""
    history = outcome.usage.get("history", NO_USAGE)
    verdict = outcome.verdict
    answer = outcome.answer
    judges = [j.verdict for j in outcome.judged if j.verdict is not None]
    judge_usage = sum((judged.usage for judged in judges), NO_USAGE)
    record: IterationRecord = {
        "iteration": outcome.iteration,
        "answer_id": answer.id if answer is not None else None,
        "stop": bool(outcome.stop),
        "feedback": outcome.feedback_text if verdict is None else (verdict.feedback or ""),
        "score": outcome.score,
        "evaluator": evaluator,
        "decided_by": list(verdict.decided_by) if verdict is not None else [evaluator],
        "agent_seconds": run["seconds"],
        "evaluation_seconds": max((j.seconds for j in judges), default=0.0),
        "input_tokens": run["input_tokens"],
        "output_tokens": run["output_tokens"],
        "cached_input_tokens": run.get("cached_input_tokens", 0),
        "evaluator_input_tokens": judge_usage.input_tokens,
        "evaluator_output_tokens": judge_usage.output_tokens,
        "evaluator_cached_tokens": judge_usage.cached_tokens,
        "history_input_tokens": history.input_tokens,
        "history_output_tokens": history.output_tokens,
        "history_cached_tokens": history.cached_tokens,
        "requests": outcome.total_usage.requests,
        "cost": None,
    }
    advisor = outcome.usage.get("advisor")
    if advisor is not None:
        record["advisor_input_tokens"] = advisor.input_tokens
        record["advisor_output_tokens"] = advisor.output_tokens
        record["advisor_cached_tokens"] = advisor.cached_tokens
    if verdict is not None:
        if verdict.feedback_from != "evaluator":
            record["feedback_from"] = verdict.feedback_from
    else:
        record["feedback_from"] = "agent_error"
        record["error"] = outcome.error or "the agent call failed"
        if not outcome.counted:
            record["counted"] = False
    if len(outcome.judged) > 1:
        if outcome.selected is not None:
            record["candidate"] = outcome.judged[outcome.selected].attempt.candidate or 1
        record["candidates"] = candidate_records(outcome)
    for key, value in outcome.extra.items():
        record[key] = value  # type: ignore[literal-required]
    return record


def candidate_records(outcome: Outcome) -> list[CandidateRecord]:
    """One `CandidateRecord` per candidate; the non-selected ones keep their answer."""
    records: list[CandidateRecord] = []
    for index, judged in enumerate(outcome.judged):
        attempt, verdict = judged.attempt, judged.verdict
        answer = attempt.answer
        tokens = message_tokens(attempt)
        usage = attempt.usage + (verdict.usage if verdict is not None else NO_USAGE)
        entry: CandidateRecord = {
            "candidate": attempt.candidate or index + 1,
            "answer_id": answer.id if answer is not None else None,
            "selected": index == outcome.selected,
            "stop": bool(verdict.stop) if verdict is not None else False,
            "feedback": (verdict.feedback or "") if verdict is not None else "",
            "score": verdict.score if verdict is not None else None,
            "error": attempt.error,
            "agent_seconds": attempt.seconds,
            "evaluation_seconds": verdict.seconds if verdict is not None else 0.0,
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "evaluator_input_tokens": verdict.usage.input_tokens if verdict else 0,
            "evaluator_output_tokens": verdict.usage.output_tokens if verdict else 0,
            "requests": usage.requests,
        }
        if answer is not None and index != outcome.selected:
            entry["answer"] = answer
        records.append(entry)
    return records
