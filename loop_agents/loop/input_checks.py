"""What a loop accepts as input, checked before LangGraph runs anything.

A loop is called with ``{"messages": [...]}`` (optionally the seed's ``init_messages``
too), with ``None`` to resume the run saved on a thread, or with a LangGraph
``Command`` (``Command(resume=...)`` answers an interrupt such as a human review).
Anything else raises `LoopInputError`, naming the field, what was given and what is
expected, instead of an error from deep inside LangGraph or LangChain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, convert_to_messages
from langgraph.types import Command

INPUT_KEYS = ("messages", "init_messages")
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

    A `TypeError` (a value of the wrong type) and a `ValueError` (a value that is not
    accepted), so either ``except`` catches it.
    """


def _shape(value: object) -> str:
    if isinstance(value, Mapping):
        return f"a mapping with keys {sorted(map(str, value))}"
    return f"{type(value).__name__} {value!r:.80}"


def check_input(value: Any, *, nested: bool, checkpointer: bool) -> Any:
    """Check a loop's input; return it with its messages as LangChain messages.

    Args:
        value: What ``invoke``/``stream`` (or their async forms) were given.
        nested: The loop runs as a node of a parent graph (or inside its run): the
            input is the parent's state, its other keys are not the loop's business,
            and only ``messages``/``init_messages`` are checked when present.
        checkpointer: The loop saves its runs, so ``None`` (resume) and an input that
            adds no message to an existing conversation can make sense.

    Raises:
        LoopInputError: the input, or its ``messages``/``init_messages``, is not
            accepted; the message says what was given and what is expected.

    Example:
        ```python
        check_input({"messages": ["Hi"]}, nested=False, checkpointer=False)
        # {'messages': [HumanMessage('Hi')]}
        ```

    """
    if nested:
        if isinstance(value, Mapping):
            for key in INPUT_KEYS:
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
            f"a loop's input has the keys 'messages' and, optionally, 'init_messages'; "
            f"got unknown keys {unknown}. Example: {EXAMPLE}"
        )
    checked = {key: _messages(key, value[key]) for key in INPUT_KEYS if key in value}
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
    """``value`` of ``key`` as a list of messages, or `LoopInputError` saying why not.

    ``messages`` takes what LangGraph's ``add_messages`` takes (a list, or one message);
    ``init_messages`` has no reducer and must be a list.
    """
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
    """Reject a ``Command`` that carries nothing (LangGraph fails on it deep inside).

    ``Command(resume=None)`` is LangGraph's default, "no answer": it does not resume
    anything and LangGraph raises ``UnboundLocalError`` on it.

    Raises:
        LoopInputError: the command has no ``resume`` value, no ``update`` and no
            ``goto``.

    Example:
        ```python
        check_command(Command(resume=True))  # fine
        ```

    """
    if command.resume is None and command.update is None and not command.goto:
        raise LoopInputError(
            "Command(resume=None) carries no answer, so it resumes nothing. For a loop "
            f"paused at a human review: {HOW_TO_ANSWER} To continue a run that stopped "
            "on an error, call invoke(None, config); to start a new loop on the thread, "
            f"pass {EXAMPLE}. The thread is unchanged and still waits for its answer."
        )
