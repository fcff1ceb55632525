"""Finding the answer an `IterationRecord` refers to, and choosing the loop's answer.

A record names its answer by id (``answer_id``): the answer is in the loop's
``messages``. Where those may lose attempts (``output_mode="last_message"``,
`LoopMiddleware`) and in records of old threads it also keeps it (``answer``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage

from loop_agents.loop.protocol import LoopControl, Outcome, Stage
from loop_agents.loop.state import IterationRecord

SELECTED_KEY = "loop_agents_selected"
"""The ``additional_kwargs`` key that marks the appended copy of a selected answer."""


def answer_id_of(record: Mapping[str, Any]) -> str | None:
    """The id of the answer ``record`` refers to (``None`` when it names none)."""
    answer_id = record.get("answer_id")
    if isinstance(answer_id, str):
        return answer_id
    answer = record.get("answer")
    return answer.id if isinstance(answer, BaseMessage) else None


def record_answer(
    record: IterationRecord, state: Mapping[str, Any] | Sequence[BaseMessage]
) -> AIMessage:
    """The answer of ``record``'s iteration, found in a loop's output or state.

    Args:
        record: One of the loop's ``records``.
        state: The loop's output or state (with ``messages``), or its messages.

    Raises:
        KeyError: the answer is not in ``state``'s messages, or the iteration has none
            (its agent call failed: ``record["error"]``).

    Example:
        ```python
        for record in result["records"]:
            print(record["iteration"], record["score"], record_answer(record, result).text)
        ```
    """
    kept = record.get("answer")
    if isinstance(kept, AIMessage):
        return kept
    answer_id = answer_id_of(record)
    if answer_id is None and record.get("error"):
        raise KeyError(
            f"iteration {record.get('iteration')} has no answer: its agent call failed "
            f"({record.get('error')!s:.200}); check record.get('error') before asking for "
            f"the answer"
        )
    messages = (state.get("messages") or []) if isinstance(state, Mapping) else state
    for message in reversed(messages):
        if message.id == answer_id and isinstance(message, AIMessage):
            return message
    raise KeyError(
        f"the answer of iteration {record.get('iteration')} (message id {answer_id!r}) is "
        f"not in the {len(messages)} messages given; pass the output or state of the loop "
        f"run the record comes from (its 'messages' hold every answer)"
    )


def selected_iteration_of(message: BaseMessage) -> int | None:
    """The iteration a message is the selected copy of, or ``None`` for other messages.

    Example:
        ```python
        print(selected_iteration_of(result["messages"][-1]))  # 2: the best attempt's copy
        ```
    """
    mark = message.additional_kwargs.get(SELECTED_KEY)
    if isinstance(mark, dict) and isinstance(mark.get("iteration"), int):
        return int(mark["iteration"])
    return None


Selection = Literal["last", "best"]
"""How the loop's answer is chosen: the ``last`` attempt or the ``best``-scoring one."""


def check_select(select: object) -> Selection:
    """Return ``select`` if it is ``"last"`` or ``"best"``, else raise ``ValueError``."""
    if select == "last" or select == "best":
        return select
    raise ValueError(
        f"select must be 'last' (the loop's answer is its last attempt) or 'best' (the "
        f"best-scoring attempt; needs an evaluator that gives scores); got {select!r}"
    )


def choose(records: Sequence[IterationRecord], select: Selection) -> IterationRecord | None:
    """The record of the loop's answer: the last answered, or the best-scoring, attempt.

    A tie goes to the later attempt; ``None`` when every attempt failed.

    Raises:
        ValueError: ``records`` is empty.

    Example:
        ```python
        print(choose(result["records"], "best")["iteration"])
        ```
    """
    if not records:
        raise ValueError("choose() needs at least one iteration record; got none")
    answered = [r for r in records if "error" not in r]
    if select == "best":
        scored = [r for r in answered if r["score"] is not None]
        if scored:
            # max() keeps the first maximum; reversed() makes ties go to the later one
            best: IterationRecord = max(reversed(scored), key=lambda r: r["score"] or 0.0)
            return best
    return answered[-1] if answered else None


def answer_copy(record: IterationRecord, state: Mapping[str, Any]) -> BaseMessage:
    """A marked copy of ``record``'s answer, with a fresh id, to end the conversation with.

    It carries no usage (counted already) and no tool calls (their results stay after
    the original); an answer given only as tool calls is copied as their JSON arguments.
    """
    answer = record_answer(record, state)
    extra = {k: v for k, v in answer.additional_kwargs.items() if k not in _CALL_KEYS}
    update: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "additional_kwargs": {**extra, SELECTED_KEY: {"iteration": record["iteration"]}},
        "usage_metadata": None,
    }
    if isinstance(answer, AIMessage) and (answer.tool_calls or answer.invalid_tool_calls):
        update |= {"tool_calls": [], "invalid_tool_calls": [], "tool_call_chunks": []}
        if not answer.text.strip():
            arguments = [call["args"] for call in answer.tool_calls]
            shown = arguments[0] if len(arguments) == 1 else arguments
            update["content"] = json.dumps(shown, ensure_ascii=False, default=str)
    return answer.model_copy(update=update)


_CALL_KEYS = frozenset({"tool_calls", "function_call"})  # provider fields of tool calls


class KeptAnswers(LoopControl):
    """Every record keeps its answer (``record["answer"]``), where ``messages`` may lose it.

    Hosts add it: `LoopMiddleware`, ``output_mode="last_message"``.
    """

    name = "kept_answers"
    stage = Stage.CHOICE
    claims = frozenset({"kept_answers"})

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Keep the iteration's answer in its record."""
        answer = outcome.answer
        if answer is not None:
            outcome.extra["answer"] = answer
        return outcome
