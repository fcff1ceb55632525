"""What a loop hands back when it ends: its output mode (``docs/composition.md``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, TypedDict, cast, get_args

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage
from langgraph.graph.message import add_messages

from loop_agents.loop.history.policies import request_span
from loop_agents.loop.state import LoopOutput, LoopState

OutputMode: TypeAlias = Literal["full_state", "full_history", "last_message"]
"""What a loop returns: all its keys, its transcript, or its final answer."""

OUTPUT_MODES: tuple[str, ...] = get_args(OutputMode)


class LoopMessages(TypedDict):
    """A loop's output in the ``full_history`` and ``last_message`` modes."""

    messages: Annotated[list[AnyMessage], add_messages]


def check_output_mode(output_mode: object) -> OutputMode:
    """Return ``output_mode`` if it is one of `OUTPUT_MODES`, else raise ``ValueError``."""
    if output_mode not in OUTPUT_MODES:
        raise ValueError(
            f"output_mode must be one of {', '.join(repr(m) for m in OUTPUT_MODES)}; got "
            f"{output_mode!r}. Use 'full_state' (every loop key) for a standalone loop, "
            f"'full_history' or 'last_message' (messages only) for a loop in a parent graph "
            f"that should receive only messages"
        )
    return cast(OutputMode, output_mode)


def output_schema(output_mode: OutputMode) -> type[LoopOutput]:
    """The compiled graph's ``output_schema`` (`LoopMessages` typed as a `LoopOutput`)."""
    if output_mode == "full_state":
        return LoopOutput
    return cast(type[LoopOutput], LoopMessages)


def keep_final_answer(state: LoopState, updates: dict[str, Any]) -> dict[str, Any]:
    """The final ``updates``, removing what the loop produced but its answer (``last_response``)."""
    messages = list(state.get("messages") or [])
    answer = updates.get("last_response") or state.get("last_response")
    answer_id = answer.id if answer is not None else None
    pending: list[BaseMessage] = []
    already_removed: set[str | None] = set()
    for message in updates.get("messages", []):
        if isinstance(message, RemoveMessage):
            already_removed.add(message.id)
            pending.append(message)
        elif message.id == answer_id:
            pending.append(message)
    init = state.get("init_messages") or []
    records = [*state.get("records", []), *updates.get("records", [])]
    start = request_span(messages, init, state.get("loop_init_ids") or [], records)[1]
    removals: list[BaseMessage] = [
        RemoveMessage(id=message.id)
        for message in messages[start:]
        if message.id is not None and message.id != answer_id and message.id not in already_removed
    ]
    return updates | {"messages": [*removals, *pending]}
