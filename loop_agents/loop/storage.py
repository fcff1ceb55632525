"""How a loop's state is stored in checkpoints: delta channels or full values.

A LangGraph checkpoint stores the full value of every channel that changed in its step.
For the loop's append-only keys (``messages``, ``feedback``, ``records``, the kept agent
states) that value is everything so far, and a graph agent's ``agent_state`` (a deep
agent's files) holds everything the agent wrote, so storing the whole value at every step
makes a thread's storage grow with the square of its iterations. With *delta* storage
these keys are LangGraph ``DeltaChannel`` channels: a checkpoint stores only the step's
writes (the new answer, the new feedback, the new record, the files the attempt changed:
see `loop_agents.loop.agent_state`) and a full snapshot now and then; reading a checkpoint
replays the writes since the last snapshot. Storage then grows linearly.

``create_loop_agent(..., storage=...)`` chooses:

- ``"auto"`` (the default): delta storage when the checkpointer reads delta channels
  itself (it implements ``get_delta_channel_history``: ``InMemorySaver``, ``SqliteSaver``
  3.1+, ``PostgresSaver`` 3.2+ and their async forms, LangGraph Server's saver), or when
  the loop has no checkpointer of its own (``None`` or ``True``: a parent graph's or
  LangGraph Server's is used); full values for any other checkpointer, e.g. one that
  keeps only the latest checkpoint (``ShallowPostgresSaver``) or predates delta channels.
- ``"delta"``: delta storage with any checkpointer (one without its own support is read
  through LangGraph's generic walk over the parent checkpoints, which needs a saver that
  keeps every checkpoint).
- ``"full"``: every checkpoint stores the full values, as LangGraph does by default.

`storage_of` tells which one a compiled loop uses. The state's keys, types and update
rules are the same either way; threads written with one storage load with the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
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
from langgraph.channels.base import BaseChannel
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.channels.last_value import LastValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.types import Checkpointer
from typing_extensions import TypedDict, get_type_hints

from loop_agents.loop.agent_state import AgentStateDeltaChannel, updated
from loop_agents.loop.state import IterationRecord, LoopState

Storage: TypeAlias = Literal["auto", "delta", "full"]
"""What ``storage=`` accepts (see the module docstring)."""

StorageLayout: TypeAlias = Literal["delta", "full"]
"""How a compiled loop stores its append-only keys: as deltas or as full values."""

STORAGE_OPTIONS: tuple[str, ...] = get_args(Storage)

MESSAGES_SNAPSHOT_EVERY = 1000
"""Updates of ``messages`` between two full snapshots of it (two updates per iteration).

A snapshot stores the whole conversation, so snapshots add storage that grows with the
square of the iterations, divided by this number; reading a checkpoint replays at most
this many writes (LangGraph also snapshots every 5,000 steps whatever this says)."""

LISTS_SNAPSHOT_EVERY = MESSAGES_SNAPSHOT_EVERY // 2
"""Updates of ``feedback`` and ``records`` (one per iteration) between two snapshots,
so that they are snapshotted about as often as ``messages``."""


# -- the reducers of the delta channels -----------------------------------------------


def append_messages(state: Sequence[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """``add_messages`` for a batch of writes, in one pass, with stable ids.

    The result is what merging the writes one after another with ``add_messages`` gives
    (append; replace a message with the same id; ``RemoveMessage`` removes one, or every
    message with ``REMOVE_ALL_MESSAGES``), but the conversation is indexed once for the
    whole batch rather than once per write, so replaying many stored writes costs time
    in proportion to the messages, not to the messages times the writes. A message
    given without an id (a string, a ``(role, text)`` pair, a dict) gets one derived from
    its place and content rather than a random one, so that replaying the stored writes
    gives it the same id every time.

    Raises:
        ValueError: a ``RemoveMessage`` names a message that is not in the conversation.

    Example:
        ```python
        messages = append_messages([], [[HumanMessage("hi", id="1")], ["hello"]])
        assert [m.text for m in messages] == ["hi", "hello"]
        assert append_messages([], [[HumanMessage("hi", id="1")], ["hello"]]) == messages
        ```

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
        cut = _after_remove_all(incoming)
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


_last_merge: tuple[Sequence[BaseMessage | None], dict[str, int]] | None = None
"""The conversation `append_messages` returned last and its index of ids to positions.

A delta channel passes the value it holds, which is what the reducer returned the step
before, to the next call; recognising that list (the same object, of the same length)
saves indexing the whole conversation again on every step of a running loop. A copy
(a channel copied for a router's read, a value read from a checkpoint) is indexed anew.
Neither the list nor the index is changed once stored here (a hit works on copies), so
loops running at once in other threads can only make it miss. Code that changes a
state's message list in place, which LangGraph does not support, is not noticed."""


def _folded(messages: Sequence[BaseMessage | None], writes: Sequence[Any]) -> list[AnyMessage]:
    """``writes`` merged into ``messages`` one by one with ``add_messages`` itself.

    For a conversation in which two messages have the same id, which only a write that
    removes every message (``REMOVE_ALL_MESSAGES``) and then adds the same id twice can
    leave: ``add_messages`` then removes or replaces all of them, which the one-pass
    index (one position per id) does not model.
    """
    result = cast(list[AnyMessage], [m for m in messages if m is not None])
    for write in writes:
        items = write if isinstance(write, list) else [write]
        incoming, _ = _coerced(items, len(result), {cast(str, m.id) for m in result})
        result = cast(list[AnyMessage], add_messages(cast(Any, result), cast(Any, incoming)))
    return result


def _after_remove_all(messages: Sequence[BaseMessage]) -> int | None:
    """The index after the last ``RemoveMessage(REMOVE_ALL_MESSAGES)``, if there is one."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            return position + 1
    return None


def _coerced(
    items: Sequence[Any], start: int, taken: Collection[str]
) -> tuple[list[BaseMessage], list[str]]:
    """``items`` as a new list of messages (not chunks), each with an id, and their ids.

    A message without an id gets a stable one (see `_stable_id`).
    """
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


_PLAIN_TYPES = frozenset(
    {AIMessage, HumanMessage, SystemMessage, ToolMessage, RemoveMessage, FunctionMessage}
)
"""Message classes that need no conversion (chunks and others go through LangChain's)."""

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
    """``operator.add`` of lists for a batch of writes: every write's items, in order.

    Example:
        ```python
        assert extend_list(["a"], [["b"], ["c", "d"]]) == ["a", "b", "c", "d"]
        ```

    """
    result = list(state)
    for write in writes:
        if not isinstance(write, list):
            raise TypeError(
                f"a list key of the loop's state is updated with a list of items to "
                f"append; got {type(write).__name__} {write!r:.60}"
            )
        result.extend(write)
    return result


MessagesDelta = Annotated[
    list[AnyMessage], DeltaChannel(append_messages, snapshot_frequency=MESSAGES_SNAPSHOT_EVERY)
]
FeedbackDelta = Annotated[
    list[str], DeltaChannel(extend_list, snapshot_frequency=LISTS_SNAPSHOT_EVERY)
]
RecordsDelta = Annotated[
    list[IterationRecord], DeltaChannel(extend_list, snapshot_frequency=LISTS_SNAPSHOT_EVERY)
]
AttemptStatesDelta = Annotated[
    list[dict[str, Any]], DeltaChannel(extend_list, snapshot_frequency=LISTS_SNAPSHOT_EVERY)
]
AgentStateDelta = Annotated[
    dict[str, Any],
    AgentStateDeltaChannel(updated, dict, snapshot_frequency=LISTS_SNAPSHOT_EVERY),
]
DELTA_KEYS: dict[str, Any] = {
    "messages": MessagesDelta,
    "feedback": FeedbackDelta,
    "records": RecordsDelta,
    "attempt_states": AttemptStatesDelta,
    "agent_state": AgentStateDelta,
}
"""The state keys stored as delta channels, with their annotations."""


# -- choosing the storage -------------------------------------------------------------


def check_storage(storage: object) -> Storage:
    """Return ``storage`` if it is ``"auto"``, ``"delta"`` or ``"full"``, else raise.

    Raises:
        ValueError: any other value.

    Example:
        ```python
        check_storage("delta")  # returns it
        check_storage("deltas")  # ValueError naming the choices
        ```

    """
    if storage in STORAGE_OPTIONS:
        return cast(Storage, storage)
    raise ValueError(
        f"storage must be one of {', '.join(map(repr, STORAGE_OPTIONS))}; got {storage!r}. "
        f"Use 'auto' (delta channels where the checkpointer supports them), 'delta' or "
        f"'full' (every checkpoint stores the whole conversation)"
    )


def supports_delta(checkpointer: Checkpointer) -> bool:
    """Whether ``checkpointer`` reads delta channels itself, so ``"auto"`` uses them.

    True for a saver whose class implements ``get_delta_channel_history`` (LangGraph's
    in-memory, SQLite and PostgreSQL savers do) and for ``None``/``True`` (the loop uses
    a parent graph's or LangGraph Server's checkpointer); false for ``False`` (no
    checkpoints) and for savers that inherit LangGraph's generic fallback.

    Example:
        ```python
        from langgraph.checkpoint.memory import InMemorySaver

        assert supports_delta(InMemorySaver())
        ```

    """
    if checkpointer is None or checkpointer is True:
        return True
    if not isinstance(checkpointer, BaseCheckpointSaver):
        return False
    own = type(checkpointer).get_delta_channel_history
    return own is not BaseCheckpointSaver.get_delta_channel_history


def resolve_storage(storage: Storage, checkpointer: Checkpointer) -> StorageLayout:
    """The layout ``storage`` means for a loop compiled with ``checkpointer``.

    Example:
        ```python
        assert resolve_storage("auto", InMemorySaver()) == "delta"
        assert resolve_storage("full", InMemorySaver()) == "full"
        ```

    """
    if storage == "auto":
        return "delta" if supports_delta(checkpointer) else "full"
    return storage


def with_storage(
    schema: type[Any], layout: StorageLayout, *, keys: Collection[str] | None = None
) -> type[Any]:
    """``schema`` (a state ``TypedDict``) with its append-only keys stored as ``layout``.

    For ``"full"`` the schema itself; for ``"delta"`` a ``TypedDict`` of the same name,
    keys and required keys whose ``messages``, ``feedback``, ``records``,
    ``attempt_states`` and ``agent_state`` are delta channels with the same update rules.
    With ``keys``, only those of its keys (a node's input schema: LangGraph then reads
    only their channels for the node).

    Example:
        ```python
        from loop_agents import LoopState

        graph = StateGraph(with_storage(LoopState, "delta"))
        reads = with_storage(LoopState, "delta", keys=["messages", "iteration"])
        ```

    """
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


_CHANNELS: dict[type[Any], dict[str, BaseChannel[Any, Any, Any]]] = {}


def _channels(schema: type[Any]) -> dict[str, BaseChannel[Any, Any, Any]]:
    """The channel of each key of ``schema`` (a state ``TypedDict``), as LangGraph reads it."""
    known = _CHANNELS.get(schema)
    if known is not None:
        return known
    channels: dict[str, BaseChannel[Any, Any, Any]] = {}
    for key, hint in get_type_hints(schema, include_extras=True).items():
        hint = unwrapped(hint)
        kind = get_args(hint)[-1] if hasattr(hint, "__metadata__") else None
        if isinstance(kind, BaseChannel):
            channels[key] = kind
        elif callable(kind):
            channels[key] = BinaryOperatorAggregate(object, kind)
        else:
            channels[key] = LastValue(object)
    _CHANNELS[schema] = channels
    return channels


def applied_updates(
    state: Mapping[str, Any], updates: Mapping[str, Any], schema: type[Any] = LoopState
) -> dict[str, Any]:
    """``state`` after ``updates``, by the reducers of ``schema``'s channels (LangGraph's).

    What a node's updates make of the state, for code that runs the loop's next step in
    the same hook (`LoopMiddleware` opens the next iteration where the last one ends).

    Example:
        ```python
        after = applied_updates({"feedback": ["a"]}, {"feedback": ["b"], "stop": False})
        assert after["feedback"] == ["a", "b"]
        ```

    """
    after = dict(state)
    for key, value in updates.items():
        template = _channels(schema).get(key)
        if template is None:
            after[key] = value
            continue
        current = after.get(key)
        channel = template.from_checkpoint(current) if current is not None else template.copy()
        channel.update([value])
        after[key] = channel.get() if channel.is_available() else None
    return after


def storage_of(loop: Any) -> StorageLayout:
    """How a compiled loop stores its append-only keys: ``"delta"`` or ``"full"``.

    Example:
        ```python
        loop = create_loop_agent(agent, evaluate, 3, checkpointer=InMemorySaver())
        print(storage_of(loop))  # delta
        ```

    """
    channel = loop.channels.get("messages")
    return "delta" if isinstance(channel, DeltaChannel) else "full"
