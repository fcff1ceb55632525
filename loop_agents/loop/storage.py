"""How a loop's state is stored in checkpoints: delta channels or full values.

With delta storage the append-only keys are LangGraph ``DeltaChannel`` channels, so a
thread's storage grows linearly with its iterations, not with their square; threads
written with one layout load with the other (``docs/storage.md``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from operator import attrgetter
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    TypeAlias,
    cast,
    get_args,
)

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.types import Checkpointer
from typing_extensions import TypedDict, get_type_hints

from loop_agents.loop.agent_state import AgentStateDeltaChannel, updated
from loop_agents.loop.state import IterationRecord

Storage: TypeAlias = Literal["auto", "delta", "full"]
"""What ``storage=`` accepts (see the module docstring)."""

StorageLayout: TypeAlias = Literal["delta", "full"]
"""How a compiled loop stores its append-only keys: as deltas or as full values."""

STORAGE_OPTIONS: tuple[str, ...] = get_args(Storage)

# A snapshot stores the whole conversation (storage that grows with the square of the
# iterations, divided by this number); a read replays at most this many writes
MESSAGES_SNAPSHOT_EVERY = 1000  # two updates of messages per iteration
LISTS_SNAPSHOT_EVERY = MESSAGES_SNAPSHOT_EVERY // 2  # feedback and records: one each


def append_messages(state: Sequence[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """``add_messages`` for a batch of writes (the same result), in one pass, with stable ids.

    The conversation is indexed once per batch; a message without an id gets one derived
    from its place and content, the same at every replay. `ValueError`: a ``RemoveMessage``
    names a message that is not in the conversation.
    """
    global _last_merge
    last = _last_merge  # one read: another thread may replace it meanwhile
    result: list[Any]  # messages, and None where one is removed until the end
    if last is not None and last[0] is state and len(last[1]) == len(state):
        # the channel's value is what the previous call returned: its index still holds
        result = list(state)
        index = dict(last[1])
    else:  # only C-level passes over the (long) conversation
        messages, ids = _coerced(state, 0, ())
        result = cast(list[Any], messages)
        index = dict(zip(ids, range(len(ids)), strict=True))
    if len(index) != len(result):
        return _folded(result, writes)
    holes = False  # removed messages are left as None until the end
    for number, write in enumerate(writes):
        incoming, incoming_ids = _coerced(
            write if isinstance(write, list) else [write], len(result), index
        )
        cut = max(  # after the last RemoveMessage(REMOVE_ALL_MESSAGES), if there is one
            (i + 1 for i, m in enumerate(incoming) if _removes_all(m)), default=None
        )
        if cut is not None:
            result = list(incoming[cut:])
            index = dict(zip(map(_ID, result), range(len(result)), strict=True))
            holes = False
            if len(index) != len(result):
                return _folded(result, writes[number + 1 :])
            continue
        removing: set[str] = set()
        for message, mid in zip(incoming, incoming_ids, strict=True):
            position = index.get(mid)
            if position is None:
                if isinstance(message, RemoveMessage):
                    raise ValueError(
                        f"Attempting to delete a message with an ID that doesn't exist ('{mid}')"
                    )
                index[mid] = len(result)
                result.append(message)
            elif isinstance(message, RemoveMessage):
                removing.add(mid)
            else:
                removing.discard(mid)
                result[position] = message
        for mid in removing:
            result[index.pop(mid)] = None
            holes = True
    if holes:
        result = [m for m in result if m is not None]
    else:
        _last_merge = (result, index)
    return result


# The conversation `append_messages` returned last and its index of ids to positions: a
# delta channel passes that list back on its next step, so it need not be indexed again.
# Neither is changed once stored (a hit works on copies), so other threads can only miss.
_last_merge: tuple[Sequence[BaseMessage | None], dict[str, int]] | None = None


def _folded(messages: Sequence[BaseMessage | None], writes: Sequence[Any]) -> list[AnyMessage]:
    # for two messages with one id (a REMOVE_ALL_MESSAGES write that adds an id twice), which
    # add_messages removes or replaces together and the one-pass index does not model
    result = cast(list[AnyMessage], [m for m in messages if m is not None])
    for write in writes:
        items = write if isinstance(write, list) else [write]
        incoming, _ = _coerced(items, len(result), {cast(str, m.id) for m in result})
        result = cast(list[AnyMessage], add_messages(cast(Any, result), cast(Any, incoming)))
    return result


def _removes_all(message: BaseMessage) -> bool:
    return isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES


def _coerced(
    items: Sequence[Any], start: int, taken: Collection[str]
) -> tuple[list[BaseMessage], list[str]]:
    """``items`` as a new list of messages (not chunks), each with an id, and their ids."""
    if set(map(type, items)) <= _PLAIN_TYPES:
        messages: list[BaseMessage] = list(items)
    else:
        messages = [message_chunk_to_message(m) for m in convert_to_messages(items)]
    ids = list(map(_ID, messages))
    if None not in ids and "" not in ids:
        return messages, ids
    used = set(taken) | {m.id for m in messages if m.id}
    stamped: list[BaseMessage] = []
    for offset, message in enumerate(messages):
        if not message.id:
            message = message.model_copy(update={"id": _stable_id(start + offset, message, used)})
            used.add(cast(str, message.id))
        stamped.append(message)
    return stamped, [cast(str, m.id) for m in stamped]


_PLAIN_TYPES = frozenset(  # no conversion needed (chunks and others go through LangChain's)
    {AIMessage, HumanMessage, SystemMessage, ToolMessage, RemoveMessage, FunctionMessage}
)
_ID = attrgetter("id")


def _stable_id(position: int, message: BaseMessage, taken: Collection[str | None]) -> str:
    salt = 0
    while True:
        key = f"loop_agents:{position}:{salt}:{message.type}:{message.content!r}"
        candidate = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        if candidate not in taken:
            return candidate
        salt += 1


def extend_list(state: Sequence[Any], writes: Sequence[Any]) -> list[Any]:
    """``operator.add`` of lists for a batch of writes: every write's items, in order."""
    result = list(state)
    for write in writes:
        if not isinstance(write, list):
            raise TypeError(
                f"a list key of the loop's state is updated with a list of items to "
                f"append; got {type(write).__name__} {write!r:.60}"
            )
        result.extend(write)
    return result


_LISTS: DeltaChannel[Any] = DeltaChannel(extend_list, snapshot_frequency=LISTS_SNAPSHOT_EVERY)
DELTA_KEYS: dict[str, Any] = {
    "messages": Annotated[
        list[AnyMessage],
        DeltaChannel(append_messages, snapshot_frequency=MESSAGES_SNAPSHOT_EVERY),
    ],
    "feedback": Annotated[list[str], _LISTS],
    "records": Annotated[list[IterationRecord], _LISTS],
    "attempt_states": Annotated[list[dict[str, Any]], _LISTS],
    "agent_state": Annotated[
        dict[str, Any],
        AgentStateDeltaChannel(updated, dict, snapshot_frequency=LISTS_SNAPSHOT_EVERY),
    ],
}
"""The state keys stored as delta channels, with their annotations."""


def check_storage(storage: object) -> Storage:
    """``storage`` if it is ``"auto"``, ``"delta"`` or ``"full"``, else `ValueError`."""
    if storage in STORAGE_OPTIONS:
        return cast(Storage, storage)
    raise ValueError(
        f"storage must be one of {', '.join(map(repr, STORAGE_OPTIONS))}; got {storage!r}. "
        f"Use 'auto' (delta channels where the checkpointer supports them), 'delta' or "
        f"'full' (every checkpoint stores the whole conversation)"
    )


def supports_delta(checkpointer: Checkpointer) -> bool:
    """Whether ``"auto"`` uses delta channels with ``checkpointer``.

    Yes with a parent's or LangGraph Server's (``None``/``True``), or a saver of its own
    ``get_delta_channel_history``.
    """
    if checkpointer is None or checkpointer is True:
        return True
    if not isinstance(checkpointer, BaseCheckpointSaver):
        return False
    own = type(checkpointer).get_delta_channel_history
    return own is not BaseCheckpointSaver.get_delta_channel_history


def resolve_storage(storage: Storage, checkpointer: Checkpointer) -> StorageLayout:
    """The layout ``storage`` means for a loop compiled with ``checkpointer``."""
    if storage == "auto":
        return "delta" if supports_delta(checkpointer) else "full"
    return storage


def with_storage(
    schema: type[Any], layout: StorageLayout, *, keys: Collection[str] | None = None
) -> type[Any]:
    """``schema`` (a state ``TypedDict``; with ``keys``, only those) stored as ``layout``."""
    hints = get_type_hints(schema, include_extras=True)
    if keys is None and (layout == "full" or not DELTA_KEYS.keys() & hints.keys()):
        return schema
    required = cast(frozenset[str], schema.__required_keys__)
    fields: dict[str, Any] = {}
    for key, hint in hints.items():
        if keys is not None and key not in keys:
            continue
        value = DELTA_KEYS.get(key, unwrapped(hint)) if layout == "delta" else unwrapped(hint)
        fields[key] = Required[value] if key in required else NotRequired[value]
    typed_dict = cast(Any, TypedDict)
    delta: type[Any] = typed_dict(schema.__name__, fields, total=False)
    delta.__doc__ = schema.__doc__
    delta.__module__ = schema.__module__
    return delta


def unwrapped(hint: Any) -> Any:
    """``hint`` without a ``Required``/``NotRequired`` wrapper."""
    origin = getattr(hint, "__origin__", None)
    if origin in (Required, NotRequired):
        return get_args(hint)[0]
    return hint


def storage_of(loop: Any) -> StorageLayout:
    """How a compiled loop stores its append-only keys: ``"delta"`` or ``"full"``.

    Example:
        ```python
        print(storage_of(create_loop_agent(agent, evaluate, 3, checkpointer=InMemorySaver())))
        ```
    """
    channel = loop.channels.get("messages")
    return "delta" if isinstance(channel, DeltaChannel) else "full"
