"""What the agent is sent: `History`, the control of the history policy.

A policy of the user's is checked (the request is kept, tool calls stay with their
results); a stateful one's memory is kept. The policies are in `loop_agents.loop.history`.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from loop_agents.loop.agents import describe
from loop_agents.loop.history.policies import (
    HistoryChoice,
    HistoryFunction,
    HistoryPolicy,
    LoopHistory,
    StatefulHistory,
    builtin_policy,
    check_history,
    loop_history,
)
from loop_agents.loop.protocol import LoopControl, Stage, Turn
from loop_agents.runtime.steps import Call, Measured


class History(LoopControl):
    """What the agent is sent each iteration (see `HistoryPolicy` and docs/history.md).

    ``history`` is ``"full"``, ``"last_attempt"``, ``"feedback_log"``, a function of
    `LoopHistory` or a `StatefulHistory` such as ``compacting(...)``.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 5, controls=[History("last_attempt")])
        ```
    """

    name = "history"
    stage = Stage.HISTORY
    claims = frozenset({"history"})

    def __init__(self, history: HistoryPolicy = "full") -> None:
        self.policy = policy = check_history(history)
        self.stateful = policy if isinstance(policy, StatefulHistory) else None
        plain = isinstance(policy, str) or self.stateful is not None
        self.function = None if plain else cast(HistoryFunction, policy)
        self.calls_models = self.stateful is not None  # a stateful policy may call models

    def shape_input(
        self, messages: list[AnyMessage], turn: Turn
    ) -> list[AnyMessage] | Generator[Call, Measured[Any], list[AnyMessage]]:
        """The messages the policy chooses from the conversation (for a repair only)."""
        if turn.retry_kind != "repair":  # the strategy builds what is sent: no summary to pay
            return messages
        view = loop_history(turn.state, turn.opened, messages)
        if self.stateful is not None:
            return self._stateful_choice(view, turn)
        if isinstance(self.policy, str):  # built in: the loop's own, unchecked
            policy = builtin_policy(cast(Any, self.policy), turn.feedback_format)
            return cast(list[AnyMessage], policy(view))
        return checked_call(cast(HistoryFunction, self.function), view)

    def _stateful_choice(
        self, view: LoopHistory, turn: Turn
    ) -> Generator[Call, Measured[Any], list[AnyMessage]]:
        policy = cast(StatefulHistory, self.stateful)
        where = f"history policy {describe(policy)!r} at iteration {view['iteration']}"
        memory = turn.memory

        def select(given: Any, config: RunnableConfig) -> dict[str, Any]:
            return _plain_choice(policy.select(view, memory, config), where)

        async def aselect(given: Any, config: RunnableConfig) -> dict[str, Any]:
            return _plain_choice(await policy.aselect(view, memory, config), where)

        reply = yield Call("compaction", select, aselect, None, turn.config_for("compaction"))
        choice = reply.value
        sent = check_sent(choice["messages"], view, where)
        if choice["memory"] != memory:
            turn.keep_memory(choice["memory"])
        return sent


def _plain_choice(choice: object, where: str) -> dict[str, Any]:  # a task's result, checked
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
    return {"messages": list(choice.messages), "memory": choice.memory}


def checked_call(policy: HistoryFunction, view: LoopHistory) -> list[AnyMessage]:
    """Call a history function of the user's; check what it returned (`check_sent`)."""
    where = f"history function {describe(policy)!r} at iteration {view['iteration']}"
    result: Any = policy(view)
    if inspect.iscoroutine(result):
        result.close()
    if inspect.isawaitable(result):
        raise TypeError(f"{where} returned an awaitable; it must be a plain (sync) function")
    return check_sent(result, view, where)


def check_sent(result: object, view: LoopHistory, where: str) -> list[AnyMessage]:
    """What a history policy chose to send, checked: messages, the request, whole tool pairs."""
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
        shown = ", ".join(f"{m.type} {m.text[:40]!r}" for m in missing)
        raise ValueError(
            f"{where} left out the loop's request ({shown}); the request is "
            f"always sent: include history['request'] in what the function returns"
        )
    _check_tool_pairs(view["messages"], sent, where)
    return cast(list[AnyMessage], sent)


def _check_tool_pairs(
    conversation: Sequence[BaseMessage], sent: Sequence[BaseMessage], where: str
) -> None:
    # only pairs of the conversation count: a tool call with no result anywhere (e.g. a
    # structured answer given as a tool call) may be sent alone
    calls_in, results_in = _tool_ids(conversation)
    calls, results = (ids & calls_in & results_in for ids in _tool_ids(sent))
    alone = [
        (calls - results, "the tool call {!r} without its tool result"),
        (results - calls, "the tool result {!r} without the AI message that called the tool"),
    ]
    for ids, what in alone:
        if ids:
            raise ValueError(
                f"{where} sends {what.format(sorted(ids)[0])}; keep a tool call and its result "
                f"together (send both or neither)"
            )


def _tool_ids(messages: Sequence[BaseMessage]) -> tuple[set[str], set[str]]:
    """The ids of the tool calls and of the tool results in ``messages``."""
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    return {i for i in calls if i}, {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
