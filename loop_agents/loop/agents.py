"""Calling the wrapped agent and pulling its answer out of whatever it returns.

A compiled graph is given ``{"messages": [...]}`` and the state keys it takes beyond it
(`loop_agents.loop.agent_state`); a chat model, another runnable or a function (sync or
async) is given the list of messages.
"""

from __future__ import annotations

import inspect
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple, TypeAlias, TypeVar, cast

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.pregel import Pregel
from langgraph.pregel.protocol import PregelProtocol

from loop_agents.loop.agent_state import input_keys
from loop_agents.runtime._worker_threads import in_worker_thread
from loop_agents.runtime.sync_bridge import run_coroutine

AgentFunction: TypeAlias = Callable[[list[AnyMessage]], Any]
"""A plain function (sync or async) given the messages; returns an answer."""

AgentLike: TypeAlias = Runnable[Any, Any] | AgentFunction
"""Anything `create_loop_agent` accepts as the agent."""

ACCEPTED = "an AIMessage, a string, or a mapping with a 'messages' list that contains an AIMessage"


def describe(obj: object) -> str:
    """Return a short human name for a callable or runnable, for error messages."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    for attr in ("__name__", "__qualname__"):
        value = getattr(obj, attr, None)
        if isinstance(value, str):
            return value
    func = getattr(obj, "func", None)  # functools.partial
    if func is not None:
        return describe(func)
    return type(obj).__name__


def is_async_callable(func: object) -> bool:
    """Tell whether calling ``func`` returns an awaitable (async def, partials, __call__)."""
    while hasattr(func, "func"):  # functools.partial and similar wrappers
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def check_one_argument(role: str, func: object, expected: str, given: str, example: str) -> None:
    """Raise `TypeError` unless ``func`` is a runnable or takes one positional argument."""
    if isinstance(func, Runnable):
        return
    if not callable(func):
        raise TypeError(f"{role} must be {expected}; got {type(func).__name__}: {func!r:.80}")
    if isinstance(func, type):
        raise TypeError(
            f"{role} is the class {func.__qualname__}, not something that answers: pass an "
            f"instance of it, or a function of {given} ({example}), not the class itself"
        )
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        raise TypeError(
            f"{role} {describe(func)!r} cannot be called with one argument ({given}): its "
            f"signature is {signature} ({exc}). The loop calls it with {given} alone; "
            f"write it as {example}"
        ) from exc


def check_count(name: str, value: object, meaning: str) -> int:
    """``value`` if it is an int >= 1, else a `TypeError` or `ValueError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 1; got {type(value).__name__} {value!r:.40}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1 ({meaning}); got {value}")
    return value


class AgentInput(NamedTuple):
    """What one agent call is given: the messages, and a graph agent's state keys."""

    messages: list[AnyMessage]
    state: Mapping[str, Any]


class AgentReply(NamedTuple):
    """What one agent call gave: the messages it produced (its answer last), its state."""

    produced: list[AnyMessage]
    state: dict[str, Any]


# LangGraph warns when a graph without a checkpointer is given a durability, which the loop
# does on purpose (see `AgentCaller`)
warnings.filterwarnings(
    "ignore",
    message=r"`durability` has no effect when no checkpointer is present\.",
    category=UserWarning,
)


def without_own_checkpoints(agent: AgentLike) -> AgentLike:
    """A graph agent that would inherit the loop's checkpointer, made to keep none."""
    # its checkpoints would hold the whole conversation at every step; the loop saves it
    if isinstance(agent, Pregel) and agent.checkpointer is None:
        return cast(AgentLike, agent.copy(update={"checkpointer": False}))
    return agent


class AgentCaller:
    """Calls one wrapped agent, sync or async, and normalises what it returns."""

    def __init__(self, agent: AgentLike) -> None:
        check_one_argument(
            "agent",
            agent,
            "a compiled graph (e.g. create_agent(...)), a chat model, a Runnable or a function "
            "of a list of messages",
            "the list of messages",
            "def agent(messages): return 'answer'",
        )
        if callable(getattr(type(agent), "sharing_agent_state", None)):  # a LoopAgent:
            agent = cast(Any, agent).sharing_agent_state()  # its agent's state comes back too
        self.agent = without_own_checkpoints(agent)
        # a graph without checkpoints inherits a parent run's durability="sync" and then
        # fails waiting for a checkpoint it never saves: give it its own durability
        self._options: dict[str, Any] = {"durability": "async"} if self.agent is not agent else {}
        self.name = describe(agent)
        self._takes_state = isinstance(agent, Pregel | PregelProtocol)  # else: the list
        self.input_keys = input_keys(agent) if self._takes_state else frozenset()
        self._is_runnable = isinstance(agent, Runnable)
        self._is_async_function = not self._is_runnable and is_async_callable(agent)
        # typed once here rather than cast on every call
        self._runnable = cast(Runnable[Any, Any], self.agent)
        self._function = cast(Callable[[list[AnyMessage]], Any], self.agent)

    def _input(self, given: AgentInput) -> Any:
        if not self._takes_state:
            return given.messages
        return {**given.state, "messages": given.messages}

    def invoke(self, given: AgentInput, config: RunnableConfig) -> AgentReply:
        """Call the agent synchronously; return what it produced, its answer last."""
        given = given._replace(messages=encodable(given.messages))
        if self._is_runnable:
            result = self._runnable.invoke(self._input(given), config, **self._options)
        else:
            # an async function (or one returning an awaitable) runs on the background
            # event loop, so the loop's sync methods work with async agents too
            result = self._function(given.messages)
            if inspect.isawaitable(result):
                result = run_coroutine(_awaited(result))
        return self.reply(given.messages, result)

    async def ainvoke(self, given: AgentInput, config: RunnableConfig) -> AgentReply:
        """Call the agent asynchronously; return what it produced, its answer last."""
        given = given._replace(messages=encodable(given.messages))
        if self._is_runnable:
            result = await self._runnable.ainvoke(self._input(given), config, **self._options)
        elif self._is_async_function:
            result = await self._function(given.messages)
        else:
            result = await in_worker_thread(config, self._function, given.messages)
            if inspect.isawaitable(result):
                result = await result
        return self.reply(given.messages, result)

    def reply(self, sent: Sequence[AnyMessage], result: Any) -> AgentReply:
        """What the agent returned: the messages it produced (its answer last), its state.

        Raises:
            TypeError: the result holds no answer (see `ACCEPTED`).
        """
        state: dict[str, Any] = {}
        if self._takes_state and isinstance(result, Mapping):  # its keys other than messages
            state = {key: value for key, value in result.items() if key != "messages"}
        if isinstance(result, str):
            return AgentReply([AIMessage(content=result)], state)
        if isinstance(result, BaseMessage):
            produced: list[AnyMessage] = [cast(AnyMessage, result)]
        elif isinstance(result, Mapping) and isinstance(result.get("messages"), list):
            produced = _produced_by_call(sent, result["messages"], self.name)
        else:
            raise TypeError(f"agent {self.name!r} returned {_shape(result)}; expected {ACCEPTED}")
        produced = [
            cast(AnyMessage, message_chunk_to_message(m)) if isinstance(m, AIMessageChunk) else m
            for m in produced
        ]
        if not any(isinstance(m, AIMessage) for m in produced):
            kinds = ", ".join(type(m).__name__ for m in produced) or "no new messages"
            raise TypeError(
                f"agent {self.name!r} returned {kinds} but no AIMessage answer; expected {ACCEPTED}"
            )
        return AgentReply(produced, state)


def _produced_by_call(
    sent: Sequence[AnyMessage], returned: Sequence[Any], name: str
) -> list[AnyMessage]:
    """The messages in a graph-style result that were not in what the agent was sent."""
    try:
        messages = cast(list[AnyMessage], convert_to_messages(returned))
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise TypeError(
            f"agent {name!r} returned a 'messages' list that is not messages ({exc}); "
            f"expected {ACCEPTED}"
        ) from exc
    sent_by_id = {m.id: m for m in sent if m.id is not None}
    if len(messages) >= len(sent) and all(
        a is b or (a.id is not None and a.id == b.id and a == b)
        for a, b in zip(messages, sent, strict=False)
    ):
        return messages[len(sent) :]
    return [m for m in messages if m.id is None or sent_by_id.get(m.id) != m]


def _shape(result: Any) -> str:
    if isinstance(result, Mapping):
        return f"a mapping with keys {sorted(map(str, result))}"
    return f"{type(result).__name__} {result!r:.80}"


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


_SURROGATE = re.compile("[\ud800-\udfff]")  # text no UTF-8 encoder accepts
Message = TypeVar("Message", bound=BaseMessage)


def encodable(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with lone surrogates (no HTTP client encodes them) replaced by U+FFFD."""
    mended: list[Message] | None = None
    for index, message in enumerate(messages):
        content = message.content
        if type(content) is str and content.isascii():  # the common case, at C speed
            continue
        content = _mended(content)
        if content is not message.content:
            if mended is None:
                mended = list(messages)
            mended[index] = message.model_copy(update={"content": content})
    return mended if mended is not None else cast(list[Message], messages)


def _mended(content: Any) -> Any:
    if isinstance(content, str):
        if content.isascii() or not _SURROGATE.search(content):  # isascii: a fast C scan
            return content
        return _SURROGATE.sub("\ufffd", content)
    if isinstance(content, list):
        parts = [_mended(part) for part in content]
        return parts if any(p is not q for p, q in zip(parts, content, strict=True)) else content
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        text = _mended(content["text"])
        return {**content, "text": text} if text is not content["text"] else content
    return content


def with_fresh_ids(produced: list[AnyMessage], history: Sequence[AnyMessage]) -> list[AnyMessage]:
    """``produced`` with a new id for every message whose id is already used."""
    # add_messages would replace the earlier message (caches and some fakes reuse ids)
    used: set[str | None] = set(map(attrgetter("id"), history))
    fresh: list[AnyMessage] = []
    for message in produced:
        if message.id is None or message.id in used:
            message = message.model_copy(update={"id": str(uuid.uuid4())})
        used.add(message.id)
        fresh.append(message)
    return fresh


def answer_of(produced: Sequence[AnyMessage]) -> AIMessage:
    """The answer among the messages an agent produced: its last AI message (`ValueError`: none)."""
    for message in reversed(produced):
        if isinstance(message, AIMessage):
            return message
    raise ValueError("the agent produced no AIMessage answer")
