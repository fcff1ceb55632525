"""A run's result as ``run --json`` prints it (and ``show --json`` prints it again)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from loop_agents.loop.records import choose
from loop_agents.loop.records import record_answer as answer_of

ROLES = {
    "agent": ("input_tokens", "output_tokens", "cached_input_tokens"),
    "evaluator": ("evaluator_input_tokens", "evaluator_output_tokens", "evaluator_cached_tokens"),
    "history": ("history_input_tokens", "history_output_tokens", "history_cached_tokens"),
    "advisor": ("advisor_input_tokens", "advisor_output_tokens", "advisor_cached_tokens"),
}
"""Each role's token keys in a record: input, output, cached input."""


def record_answer(record: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """The text of an iteration record's answer (``values``: the loop's state); "" if none.

    Example:
        ```python
        texts = [record_answer(r, state) for r in state["records"]]
        ```
    """
    try:
        return answer_of(record, values).text  # type: ignore[arg-type]
    except KeyError:
        return ""


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return value.text
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _reported(record: Mapping[str, Any], keys: Sequence[str]) -> bool:
    """Whether a role's server reported its tokens (a call always has some: 0 means none)."""
    return any(record.get(key) for key in keys[:2])


def record_json(record: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """One record as JSON: its fields, the answer as text, ``null`` for unreported tokens."""
    fields = {k: _plain(v) for k, v in record.items() if k not in ("answer", "answer_id")}
    for keys in ROLES.values():
        if not _reported(record, keys):
            fields |= {key: None for key in keys if key in fields}
    first = {"iteration": fields.pop("iteration", None), "answer": record_answer(record, values)}
    return first | fields


def token_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, int | None]:
    """Input, output and cached input tokens over every call of ``records``.

    ``None`` for a kind no server reported.

    Example:
        ```python
        token_totals(result["records"])  # {'input': 1200, 'output': 300, 'cached_input': 800}
        ```
    """
    totals: dict[str, int | None] = dict.fromkeys(("input", "output", "cached_input"))
    for record in records:
        for keys in ROLES.values():
            if _reported(record, keys):
                for name, key in zip(totals, keys, strict=True):
                    totals[name] = (totals[name] or 0) + int(record.get(key) or 0)
    return totals


def result_json(
    values: Mapping[str, Any],
    *,
    run_id: str | None,
    error: str | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """The result of a run: id, answer, stop reason, iterations, selection, tokens, records.

    A loop that did not finish (``failure`` is its stop reason, ``error`` why) answers
    with its best answer so far: the best-scored record's, else the latest.

    Example:
        ```python
        print(json.dumps(result_json(state, run_id="3f9a2c1b")))
        ```
    """
    records = list(values.get("records") or [])
    finished = values.get("stop_reason") is not None
    selected: int | None = values.get("selected_iteration")
    score: float | None = values.get("selected_score")
    last = values.get("last_response")
    answer: str | None = last.text if isinstance(last, BaseMessage) else None
    best = None if finished or not records else choose(records, "best")
    if best is not None:
        answer = record_answer(best, values)
        selected, score = best.get("iteration"), best.get("score")
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
