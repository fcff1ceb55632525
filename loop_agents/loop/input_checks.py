"""What a loop accepts as input, checked before LangGraph runs anything.

``{"messages": [...]}`` (optionally ``init_messages``, ``agent_state``), ``None`` to
resume a thread, or a ``Command``; anything else raises `LoopInputError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, convert_to_messages
from langgraph.types import Command

from loop_agents.loop.agents import _shape

INPUT_KEYS = ("messages", "init_messages", "agent_state")
"""The keys of a loop's input (`LoopInput`)."""

HOW_TO_ANSWER = (
    "Resume with Command(resume=True) to accept the answer, or with "
    "Command(resume='what to improve') to ask for another attempt. A mapping "
    "{'approve': bool, 'feedback': str, 'score': number} is accepted too."
)
"""How to answer a human review (`loop_agents.evaluators.human`), the loop's one interrupt."""

EXAMPLE = "{'messages': [HumanMessage('Write a haiku about rain.')]}"

A_MESSAGE = (
    "a message is a HumanMessage/AIMessage/SystemMessage/ToolMessage, a string (a user "
    "turn), a (role, text) pair such as ('user', 'Hi') or a dict such as "
    "{'role': 'user', 'content': 'Hi'}"
)


class LoopInputError(TypeError, ValueError):
    """What a loop was called with is not a loop input; nothing was run.

    Both a `TypeError` and a `ValueError`, so either ``except`` catches it.
    """


def check_input(value: Any, *, nested: bool, checkpointer: bool) -> Any:
    """A loop's input checked, its messages as LangChain messages (else `LoopInputError`).

    ``nested``: in a parent graph's run (only its ``messages`` and ``init_messages`` are
    checked); ``checkpointer``: the loop saves its runs (``None`` resumes one).
    """
    if nested:
        if isinstance(value, Mapping):
            for key in ("messages", "init_messages"):
                if key in value:
                    _messages(key, value[key])
        return value
    if value is None:
        if not checkpointer:
            raise LoopInputError(
                f"the loop was called with None, which resumes the run saved on a thread, "
                f"and this loop has no checkpointer, so there is nothing to resume. Pass "
                f"the request: loop.invoke({EXAMPLE})"
            )
        return None
    if isinstance(value, Command):
        check_command(value)
        return value
    if not isinstance(value, Mapping):
        raise LoopInputError(
            f"a loop's input must be a mapping such as {EXAMPLE}; got {_shape(value)}"
            + _wrap_hint(value)
        )
    unknown = sorted(str(k) for k in value if k not in INPUT_KEYS)
    if unknown:
        raise LoopInputError(
            f"a loop's input has the keys 'messages' and, optionally, 'init_messages' and "
            f"'agent_state'; got unknown keys {unknown}. Example: {EXAMPLE}"
        )
    checked: dict[str, Any] = {
        key: _messages(key, value[key]) for key in ("messages", "init_messages") if key in value
    }
    state = value.get("agent_state", {})
    if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
        raise LoopInputError(
            f"'agent_state' must be a mapping of a graph agent's state keys to their values "
            f"(e.g. {{'files': {{...}}}} for a deep agent); got {_shape(state)}"
        )
    if "agent_state" in value:
        checked["agent_state"] = dict(state)
    if not checkpointer and not checked.get("messages") and not checked.get("init_messages"):
        raise LoopInputError(
            f"a loop needs a request to start from; got {_shape(dict(value))} with no "
            f"message. Pass at least one: {EXAMPLE}"
        )
    return checked


def _wrap_hint(value: object) -> str:
    if isinstance(value, list | tuple):
        return ". Put the list under 'messages': {'messages': [...]}"
    if isinstance(value, str | BaseMessage):
        return ". Put it in a list under 'messages': {'messages': [...]}"
    return ""


def _messages(key: str, value: object) -> list[AnyMessage]:
    """``value`` of ``key`` as a list of messages (``messages`` also takes one message)."""
    if value is None:
        raise LoopInputError(
            f"'{key}' is None; expected a list of messages, e.g. {EXAMPLE}. To resume "
            f"the run saved on a thread, call invoke(None, config) instead"
        )
    if isinstance(value, list):
        items: list[Any] = value
    elif key == "messages" and isinstance(value, BaseMessage | str | Mapping | tuple):
        items = [value]  # one message, as add_messages takes it
    else:
        raise LoopInputError(
            f"'{key}' must be a list of messages; got {_shape(value)}. Example: "
            f"{{'{key}': [HumanMessage('...')]}}"
        )
    converted: list[AnyMessage] = []
    for index, item in enumerate(items):
        if isinstance(item, BaseMessage):
            converted.append(item)  # type: ignore[arg-type]
            continue
        try:
            converted.extend(convert_to_messages([item]))  # type: ignore[arg-type]
        except (NotImplementedError, ValueError, TypeError, KeyError) as exc:
            where = f"'{key}'[{index}]" if isinstance(value, list) else f"'{key}'"
            raise LoopInputError(f"{where} is {_shape(item)}, not a message; {A_MESSAGE}") from exc
    return converted


def check_command(command: Command[Any]) -> None:
    """Refuse a ``Command`` that carries nothing (LangGraph fails on it) or a wrong update."""
    if command.update is not None:
        check_update(_update_pairs(command.update), "Command(update=...)")
    if command.resume is None and command.update is None and not command.goto:
        raise LoopInputError(
            "Command(resume=None) carries no answer, so it resumes nothing. For a loop "
            f"paused at a human review: {HOW_TO_ANSWER} To continue a run that stopped "
            "on an error, call invoke(None, config); to start a new loop on the thread, "
            f"pass {EXAMPLE}. The thread is unchanged and still waits for its answer."
        )


def _update_pairs(update: object) -> list[tuple[str, Any]]:
    """A ``Command.update`` as ``(key, value)`` pairs (a mapping, or a list of pairs)."""
    if isinstance(update, Mapping):
        return [(str(k), v) for k, v in update.items()]
    if isinstance(update, list | tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in update
    ):
        return list(update)
    raise LoopInputError(
        f"Command(update=...) must be a mapping of state keys to values (or a list of "
        f"(key, value) pairs); got {_shape(update)}. Nothing was stored"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_dict_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, Mapping) for v in value)


_KEY_TYPES: dict[str, tuple[str, Any]] = {
    "iteration": ("an int (agent calls to add; the key's reducer adds)", _is_int),
    "stop": ("True or False", lambda v: isinstance(v, bool)),
    "feedback": ("a list of strings (feedback texts to append)", _is_str_list),
    "records": ("a list of iteration records (mappings) to append", _is_dict_list),
    "stop_reason": ("a string or None", lambda v: v is None or isinstance(v, str)),
    "last_response": ("an AIMessage", lambda v: isinstance(v, AIMessage)),
    "selected_iteration": ("an int or None", lambda v: v is None or _is_int(v)),
    "selected_score": ("a number or None", lambda v: v is None or _is_number(v)),
    "agent_state": ("a mapping of a graph agent's state keys", lambda v: isinstance(v, Mapping)),
    "loop_init_ids": ("a list of message ids (strings)", _is_str_list),
    "started_at": ("a number (seconds since the epoch)", _is_number),
    "history_memory": ("a dict or None", lambda v: v is None or isinstance(v, dict)),
    "attempt_states": ("a list of mappings", _is_dict_list),
    "candidate_runs": ("a list of mappings", _is_dict_list),
    "agent_run": ("a mapping", lambda v: isinstance(v, Mapping)),
}
"""The loop's keys other than the messages, what an update must give, and a check."""


def check_update(pairs: list[tuple[str, Any]], where: str) -> None:
    """Refuse an update of a loop key with a value of the wrong type, before it is stored."""
    # stored, a value the key's reducer cannot take would break every later read of the thread
    for key, value in pairs:
        if key in ("messages", "init_messages"):
            try:
                _messages(key, value)
            except LoopInputError as error:
                raise LoopInputError(f"{where}: {error}. Nothing was stored") from error
            continue
        expected = _KEY_TYPES.get(key)
        if expected is not None and not expected[1](value):
            raise LoopInputError(
                f"{where}: the loop key {key!r} takes {expected[0]}; got {_shape(value)}. "
                f"Nothing was stored; the thread is as it was"
            )
