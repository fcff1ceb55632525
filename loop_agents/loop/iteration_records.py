"""Building an iteration's `IterationRecord` from its agent call(s) and evaluation(s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage

from loop_agents.loop._agent import answer_of
from loop_agents.loop._usage import CallUsage
from loop_agents.loop.attempts import Judged, run_usage
from loop_agents.loop.control.budgets import PriceTable
from loop_agents.loop.state import AgentRun, CandidateRecord, CandidateRun, IterationRecord


def base_record(
    iteration: int,
    run: AgentRun,
    judged: Judged | None,
    answer: AIMessage | None,
    evaluator: str,
    prices: PriceTable | None,
) -> IterationRecord:
    """The record of an iteration with one answer (or one failed call).

    ``feedback`` is the evaluator's (``""`` when it gave none, or for a failure);
    the caller fills in what the loop writes.
    """
    evaluation: dict[str, Any] | None = dict(judged.evaluation) if judged is not None else None
    judge_usage = judged.usage if judged is not None else CallUsage()
    record: IterationRecord = {
        "iteration": iteration,
        "answer_id": cast(str, answer.id) if answer is not None else None,
        "stop": evaluation["stop"] if evaluation is not None else False,
        "feedback": (evaluation or {}).get("feedback", ""),
        "score": (evaluation or {}).get("score"),
        "evaluator": evaluator,
        "decided_by": (evaluation or {}).get("decided_by") or [evaluator],
        "agent_seconds": run["seconds"],
        "evaluation_seconds": judged.seconds if judged is not None else 0.0,
        "input_tokens": run["input_tokens"],
        "output_tokens": run["output_tokens"],
        "evaluator_input_tokens": judge_usage.input_tokens,
        "evaluator_output_tokens": judge_usage.output_tokens,
        "history_input_tokens": run.get("history_input_tokens", 0),
        "history_output_tokens": run.get("history_output_tokens", 0),
    }
    return with_usage(record, run_usage(run) + judge_usage, prices)


def with_usage(
    record: IterationRecord, usage: CallUsage, prices: PriceTable | None
) -> IterationRecord:
    """``record`` with its ``requests`` and ``cost`` (for the model calls in ``usage``)."""
    record["requests"] = usage.requests
    record["cost"] = prices.cost(usage) if prices is not None else None
    return record


def candidate_records(
    runs: Sequence[CandidateRun], judged: dict[int, Judged], selected: int | None
) -> list[CandidateRecord]:
    """One `CandidateRecord` per candidate; the non-selected ones keep their answer."""
    records: list[CandidateRecord] = []
    for candidate in runs:
        number, run = candidate["candidate"], candidate["run"]
        verdict = judged.get(number)
        evaluation: dict[str, Any] = dict(verdict.evaluation) if verdict is not None else {}
        answer = answer_of(candidate["produced"]) if candidate["produced"] else None
        entry: CandidateRecord = {
            "candidate": number,
            "answer_id": cast(str, answer.id) if answer is not None else None,
            "selected": number == selected,
            "stop": bool(evaluation.get("stop", False)),
            "feedback": evaluation.get("feedback", ""),
            "score": evaluation.get("score"),
            "error": run.get("error"),
            "agent_seconds": run["seconds"],
            "evaluation_seconds": verdict.seconds if verdict is not None else 0.0,
            "input_tokens": run["input_tokens"],
            "output_tokens": run["output_tokens"],
            "evaluator_input_tokens": verdict.usage.input_tokens if verdict else 0,
            "evaluator_output_tokens": verdict.usage.output_tokens if verdict else 0,
            "requests": run.get("requests", 0) + (verdict.usage.requests if verdict else 0),
        }
        if answer is not None and number != selected:
            entry["answer"] = answer
        records.append(entry)
    return records


def combined_run(runs: Sequence[CandidateRun], seconds: float, history: CallUsage) -> AgentRun:
    """One `AgentRun` for k candidates: their tokens and calls summed, the wall time.

    The history policy's calls (``history``), made once for all k, are added once.
    """
    usage = history
    for candidate in runs:
        usage = usage + run_usage(candidate["run"])
    combined: AgentRun = {
        "seconds": seconds,
        "input_tokens": sum(c["run"]["input_tokens"] for c in runs),
        "output_tokens": sum(c["run"]["output_tokens"] for c in runs),
        "requests": usage.requests,
        "models": {name: [pair[0], pair[1]] for name, pair in usage.models.items()},
    }
    if usage.unmetered:
        combined["unmetered"] = dict(usage.unmetered)
    if history.input_tokens or history.output_tokens:
        combined["history_input_tokens"] = history.input_tokens
        combined["history_output_tokens"] = history.output_tokens
    return combined
