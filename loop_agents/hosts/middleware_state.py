"""The loop's state inside a ``create_agent`` agent: its keys, and the view the nodes read.

`LoopMiddleware` keeps the loop's bookkeeping under ``loop_`` keys (`LoopAgentState`);
`loop_view` and `attempt_view` give the loop's nodes a `LoopState` of the agent's state,
and `agent_updates` turns what they return into updates of it.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, cast, get_args

from langchain.agents.middleware.types import OmitFromInput, PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.base import BaseChannel
from langgraph.channels.delta import DeltaChannel
from langgraph.managed import RemainingSteps
from langgraph.types import Overwrite
from typing_extensions import TypedDict, get_type_hints

from loop_agents.loop.agent_state import (
    AgentStateChannel,
    AgentStateDeltaChannel,
    applied,
    changes,
    is_changes,
    updated,
)
from loop_agents.loop.outcomes import run_of
from loop_agents.loop.protocol import Attempt
from loop_agents.loop.state import IterationRecord, LoopState, StopReason
from loop_agents.loop.storage import LISTS_SNAPSHOT_EVERY, extend_list, unwrapped
from loop_agents.runtime.usage import CallUsage

LOOP_KEYS: dict[str, str] = {
    "iteration": "loop_iteration",
    "records": "loop_records",
    "feedback": "loop_feedback",
    "stop_reason": "loop_stop_reason",
    "selected_iteration": "loop_selected_iteration",
    "selected_score": "loop_selected_score",
    "init_messages": "loop_init_messages",
    "loop_init_ids": "loop_init_ids",
    "started_at": "loop_started_at",
    "attempt_states": "loop_attempt_states",
    "history_memory": "loop_history_memory",
    "remaining_steps": "loop_remaining_steps",
}
"""Each `LoopState` key the agent's state holds, and its name there."""

NOT_KEPT = frozenset({"stop", "last_response", "agent_run", "candidate_runs"})
"""`LoopState` keys the agent's state does not hold: each is the latest record's, the
conversation's, measured per attempt, or never written inside an agent."""

DEFAULT_STATE_KEYS = ("structured_response", "files", "todos")
"""The agent-state keys of an attempt by default: structured output, a deep agent's files, plan."""

STOPPED = "the agent's turn ended before its model answered"
"""How the error of an attempt that another middleware ended begins; it ends the loop."""

LIMIT_NOTES = {
    "Model call limits exceeded": "model_call_limit",
    "call limit reached": "tool_call_limit",
}
"""Words of LangChain's limit middleware notes, and the stop reason each one names."""


def stopped_reason(error: str) -> str:
    """The stop reason of an attempt another middleware ended: the limit, if one is named."""
    return next(
        (reason for words, reason in LIMIT_NOTES.items() if words in error), "agent_stopped"
    )


class AttemptMark(TypedDict):
    """Where the current attempt starts: what the hooks between its model calls need."""

    iteration: int
    after: str | None  # the id of the last message before the attempt's own
    opened_at: float  # seconds since the epoch
    sent: list[str | AnyMessage] | None  # the history policy's choice (ids or messages)
    history: NotRequired[dict[str, Any]]  # the stored usage of the history policy's calls


class ModelCalls(TypedDict):
    """The attempt's model calls so far, and the ids of the AI messages the model wrote."""

    calls: int
    usage: dict[str, Any]
    answers: NotRequired[list[str]]


def add_model_calls(left: ModelCalls | None, right: ModelCalls | None) -> ModelCalls:
    """The reducer of ``loop_model_calls``: calls, usage and answers added up."""
    if not left:
        return right or {"calls": 0, "usage": {}}
    if not right:
        return left
    if not left["usage"] or not right["usage"]:  # the common case: no sum to make
        usage = left["usage"] or right["usage"]
    else:
        usage = (CallUsage.of_stored(left["usage"]) + CallUsage.of_stored(right["usage"])).stored()
    answers = [*left.get("answers", []), *right.get("answers", [])]
    return {"calls": left["calls"] + right["calls"], "usage": usage, "answers": answers}


def _lists() -> DeltaChannel[list[Any]]:
    return DeltaChannel(extend_list, snapshot_frequency=LISTS_SNAPSHOT_EVERY)


# RemainingSteps is Annotated[int, its manager]: the manager must stay the last marker
_PrivateRemainingSteps = Annotated[(int, PrivateStateAttr, *get_args(RemainingSteps)[1:])]


class LoopAgentState(TypedDict, total=False):
    """The loop's keys in a ``create_agent`` agent's state (`LoopMiddleware`'s schema).

    In the agent's output, never in its input: ``loop_iteration``, ``loop_init_messages``
    (the current loop's request), ``loop_records`` (one `IterationRecord` per iteration,
    each with its ``answer``), ``loop_feedback``, ``loop_stop_reason`` (``None`` while the
    loop runs), ``loop_selected_iteration`` and ``loop_selected_score``. The others are
    private (in ``get_state(config).values``): the request's ids, the loop's start, each
    iteration's agent state for selection, the history policy's memory, the steps left,
    and the attempt under way. The append-only lists are LangGraph delta channels (as
    `create_loop_agent` stores them; `LOOP_AGENT_STATE_FULL` stores them whole).
    """

    loop_iteration: Annotated[int, OmitFromInput]
    loop_records: Annotated[list[IterationRecord], OmitFromInput, _lists()]
    loop_feedback: Annotated[list[str], OmitFromInput, _lists()]
    loop_stop_reason: Annotated[StopReason | None, OmitFromInput]
    loop_selected_iteration: Annotated[int | None, OmitFromInput]
    loop_selected_score: Annotated[float | None, OmitFromInput]
    loop_init_messages: Annotated[list[AnyMessage], OmitFromInput]
    loop_init_ids: Annotated[list[str], PrivateStateAttr]
    loop_started_at: Annotated[float, PrivateStateAttr]
    loop_attempt_states: Annotated[list[dict[str, Any]], PrivateStateAttr, _lists()]
    loop_history_memory: Annotated[dict[str, Any] | None, PrivateStateAttr]
    loop_remaining_steps: _PrivateRemainingSteps
    loop_attempt: Annotated[AttemptMark, PrivateStateAttr]
    loop_attempt_start: Annotated[
        dict[str, Any],
        PrivateStateAttr,
        AgentStateDeltaChannel(updated, dict, snapshot_frequency=LISTS_SNAPSHOT_EVERY),
    ]
    loop_model_calls: Annotated[ModelCalls, PrivateStateAttr, add_model_calls]


def _stored_whole() -> type[Any]:
    """`LoopAgentState` with its append-only lists stored whole (their delta channel replaced)."""
    hints = get_type_hints(LoopAgentState, include_extras=True)
    whole = {
        "loop_records": operator.add,
        "loop_feedback": operator.add,
        "loop_attempt_states": operator.add,
        "loop_attempt_start": AgentStateChannel(),
    }
    for key, reducer in whole.items():
        hints[key] = Annotated[(*get_args(hints[key])[:-1], reducer)]
    schema: type[Any] = cast(Any, TypedDict)("LoopAgentState", hints, total=False)
    schema.__doc__, schema.__module__ = LoopAgentState.__doc__, __name__
    return schema


LOOP_AGENT_STATE_FULL = _stored_whole()
"""`LoopAgentState` with its append-only lists stored whole (``storage="full"``)."""

OUTPUT_KEYS = tuple(
    key
    for key, hint in get_type_hints(LoopAgentState, include_extras=True).items()
    if OmitFromInput in hint.__metadata__
)
"""The loop's keys in the agent's output (the others are private)."""


# -- the view the loop's nodes read ---------------------------------------------------


def last_answer(messages: Sequence[AnyMessage]) -> AIMessage | None:
    """The conversation's last AI message, if any."""
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def attempt_part(messages: Sequence[AnyMessage], after: str | None) -> list[AnyMessage]:
    """The messages after the one with id ``after`` (gone, as a summary takes it: the user's)."""
    if after is not None:
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].id == after:
                return list(messages[index + 1 :])
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return list(messages[index + 1 :])
    return list(messages)


def agent_state_of(state: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The attempt's part of the agent's state: ``keys`` that hold a value."""
    return {key: state[key] for key in keys if state.get(key) is not None}


def loop_view(state: Mapping[str, Any], keys: Sequence[str]) -> LoopState:
    """The `LoopState` the loop's nodes read before an iteration opens, from the agent's."""
    messages = list(state.get("messages") or [])
    view: dict[str, Any] = {
        "messages": messages,
        "iteration": state.get("loop_iteration") or 0,
        "last_response": last_answer(messages),
        "agent_state": agent_state_of(state, keys),
    }
    for loop_key, agent_key in LOOP_KEYS.items():
        if loop_key != "iteration" and state.get(agent_key) is not None:
            view[loop_key] = state[agent_key]
    return view  # type: ignore[return-value]


def attempt_view(state: Mapping[str, Any], keys: Sequence[str], mark: AttemptMark) -> LoopState:
    """`loop_view` with the open attempt in it, as ``evaluate`` reads it.

    Its answer is its last AI message if the model wrote it; else (no model call, or a
    limit's note) it failed, its error beginning with `STOPPED`, and is never judged.
    """
    view: dict[str, Any] = dict(loop_view(state, keys))
    produced = attempt_part(view["messages"], mark["after"])
    calls = state.get("loop_model_calls") or {"calls": 0, "usage": {}}
    last = last_answer(produced)
    error: str | None = None
    if last is not None and (
        calls["calls"] == 0 or ("answers" in calls and last.id not in calls["answers"])
    ):
        error = f"{STOPPED}: another middleware ended it with {last.text.strip()!r:.200}"
    elif calls["calls"] == 0 or last is None:
        error = (
            f"{STOPPED}: it ended without calling the model (a middleware stopped it, e.g. "
            f"ModelCallLimitMiddleware's limit)"
        )
    attempt = Attempt(
        produced if error is None else None,
        error,
        view["agent_state"],
        max(0.0, time.time() - mark["opened_at"]),
        CallUsage.of_stored(calls["usage"]),
    )
    run = run_of(attempt, CallUsage.of_stored(mark.get("history") or {}))
    start = state.get("loop_attempt_start")
    if isinstance(start, Mapping):  # the way back to the state the attempt started from
        run["agent_state_undo"] = changes(view["agent_state"], start)
    view["agent_run"] = run
    view["last_response"] = attempt.answer
    return view  # type: ignore[return-value]


def attempt_start(state: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any] | None:
    """The update that keeps the agent state an attempt starts from (what changed), if any."""
    before = state.get("loop_attempt_start")
    return changes(dict(before) if isinstance(before, Mapping) else {}, agent_state_of(state, keys))


# -- the nodes' updates, as updates of the agent's state ---------------------------------


def agent_updates(
    updates: Mapping[str, Any],
    state: Mapping[str, Any],
    keys: Sequence[str],
    reduced: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The agent-state updates for the `LoopState` ``updates`` a node program returned.

    ``iteration`` is left to the hook that opens the iteration; an ``agent_state`` is
    written back to the agent's keys (`written_back`).
    """
    out: dict[str, Any] = {}
    for key, value in updates.items():
        if key in NOT_KEPT or key == "iteration":
            continue
        if key == "messages":
            out["messages"] = list(value)
        elif key == "agent_state":  # a change set from the agent's state as it stands
            selected = applied(agent_state_of(state, keys), value) if is_changes(value) else value
            out.update(written_back(selected, state, keys, reduced))
        elif key in LOOP_KEYS:
            out[LOOP_KEYS[key]] = value
        else:
            raise KeyError(
                f"the loop wrote the state key {key!r}, which LoopMiddleware does not keep; "
                f"add it to loop_agents.hosts.middleware_state.LOOP_KEYS"
            )
    return out


def written_back(
    selected: Mapping[str, Any],
    state: Mapping[str, Any],
    keys: Sequence[str],
    reduced: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Updates that put the selected attempt's agent state back in the agent's ``keys``.

    A key in ``reduced`` (stored with a reducer) is written as an ``Overwrite``.
    """
    out: dict[str, Any] = {}
    for key in keys:
        current = state.get(key)
        chosen = selected.get(key)
        if chosen is None and current is None:
            continue
        if key in reduced:
            empty = type(current)() if isinstance(current, dict | list) else None
            out[key] = Overwrite(chosen if chosen is not None else empty)
        else:
            out[key] = chosen
    return out


REDUCED_BY_DEFAULT = frozenset({"files"})
"""The default state keys that are stored with a reducer: a deep agent's ``files``."""


def keys_with_reducers(schema: type[Any]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The keys of a state ``schema`` (but ``messages``), and those with a reducer.

    A key has a reducer when its annotation ends with one (a function, e.g.
    ``operator.add``, or a LangGraph channel such as a deep agent's ``DeltaChannel``).
    """
    try:
        hints = get_type_hints(schema, include_extras=True)
    except Exception as exc:  # a class that is not a schema
        raise TypeError(
            f"state_keys must be a list of key names or a state schema (a TypedDict); "
            f"{schema!r:.60} has no readable annotations ({exc})"
        ) from None
    if not hints:
        raise TypeError(f"state_keys: the schema {schema.__name__} declares no keys")
    keys = tuple(k for k in hints if k not in ("messages", "jump_to") and not k.startswith("loop_"))
    return keys, frozenset(k for k in keys if _has_reducer(hints[k]))


def _has_reducer(hint: object) -> bool:
    marker = getattr(unwrapped(hint), "__metadata__", (None,))[-1]
    return isinstance(marker, BaseChannel) or (callable(marker) and not isinstance(marker, type))


def loop_output(
    values: Mapping[str, Any], *, state_keys: Sequence[str] = DEFAULT_STATE_KEYS
) -> dict[str, Any]:
    """A loop's output in `create_loop_agent`'s form, whichever way the loop ran.

    A ``LoopMiddleware`` agent's output or state (``loop_`` keys) under the names of a
    loop's output (while the loop runs, ``iteration`` counts the judged attempts);
    anything else (a loop's own output) as it is.

    Example:
        ```python
        result = loop_output(agent.invoke({"messages": [request]}))
        print(result["stop_reason"], [r["score"] for r in result["records"]])
        ```

    """
    if "loop_records" not in values and "loop_iteration" not in values:
        return dict(values)
    messages = list(values.get("messages") or [])
    records = list(values.get("loop_records") or [])
    reason = values.get("loop_stop_reason")
    return {
        "messages": messages,
        "init_messages": list(values.get("loop_init_messages") or []),
        "iteration": (values.get("loop_iteration") or 0) if reason else len(records),
        "last_response": last_answer(messages),
        "stop": bool(records[-1]["stop"]) if records else False,
        "feedback": list(values.get("loop_feedback") or []),
        "stop_reason": reason,
        "records": records,
        "selected_iteration": values.get("loop_selected_iteration"),
        "selected_score": values.get("loop_selected_score"),
        "agent_state": agent_state_of(values, state_keys),
    }
