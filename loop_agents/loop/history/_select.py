"""Running a loop's history policy at the start of each iteration, and checking its choice.

`HistorySelector` is what the ``invoke_agent`` node calls: it splits the conversation
(`loop_history`), applies the policy (a built-in, a function of the user's or a
`StatefulHistory`, sync or async), checks what a user-defined policy chose (the request
is kept, tool calls stay with their results) and returns the state updates a stateful
policy asks for (its ``history_memory``) with the tokens its model calls used.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from loop_agents.loop._agent import describe
from loop_agents.loop._usage import NO_USAGE, CallUsage, counting_tokens
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat
from loop_agents.loop.history.policies import (
    HistoryFunction,
    HistoryPolicy,
    LoopHistory,
    builtin_policy,
    loop_history,
)
from loop_agents.loop.history.stateful import HistoryChoice, StatefulHistory
from loop_agents.loop.state import LoopState


@dataclass
class Selected:
    """What a history policy chose for one iteration.

    Attributes:
        messages: The messages to send to the agent.
        updates: State updates (a stateful policy's ``history_memory``).
        usage: The model calls the policy made (tokens, requests, by model).

    """

    messages: list[AnyMessage]
    updates: dict[str, Any] = field(default_factory=dict)
    usage: CallUsage = NO_USAGE

    @property
    def tokens(self) -> tuple[int, int]:
        """``(input, output)`` tokens of the model calls the policy made."""
        return self.usage.input_tokens, self.usage.output_tokens


class HistorySelector:
    """Applies one loop's history policy; ``invoke`` and ``ainvoke`` for the two node forms.

    Example:
        ```python
        selector = HistorySelector("last_attempt")
        sent = selector.invoke(state, updates, messages, config).messages
        ```

    """

    def __init__(
        self, history: HistoryPolicy, feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT
    ) -> None:
        self.full = history == "full"
        self.stateful = history if isinstance(history, StatefulHistory) else None
        self.function: HistoryFunction | None = None
        self.checked = False
        if isinstance(history, str):
            self.function = builtin_policy(cast(Any, history), feedback_format)
        elif self.stateful is None:
            self.function = cast(HistoryFunction, history)
            self.checked = True

    def invoke(
        self,
        state: LoopState,
        updates: dict[str, Any],
        messages: list[AnyMessage],
        config: RunnableConfig,
    ) -> Selected:
        """Choose the agent's input (sync); ``config`` is for a stateful policy's calls."""
        view = self._plain_choice(state, updates, messages)
        if isinstance(view, Selected):
            return view
        assert self.stateful is not None
        with counting_tokens() as used:
            choice = self.stateful.select(view, _memory(state, updates), config)
        return self._of_choice(choice, view, state, used.usage())

    async def ainvoke(
        self,
        state: LoopState,
        updates: dict[str, Any],
        messages: list[AnyMessage],
        config: RunnableConfig,
    ) -> Selected:
        """Choose the agent's input (async)."""
        view = self._plain_choice(state, updates, messages)
        if isinstance(view, Selected):
            return view
        assert self.stateful is not None
        with counting_tokens() as used:
            choice = await self.stateful.aselect(view, _memory(state, updates), config)
        return self._of_choice(choice, view, state, used.usage())

    def _plain_choice(
        self, state: LoopState, updates: dict[str, Any], messages: list[AnyMessage]
    ) -> Selected | LoopHistory:
        """The choice when no stateful policy is called (``"full"``, a function), else its view."""
        if self.full:
            return Selected(messages)
        view = loop_history(state, updates, messages)
        return view if self.stateful is not None else self._of_function(view)

    def _of_function(self, view: LoopHistory) -> Selected:
        assert self.function is not None
        if not self.checked:
            return Selected(cast(list[AnyMessage], self.function(view)))
        return Selected(checked_call(self.function, view))

    def _of_choice(
        self,
        choice: object,
        view: LoopHistory,
        state: LoopState,
        usage: CallUsage,
    ) -> Selected:
        assert self.stateful is not None
        where = f"history policy {describe(self.stateful)!r} at iteration {view['iteration']}"
        if not isinstance(choice, HistoryChoice):
            raise TypeError(
                f"{where} returned {type(choice).__name__} {choice!r:.60}; expected "
                f"HistoryChoice(messages, memory)"
            )
        if choice.memory is not None and not isinstance(choice.memory, dict):
            raise TypeError(
                f"{where} returned a memory of type {type(choice.memory).__name__}; expected "
                f"a dict (or None)"
            )
        sent = check_sent(choice.messages, view, where)
        updates: dict[str, Any] = {}
        if choice.memory != state.get("history_memory"):
            updates["history_memory"] = choice.memory
        return Selected(sent, updates, usage)


def _memory(state: LoopState, updates: dict[str, Any]) -> dict[str, Any] | None:
    """The stateful policy's memory for this iteration: none when a new loop starts."""
    if "init_messages" in updates:
        return None
    memory = state.get("history_memory")
    return memory if isinstance(memory, dict) else None


def checked_call(policy: HistoryFunction, view: LoopHistory) -> list[AnyMessage]:
    """Call a history function of the user's and check what it returned (`check_sent`)."""
    name = describe(policy)
    where = f"history function {name!r} at iteration {view['iteration']}"
    result: Any = policy(view)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise TypeError(f"{where} returned an awaitable; it must be a plain (sync) function")
    return check_sent(result, view, where)


def check_sent(result: object, view: LoopHistory, where: str) -> list[AnyMessage]:
    """Check what a history policy chose to send; return it as a list.

    Raises:
        TypeError: not a list of messages.
        ValueError: the request is left out, or a tool call is sent without its result
            (or a result without its call).

    """
    if isinstance(result, str | bytes) or not isinstance(result, Sequence):
        raise TypeError(
            f"{where} returned {type(result).__name__} {result!r:.60}; expected a list of "
            f"messages (e.g. [*history['request'], ...])"
        )
    sent = list(result)
    wrong = [type(m).__name__ for m in sent if not isinstance(m, BaseMessage)]
    if wrong:
        raise TypeError(
            f"{where} returned a list with {', '.join(sorted(set(wrong)))} items; every item "
            f"must be a message (BaseMessage)"
        )
    sent_ids = {id(m) for m in sent} | {m.id for m in sent if m.id is not None}
    missing = [m for m in view["request"] if id(m) not in sent_ids and m.id not in sent_ids]
    if missing:
        raise ValueError(
            f"{where} left out the loop's request ({_preview(missing)}); the request is "
            f"always sent: include history['request'] in what the function returns"
        )
    _check_tool_pairs(view["messages"], sent, where)
    return cast(list[AnyMessage], sent)


def _check_tool_pairs(
    conversation: Sequence[BaseMessage], sent: Sequence[BaseMessage], where: str
) -> None:
    """Raise `ValueError` when ``sent`` holds a tool call or a tool result without the other.

    Only pairs present in the conversation count: an AI message whose tool call has no
    result anywhere (e.g. a structured answer given as a tool call) may be sent alone.
    """
    calls_in = _tool_call_ids(conversation)
    results_in = _tool_result_ids(conversation)
    paired = calls_in & results_in
    calls, results = _tool_call_ids(sent) & paired, _tool_result_ids(sent) & paired
    if calls - results:
        call = sorted(calls - results)[0]
        raise ValueError(
            f"{where} sends the tool call {call!r} without its tool result; keep a tool "
            f"call and its result together (send both or neither)"
        )
    if results - calls:
        result = sorted(results - calls)[0]
        raise ValueError(
            f"{where} sends the tool result {result!r} without the AI message that called "
            f"the tool; keep a tool call and its result together (send both or neither)"
        )


def _tool_call_ids(messages: Sequence[BaseMessage]) -> set[str]:
    ids = (call["id"] for m in messages if isinstance(m, AIMessage) for call in m.tool_calls)
    return {i for i in ids if i}


def _tool_result_ids(messages: Sequence[BaseMessage]) -> set[str]:
    return {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}


def _preview(messages: Sequence[BaseMessage]) -> str:
    return ", ".join(f"{m.type} {m.text[:40]!r}" for m in messages)
