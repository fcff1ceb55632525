"""The loop's state inside a ``create_agent`` agent: its keys, and the view the nodes read.

`LoopMiddleware` keeps the loop's bookkeeping in the agent's own state, under keys that
start with ``loop_`` so that they never collide with the agent's (`LOOP_KEYS`): the
public ones (`LoopAgentState`: ``loop_iteration``, ``loop_records``, ``loop_feedback``,
``loop_stop_reason``, ``loop_selected_iteration``, ``loop_selected_score``,
``loop_init_messages``) are in the agent's output, never in its input; the rest are
private to the middleware (LangChain's ``PrivateStateAttr``). The append-only lists are
LangGraph delta channels (each checkpoint stores its step's new items, so storage grows
linearly), as `create_loop_agent` stores them (`loop_agents.loop.storage`).

The loop's nodes (`loop_agents.loop.nodes.LoopNodes`) read and write a `LoopState`;
`loop_view` builds that view from the agent's state, and `agent_updates` turns what
the nodes return into updates of the agent's state. Nothing else is translated: the
iteration is opened, judged, recorded and decided by the same code as in
`create_loop_agent`. `loop_output` gives an agent's loop in the form of a loop's output
(for code that reads both, as an eval or the command does).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, cast, get_args

from langchain.agents.middleware.types import OmitFromInput, PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.base import BaseChannel
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
from loop_agents.loop.state import LoopState
from loop_agents.loop.storage import LISTS_SNAPSHOT_EVERY, StorageLayout, unwrapped, with_storage
from loop_agents.runtime.usage import CallUsage

LOOP_KEYS: dict[str, tuple[str, Literal["output", "private"]]] = {
    "iteration": ("loop_iteration", "output"),
    "records": ("loop_records", "output"),
    "feedback": ("loop_feedback", "output"),
    "stop_reason": ("loop_stop_reason", "output"),
    "selected_iteration": ("loop_selected_iteration", "output"),
    "selected_score": ("loop_selected_score", "output"),
    "init_messages": ("loop_init_messages", "output"),
    "loop_init_ids": ("loop_init_ids", "private"),
    "started_at": ("loop_started_at", "private"),
    "attempt_states": ("loop_attempt_states", "private"),
    "history_memory": ("loop_history_memory", "private"),
    "remaining_steps": ("loop_remaining_steps", "private"),
}
"""Each `LoopState` key the agent's state holds: its name there, and whether it is in the
agent's output (``"output"``) or private to the middleware. Its type and reducer are
`LoopState`'s (``loop_iteration`` excepted: the opening hook sets it, a last value)."""

NOT_KEPT = frozenset({"stop", "last_response", "agent_run", "candidate_runs"})
"""`LoopState` keys the agent's state does not hold: ``stop`` is the latest record's,
``last_response`` the conversation's last AI message, and ``agent_run`` is measured anew
for every attempt; ``candidate_runs`` never occur (one attempt at a time). (``messages``
and the ``agent_state`` keys are the agent's own.)"""

DEFAULT_STATE_KEYS = ("structured_response", "files", "todos")
"""The agent-state keys that belong to an attempt by default: ``create_agent``'s
structured output, a deep agent's files and its plan."""

STOPPED = "the agent's turn ended before its model answered"
"""How the error of an attempt that another middleware ended begins; it ends the loop."""

NO_MODEL_CALL = (
    f"{STOPPED}: it ended without calling the model (a middleware stopped it, e.g. "
    f"ModelCallLimitMiddleware's limit)"
)
"""The error of an attempt that made no model call."""

LIMIT_NOTES = {
    "Model call limits exceeded": "model_call_limit",
    "call limit reached": "tool_call_limit",
}
"""Words of LangChain's limit middleware notes, and the stop reason each one names."""


def stopped_reason(error: str) -> str:
    """The stop reason of an attempt another middleware ended: the limit, if one is named.

    Example:
        ```python
        stopped_reason(f"{STOPPED}: Model call limits exceeded: run limit (3/3)")
        # 'model_call_limit'
        ```

    """
    for words, reason in LIMIT_NOTES.items():
        if words in error:
            return reason
    return "agent_stopped"


class AttemptMark(TypedDict):
    """Where the current attempt starts: what the hooks between its model calls need.

    Attributes:
        iteration: The attempt's iteration.
        after: The id of the last message before the attempt's own (the request or
            the feedback); ``None`` for an empty conversation.
        opened_at: When the attempt was opened (seconds since the epoch).
        sent: What the history policy chose to send, when it is not the whole
            conversation: a message id (a message of the conversation) or a message (one
            of the policy's own, e.g. a summary); ``None``: the whole conversation.
        history: The stored usage of the history policy's model calls, if any.

    """

    iteration: int
    after: str | None
    opened_at: float
    sent: list[str | AnyMessage] | None
    history: NotRequired[dict[str, Any]]


class ModelCalls(TypedDict):
    """The attempt's model calls so far (each ``wrap_model_call`` adds one).

    ``answers`` holds the ids of the AI messages the model wrote: a message another
    middleware wrote (a limit's note) is never taken as the attempt's answer.
    """

    calls: int
    usage: dict[str, Any]
    answers: NotRequired[list[str]]


def add_model_calls(left: ModelCalls | None, right: ModelCalls | None) -> ModelCalls:
    """The reducer of ``loop_model_calls``: calls and usage added up.

    Example:
        ```python
        one = {"calls": 1, "usage": CallUsage(10, 2, 1).stored()}
        assert add_model_calls(one, one)["calls"] == 2
        ```

    """
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


class AttemptKeys(TypedDict, total=False):
    """The middleware's own keys, private: the attempt under way.

    Attributes:
        loop_attempt: Where the current attempt starts (an `AttemptMark`).
        loop_attempt_start: The agent state the attempt started from, when the loop
            chooses its answer (stored as what changed).
        loop_model_calls: The attempt's model calls so far.

    """

    loop_attempt: Annotated[AttemptMark, PrivateStateAttr]
    loop_attempt_start: Annotated[dict[str, Any], PrivateStateAttr, AgentStateChannel()]
    loop_model_calls: Annotated[ModelCalls, PrivateStateAttr, add_model_calls]


_DOC = """The loop's keys in a ``create_agent`` agent's state (`LoopMiddleware`'s schema).

Made from `LoopState` by `loop_agent_state` (`LOOP_KEYS`), so both forms store a key the
same way. The keys in the agent's output (never in its input):

- ``loop_iteration``: the current loop's iteration (1 for its first attempt);
- ``loop_init_messages``: the current loop's request;
- ``loop_records``: one `IterationRecord` per iteration of the current loop, each with
  its ``answer`` (a middleware may rewrite the conversation, e.g. a summary);
- ``loop_feedback``: every evaluation's feedback in the current loop, oldest first;
- ``loop_stop_reason``: why the loop ended; ``None`` while it runs;
- ``loop_selected_iteration``, ``loop_selected_score``: the answer's iteration, its score.

The other keys are private (not in the agent's input or output; in
``get_state(config).values``): the request's ids, the loop's start, each iteration's
agent state for selection, the history policy's memory, the steps left under the
recursion limit, and the attempt under way (`AttemptKeys`)."""


@functools.cache
def loop_agent_state(layout: StorageLayout) -> type[Any]:
    """The middleware's state schema for ``layout``: `LoopState`'s keys, ``loop_`` named.

    Example:
        ```python
        schema = loop_agent_state("delta")
        assert "loop_records" in schema.__annotations__
        ```

    """
    hints = get_type_hints(with_storage(LoopState, layout), include_extras=True)
    fields: dict[str, Any] = {}
    for key, (name, shown) in LOOP_KEYS.items():
        hint = unwrapped(hints[key])
        value, *reducer = get_args(hint) if hasattr(hint, "__metadata__") else (hint,)
        if key == "iteration":
            reducer = []  # the opening hook sets it: a last value
        marker = OmitFromInput if shown == "output" else PrivateStateAttr
        fields[name] = NotRequired[Annotated[(value, marker, *reducer)]]
    for name, hint in get_type_hints(AttemptKeys, include_extras=True).items():
        if name == "loop_attempt_start" and layout == "delta":
            hint = Annotated[
                dict[str, Any],
                PrivateStateAttr,
                AgentStateDeltaChannel(updated, dict, snapshot_frequency=LISTS_SNAPSHOT_EVERY),
            ]
        fields[name] = NotRequired[hint]
    typed_dict = cast(Any, TypedDict)
    schema: type[Any] = typed_dict("LoopAgentState", fields, total=False)
    schema.__doc__ = _DOC
    schema.__module__ = __name__
    return schema


LoopAgentState = loop_agent_state("delta")
"""`LoopMiddleware`'s state schema with its lists stored as delta channels (the default)."""


# -- the view the loop's nodes read ---------------------------------------------------


def last_answer(messages: Sequence[AnyMessage]) -> AIMessage | None:
    """The conversation's last AI message, if any."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def attempt_part(messages: Sequence[AnyMessage], after: str | None) -> list[AnyMessage]:
    """The messages of the current attempt: those after the message with id ``after``.

    When that message is gone (a middleware rewrote the conversation, as a summary
    does), the attempt's messages are those after the last user message.
    """
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
    """The `LoopState` the loop's nodes read, from the agent's state.

    Without an open attempt (``loop_attempt``) it is the state before an iteration
    opens; with one, it holds the attempt as ``invoke_agent`` leaves it: its answer
    (``last_response``) and what it took (``agent_run``: seconds since it was opened,
    its model calls, the tokens its answers report).
    """
    messages = list(state.get("messages") or [])
    view: dict[str, Any] = {
        "messages": messages,
        "iteration": state.get("loop_iteration") or 0,
        "last_response": last_answer(messages),
        "agent_state": agent_state_of(state, keys),
    }
    for loop_key, (agent_key, _) in LOOP_KEYS.items():
        if loop_key != "iteration" and state.get(agent_key) is not None:
            view[loop_key] = state[agent_key]
    return view  # type: ignore[return-value]


def attempt_view(state: Mapping[str, Any], keys: Sequence[str], mark: AttemptMark) -> LoopState:
    """`loop_view` with the open attempt in it, as ``evaluate`` reads it.

    The attempt's answer is the last AI message of the attempt when the model wrote it.
    An attempt that made no model call, or whose last AI message another middleware wrote
    (``ModelCallLimitMiddleware``'s note with ``exit_behavior="end"``), was ended before
    its model answered: a failed attempt, its error beginning with `STOPPED` and quoting
    the note, never judged.
    """
    view: dict[str, Any] = dict(loop_view(state, keys))
    produced = attempt_part(view["messages"], mark["after"])
    calls = state.get("loop_model_calls") or {"calls": 0, "usage": {}}
    last = last_answer(produced)
    error: str | None = None
    written_by_another = last is not None and (
        calls["calls"] == 0 or ("answers" in calls and last.id not in calls["answers"])
    )
    if written_by_another and last is not None:
        error = f"{STOPPED}: another middleware ended it with {last.text.strip()!r:.200}"
    elif calls["calls"] == 0 or last is None:
        error = NO_MODEL_CALL
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

    ``iteration`` is left to the hook that opens the iteration (it knows its number); a
    selected iteration's agent state (``agent_state``) is written back to the agent's
    keys (see `written_back`).

    Raises:
        KeyError: ``updates`` hold a key the agent's state has no place for (a key added
            to the loop's state must be added to `LOOP_KEYS`).

    """
    out: dict[str, Any] = {}
    for key, value in updates.items():
        if key in NOT_KEPT:
            continue
        if key == "messages":
            out["messages"] = list(value)
        elif key == "agent_state":  # a change set from the agent's state as it stands
            selected = applied(agent_state_of(state, keys), value) if is_changes(value) else value
            out.update(written_back(selected, state, keys, reduced))
        elif key == "iteration":
            continue  # the opening hook sets ``loop_iteration`` to the turn's number
        elif key in LOOP_KEYS:
            out[LOOP_KEYS[key][0]] = value
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

    Each key comes back exactly as the selected attempt left it: a key stored with a
    reducer (``reduced``: a deep agent's ``files``, a list with ``operator.add``) is
    written as an ``Overwrite``, which replaces its value whatever the reducer; any other
    key is written as it is. A key the selected attempt had no value for is cleared.
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


def _is_reducer(marker: object) -> bool:
    return isinstance(marker, BaseChannel) or (callable(marker) and not isinstance(marker, type))


REDUCED_BY_DEFAULT = frozenset({"files"})
"""The default state keys that are stored with a reducer: a deep agent's ``files``."""


def keys_with_reducers(schema: type[Any]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The keys of a state ``schema`` (but ``messages``), and those with a reducer.

    A key has a reducer when its annotation ends with one (a function, e.g.
    ``operator.add``, or a LangGraph channel such as a deep agent's ``DeltaChannel``).

    Example:
        ```python
        class Notes(TypedDict):
            notes: Annotated[list[str], operator.add]
            title: str

        assert keys_with_reducers(Notes) == (("notes", "title"), frozenset({"notes"}))
        ```

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
    reduced = frozenset(
        k
        for k in keys
        if hasattr(unwrapped(hints[k]), "__metadata__")
        and _is_reducer(get_args(unwrapped(hints[k]))[-1])
    )
    return keys, reduced


def loop_output(
    values: Mapping[str, Any], *, state_keys: Sequence[str] = DEFAULT_STATE_KEYS
) -> dict[str, Any]:
    """A loop's output in `create_loop_agent`'s form, whichever way the loop ran.

    Given a ``LoopMiddleware`` agent's output or state (``loop_`` keys), the same keys
    as a loop's output: ``records``, ``stop_reason``, ``iteration``, ``feedback``,
    ``selected_iteration``, ``selected_score``, ``init_messages``, ``messages``,
    ``last_response`` (the conversation's last AI message), ``stop`` (the latest
    record's) and ``agent_state`` (its ``state_keys`` that hold a value). While
    the loop runs, ``iteration`` counts the judged attempts. Anything else (a loop's own
    output) is returned as it is, so code that reads loops' results (an eval, the
    command) takes both.

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
    output: dict[str, Any] = {
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
    }
    output["agent_state"] = agent_state_of(values, state_keys)
    return output
