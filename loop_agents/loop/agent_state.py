"""A graph agent's state beyond messages: kept by the loop, given back, shown, selected.

The loop keeps a graph agent's output keys other than ``messages`` in one key
(``agent_state``), gives back those it takes as input (`input_keys`), and stores what
each attempt changed (`changes`, applied by `updated`). Pydantic values are stored as
plain data (`frozen`) and rebuilt on reading (`thawed`). See ``docs/concepts.md`` and
``docs/storage.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Self

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.pregel import Pregel
from pydantic import BaseModel
from typing_extensions import get_type_hints

AGENT_STATE = "agent_state"  # the latest (once the loop ends, the selected) agent state
CHANGES_MARK = "__loop_agents_changes__"  # marks a write of AGENT_STATE as a change set
_MODEL_MARK = "__loop_agents_model__"
_ABSENT = object()

NOT_CARRIED = frozenset({"messages", "init_messages"})
"""Input keys never given back (the conversation is sent anyway)."""


def input_keys(agent: object) -> frozenset[str]:
    """The state keys beyond ``messages`` a graph agent takes as input (its input schema)."""
    inner = getattr(agent, "graph", None)  # a loop as the agent: its compiled graph
    if isinstance(inner, Pregel):
        agent = inner
    if not isinstance(agent, Pregel):
        return frozenset()
    builder = getattr(agent, "builder", None)
    schema = getattr(builder, "input_schema", None)
    keys: set[str]
    try:
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            keys = set(schema.model_fields)
        elif schema is not None:
            keys = set(get_type_hints(schema))
        else:
            keys = set((agent.get_input_jsonschema() or {}).get("properties", {}))
    except Exception:  # a schema that cannot be read: the agent is given messages only
        return frozenset()
    return frozenset(keys - NOT_CARRIED)


def carried(state: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """The part of ``state`` a graph agent taking ``keys`` is given back."""
    if not state or not keys:
        return {}
    return {key: value for key, value in state.items() if key in keys}


def frozen(value: Any) -> Any:
    """``value`` in a form any checkpointer stores: pydantic models as plain data."""
    if isinstance(value, BaseModel):
        cls = type(value)
        return {
            _MODEL_MARK: f"{cls.__module__}:{cls.__qualname__}",
            "data": value.model_dump(mode="json"),
        }
    if isinstance(value, dict):
        return {key: frozen(item) for key, item in value.items()} if value else {}
    if isinstance(value, list):
        return [frozen(item) for item in value]
    return value


def thawed(value: Any) -> Any:
    """``value`` as `frozen` had it: pydantic models rebuilt when their class is imported."""
    if isinstance(value, dict):
        mark = value.get(_MODEL_MARK)
        if isinstance(mark, str) and set(value) == {_MODEL_MARK, "data"}:
            cls = _imported_model(mark)
            return cls.model_validate(value["data"]) if cls is not None else value["data"]
        return {key: thawed(item) for key, item in value.items()} if value else {}
    if isinstance(value, list):
        return [thawed(item) for item in value]
    return value


def _imported_model(mark: str) -> type[BaseModel] | None:
    """The pydantic class ``module:qualname`` names, if its module is already imported."""
    module_name, _, qualname = mark.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, BaseModel):
        return found
    return None


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """The change set that turns ``before`` into ``after``; ``None`` if they are equal.

    Keys whose value changed are set whole (``put``), keys gone are dropped (``drop``),
    and a mapping on both sides (``files``) gets only its changed entries (``entries``).

    Example:
        ```python
        before, after = {"files": {"/a": "a", "/b": "b"}}, {"files": {"/a": "a", "/b": "b2"}}
        assert applied(before, changes(before, after)) == after
        ```
    """
    put: dict[str, Any] = {}
    entries: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key, _ABSENT)
        if old is value:
            continue
        if _is_plain_mapping(old) and _is_plain_mapping(value):
            if inner := _entry_changes(old, value):
                entries[key] = inner
        elif old is _ABSENT or not _same(old, value):
            put[key] = frozen(value)
    drop = [key for key in before if key not in after]
    if not (put or entries or drop):
        return None
    return {CHANGES_MARK: 1, "put": put, "drop": drop, "entries": entries}


def _entry_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    put = {
        key: frozen(value)
        for key, value in new.items()
        if key not in old or (old[key] is not value and not _same(old[key], value))
    }
    drop = [key for key in old if key not in new]
    return {"put": put, "drop": drop} if put or drop else None


def _is_plain_mapping(value: object) -> bool:
    return isinstance(value, dict) and _MODEL_MARK not in value


def _same(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a value whose comparison fails is taken as changed
        return False


def is_changes(write: object) -> bool:
    """Whether a write of `AGENT_STATE` is a change set (else a whole value)."""
    return isinstance(write, dict) and write.get(CHANGES_MARK) == 1


def applied(state: Mapping[str, Any] | None, change: Mapping[str, Any] | None) -> dict[str, Any]:
    """``state`` with the change set ``change`` applied (a new mapping; ``state`` is kept)."""
    result = dict(state or {})
    if not change:
        return result
    for key in change.get("drop") or ():
        result.pop(key, None)
    for key, value in (change.get("put") or {}).items():
        result[key] = thawed(value)
    for key, inner in (change.get("entries") or {}).items():
        base = result.get(key)
        merged = dict(base) if isinstance(base, Mapping) else {}
        for entry in inner.get("drop") or ():
            merged.pop(entry, None)
        for entry, value in (inner.get("put") or {}).items():
            merged[entry] = thawed(value)
        result[key] = merged
    return result


def updated(state: Mapping[str, Any] | None, writes: Sequence[Any]) -> dict[str, Any]:
    """The value of `AGENT_STATE` after ``writes`` (its channels' reducer): change sets applied."""
    result: dict[str, Any] = dict(state or {})
    for write in writes:
        if is_changes(write):
            result = applied(result, write)
        elif isinstance(write, Mapping):
            result = dict(thawed(dict(write)))
        elif write is None:
            result = {}
        else:
            raise TypeError(
                f"agent_state is updated with a mapping of a graph agent's state keys; got "
                f"{type(write).__name__} {write!r:.60}"
            )
    return result


def _updated_by_one(state: dict[str, Any], write: Any) -> dict[str, Any]:
    return updated(state, [write])


class AgentStateChannel(BinaryOperatorAggregate[dict[str, Any]]):
    """`AGENT_STATE` stored whole in every checkpoint (`frozen`; it reads change sets too)."""

    def __init__(self, typ: Any = dict, operator: Any = _updated_by_one) -> None:
        # LangGraph's arguments, defaulted (its copy passes them back)
        super().__init__(typ, operator)

    def checkpoint(self) -> Any:
        """The stored form: pydantic models as plain data."""
        return frozen(super().checkpoint())

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """The channel as stored, pydantic models rebuilt."""
        channel = super().from_checkpoint(checkpoint)
        if channel.is_available():
            channel.value = thawed(channel.get())
        return channel


class AgentStateDeltaChannel(DeltaChannel[dict[str, Any]]):
    """`AGENT_STATE` as a delta channel: a checkpoint stores its step's change set."""

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """The channel as stored (a snapshot, a whole earlier value, or nothing)."""
        channel = super().from_checkpoint(checkpoint)
        if isinstance(channel.value, dict):
            channel.value = thawed(channel.value)
        return channel


def selected_state(
    entries: Sequence[Mapping[str, Any]], iteration: int | None, latest: Mapping[str, Any]
) -> dict[str, Any]:
    """The agent state of ``iteration`` (``{}`` if none): ``latest`` with later undos applied."""
    state: dict[str, Any] = dict(latest)
    for entry in reversed(entries):
        if "state" in entry:
            state = dict(thawed(entry.get("state") or {}))
        if entry.get("iteration") == iteration:
            return state
        state = applied(state, entry.get("undo"))
    return {}


def no_change() -> dict[str, Any]:
    """A change set that changes nothing (a write that keeps the value as it is)."""
    return {CHANGES_MARK: 1}


def restored(
    base: Mapping[str, Any], stored: Mapping[str, Any], *, whole: str, change: str
) -> dict[str, Any]:
    """The agent state a record holds: a change set from ``base``, or whole (older)."""
    if whole in stored:
        return dict(thawed(stored[whole] or {}))
    return applied(base, stored.get(change))
