"""A run's result as ``run --json`` prints it (and ``show --json`` prints it again).

Every read of an iteration record's answer goes through `record_answer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from loop_agents.loop.records import choose


def record_answer(record: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """The text of an iteration record's answer (``values`` is the loop's state).

    Example:
        ```python
        texts = [record_answer(r, state) for r in state["records"]]
        ```
    """
    answer = record.get("answer")
    if isinstance(answer, BaseMessage):
        return answer.text
    answer_id = record.get("answer_id")  # records that refer to a message in `messages`
    for message in values.get("messages") or []:
        if isinstance(message, BaseMessage) and message.id == answer_id:
            return message.text
    return ""


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return value.text
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def record_json(record: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """One record as JSON: its fields, with the answer as text."""
    fields = {k: _plain(v) for k, v in record.items() if k not in ("answer", "answer_id")}
    return {"iteration": fields.pop("iteration", None), "answer": record_answer(record, values)} | (
        fields
    )


TOKEN_KEYS = {
    "input": (
        "input_tokens",
        "evaluator_input_tokens",
        "history_input_tokens",
        "advisor_input_tokens",
    ),
    "output": (
        "output_tokens",
        "evaluator_output_tokens",
        "history_output_tokens",
        "advisor_output_tokens",
    ),
    "cached_input": (
        "cached_input_tokens",
        "evaluator_cached_tokens",
        "history_cached_tokens",
        "advisor_cached_tokens",
    ),
}
"""The run's token totals: the record keys each sums (every role's calls)."""


def token_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Input, output and cached input tokens over every call of ``records``.

    Example:
        ```python
        token_totals(result["records"])  # {'input': 1200, 'output': 300, 'cached_input': 800}
        ```
    """
    return {
        name: sum(int(r.get(key) or 0) for r in records for key in keys)
        for name, keys in TOKEN_KEYS.items()
    }


def result_json(
    values: Mapping[str, Any],
    *,
    run_id: str | None,
    error: str | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """The result of a run: id, answer, stop reason, iterations, selection, records.

    For a finished loop the answer is the loop's answer. For one that failed or was
    interrupted it is the best answer so far (the best-scored record's, else the latest
    one), and ``error`` says what went wrong.

    Args:
        values: The loop's state (saved or returned).
        run_id: The saved run's id, or ``None``.
        error: What went wrong, on one line; added as ``"error"``.
        failure: The stop reason when the loop did not finish (e.g. ``judge_invalid``).

    Example:
        ```python
        print(json.dumps(result_json(state, run_id="3f9a2c1b")))
        ```
    """
    records = list(values.get("records") or [])
    finished = values.get("stop_reason") is not None
    selected: int | None = values.get("selected_iteration")
    score: float | None = values.get("selected_score")
    answer: str | None
    if finished:
        last = values.get("last_response")
        answer = last.text if isinstance(last, BaseMessage) else None
    else:
        best = choose(records, "best") if records else None
        if best is not None:
            answer = record_answer(best, values)
            selected, score = best.get("iteration"), best.get("score")
        else:  # an answer that was never judged is still the run's work
            last = values.get("last_response")
            answer = last.text if isinstance(last, BaseMessage) else None
    result: dict[str, Any] = {
        "run_id": run_id,
        "answer": answer,
        "stop_reason": values.get("stop_reason") if finished else failure,
        "iterations": values.get("iteration", 0),
        "selected_iteration": selected,
        "selected_score": score,
        "tokens": token_totals(records),
        "records": [record_json(r, values) for r in records],
    }
    if error is not None:
        result["error"] = error
    return result
