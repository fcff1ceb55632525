"""Finding the answer an `IterationRecord` refers to.

A record names its iteration's answer by id (``answer_id``) rather than holding a copy of
it: the answer is already in the loop's ``messages``, and a copy in every record would
store each answer twice. `record_answer` finds it there. (With
``output_mode="last_message"`` the loop takes its attempts out of ``messages`` when it
ends, so there each record also keeps its answer under ``answer``; records written by
loop_agents before ``answer_id`` existed have only ``answer``. `record_answer` handles
both.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from loop_agents.loop.state import IterationRecord

SELECTED_KEY = "loop_agents_selected"
"""The ``additional_kwargs`` key that marks the appended copy of a selected answer."""


def answer_id_of(record: Mapping[str, Any]) -> str | None:
    """The id of the answer ``record`` refers to (``None`` when it names none).

    Example:
        ```python
        ids = [answer_id_of(r) for r in result["records"]]
        ```

    """
    answer_id = record.get("answer_id")
    if isinstance(answer_id, str):
        return answer_id
    answer = record.get("answer")
    return answer.id if isinstance(answer, BaseMessage) else None


def record_answer(
    record: IterationRecord, state: Mapping[str, Any] | Sequence[BaseMessage]
) -> AIMessage:
    """The answer of ``record``'s iteration, found in a loop's state or output.

    Args:
        record: One of the loop's ``records``.
        state: The loop's output or state (a mapping with ``messages``, e.g. what
            ``invoke`` returned or ``get_state(config).values``), or its messages.

    Returns:
        The agent's answer in that iteration.

    Raises:
        KeyError: the answer is not in ``state``'s messages (e.g. the record comes from
            another thread, or ``update_state`` removed the message), or the iteration
            has none (its agent call failed: ``record["error"]``).

    Example:
        ```python
        result = loop.invoke({"messages": [HumanMessage("Write a haiku.")]})
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
        final = result["messages"][-1]
        if selected_iteration_of(final) is not None:
            print("the loop's answer is the attempt of iteration", selected_iteration_of(final))
        ```

    """
    mark = message.additional_kwargs.get(SELECTED_KEY)
    if isinstance(mark, dict) and isinstance(mark.get("iteration"), int):
        return int(mark["iteration"])
    return None
