"""A graph agent's state beyond ``messages``: kept by the loop, given back, shown, selected.

A graph agent may keep more than messages in its state: ``deepagents``' deep agents
keep the files they write in ``files`` (and their plan in ``todos``);
``create_agent(..., response_format=Schema)`` puts the parsed answer in
``structured_response``. These belong to the attempt, like its answer:

- the loop keeps the agent's output keys other than ``messages`` (the `AGENT_STATE` key
  of the loop's state, one key, so none of them collides with a parent graph's keys);
- the next attempt's agent is given back those it takes as input (`input_keys`: its
  input schema), so a deep agent revises the files it wrote instead of starting empty;
- the evaluator sees them as ``context["agent_state"]``;
- each iteration's are kept (`ATTEMPT_STATES`, a delta channel: storage grows linearly),
  and when the loop ends ``agent_state`` holds the selected iteration's (with
  ``select="best"``, the best iteration's files or structured response).

Values are stored as the checkpointer stores any state, except pydantic models (a
``structured_response``): those are stored as plain data with their class's name
(`frozen`) and rebuilt on reading (`thawed`) when that class is already imported, so a
checkpointer never has to load a class it was not told about. A class that is not
imported when a checkpoint is read leaves the plain data (a ``dict``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Self

from langgraph.channels.last_value import LastValue
from langgraph.pregel import Pregel
from pydantic import BaseModel
from typing_extensions import get_type_hints

AGENT_STATE = "agent_state"
"""The loop's state key for the latest (and, once the loop ends, the selected) attempt's
agent state."""

ATTEMPT_STATES = "attempt_states"
"""The loop's internal state key for every iteration's agent state (``{"iteration": n,
"state": {...}}``), kept for choosing the answer when the loop ends."""

_MODEL_MARK = "__loop_agents_model__"

NOT_CARRIED = frozenset({"messages", "init_messages"})
"""Input keys never given back: the conversation is sent anyway, and a loop used as the
agent starts each attempt from the request it is sent (its ``init_messages``)."""


def input_keys(agent: object) -> frozenset[str]:
    """The state keys beyond ``messages`` a graph agent takes as input.

    Read from the graph's input schema (``builder.input_schema`` of a compiled
    ``StateGraph``, else its input JSON schema); empty for anything that is not a graph.

    Example:
        ```python
        input_keys(create_agent(model))  # frozenset(): it takes messages only
        input_keys(create_deep_agent(model=model))  # frozenset({'files', ...})
        ```

    """
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


def output_state(result: Mapping[str, Any]) -> dict[str, Any]:
    """A graph agent's state after a call: its result's keys other than ``messages``.

    Example:
        ```python
        output_state({"messages": [...], "files": {"/a.py": ...}})  # {'files': {...}}
        ```

    """
    return {key: value for key, value in result.items() if key != "messages"}


def carried(state: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """The part of ``state`` a graph agent taking ``keys`` is given back."""
    if not state or not keys:
        return {}
    return {key: value for key, value in state.items() if key in keys}


def frozen(value: Any) -> Any:
    """``value`` in a form any checkpointer stores: pydantic models as plain data.

    Example:
        ```python
        stored = frozen({"structured_response": Answer(title="x")})
        assert thawed(stored) == {"structured_response": Answer(title="x")}
        ```

    """
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


class AgentStateChannel(LastValue[dict[str, Any]]):
    """The channel of `AGENT_STATE`: the last value, stored `frozen`, read `thawed`."""

    def checkpoint(self) -> Any:
        """The stored form: pydantic models as plain data."""
        return frozen(super().checkpoint())

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """The channel as stored, pydantic models rebuilt."""
        return super().from_checkpoint(thawed(checkpoint))


def selected_state(entries: Sequence[Mapping[str, Any]], iteration: int | None) -> dict[str, Any]:
    """The agent state of ``iteration`` among `ATTEMPT_STATES` entries (``{}`` if none)."""
    for entry in reversed(entries):
        if entry.get("iteration") == iteration:
            return dict(thawed(entry.get("state") or {}))
    return {}
