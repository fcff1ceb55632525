"""What a loop hands back when it ends: its output mode.

A loop's output is its *output schema*: the state keys a caller (or a parent graph that
has the loop as a node) receives. Three modes:

- ``"full_state"`` (the default): every public key of `LoopState` (``messages``,
  ``iteration``, ``feedback``, ``init_messages``, ``last_response``, ``stop``,
  ``stop_reason``, ``records``). What a standalone caller reads.
- ``"full_history"``: ``messages`` only, the whole transcript (every attempt, the tool
  traffic and the feedback). A parent graph appends the transcript to its conversation and
  none of its other keys is touched.
- ``"last_message"``: ``messages`` only, and when the loop ends its attempts and feedback
  are taken out of ``messages``: the conversation holds the request followed by the final
  answer. A parent graph gains exactly one message. The attempts stay in the loop's
  ``records`` (and on the stream while it runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeAlias, TypedDict, cast, get_args

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph.message import add_messages

from loop_agents.loop.records import answer_id_of
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
    """The compiled graph's ``output_schema`` for ``output_mode``.

    `LoopMessages` is typed as `LoopOutput`: a mapping with ``messages`` alone is a valid
    `LoopOutput`, whose other keys are not required.
    """
    if output_mode == "full_state":
        return LoopOutput
    return cast(type[LoopOutput], LoopMessages)


def keep_final_answer(state: LoopState, updates: dict[str, Any]) -> dict[str, Any]:
    """Turn the final evaluation's updates into ones that leave only the answer.

    Every message the ending loop produced (answers, tool calls and results, feedback),
    except the final answer, is removed from ``messages``; the messages the loop started
    from, and the conversation before them, are kept.

    Args:
        state: The loop's state when the final evaluation ran.
        updates: That evaluation's state updates (``last_response`` in them, if any,
            names the final answer; otherwise the state's does).

    Returns:
        ``updates`` with ``messages`` replaced by the removals.

    """
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
    removals: list[BaseMessage] = [
        RemoveMessage(id=message.id)
        for message in messages[_loop_start(state, updates, messages) :]
        if message.id is not None and message.id != answer_id and message.id not in already_removed
    ]
    return updates | {"messages": [*removals, *pending]}


def _loop_start(state: LoopState, updates: dict[str, Any], messages: Sequence[AnyMessage]) -> int:
    """The index of the first message the current loop produced.

    That is the message after the loop's request when the request is in the
    conversation under the same id; otherwise the loop's first answer, preceded by the
    tool calls and tool results that led to it. When neither is found, the end of the
    conversation (nothing is taken out).
    """
    ids = [m.id for m in messages]
    init_ids = {m.id for m in state.get("init_messages") or []} | set(
        state.get("loop_init_ids") or []
    )
    init_ids.discard(None)
    for index in range(len(ids) - 1, -1, -1):
        if ids[index] in init_ids:
            return index + 1
    records = [*state.get("records", []), *updates.get("records", [])]
    first_answer = answer_id_of(records[0]) if records else None
    if first_answer is None or first_answer not in ids:
        return len(messages)
    start = ids.index(first_answer)
    while start > 0 and _is_tool_traffic(messages[start - 1]):
        start -= 1
    return start


def _is_tool_traffic(message: AnyMessage) -> bool:
    return isinstance(message, ToolMessage) or (
        isinstance(message, AIMessage) and bool(message.tool_calls)
    )
