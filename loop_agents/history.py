"""History policies: what the agent is sent on each iteration of a loop.

The loop's state always keeps the whole conversation in ``messages``; a history policy
only chooses what the agent is *sent*. `create_loop_agent` takes it as ``history=``:

- ``"full"`` (the default): the whole conversation, every attempt and its feedback. The
  prompt only ever grows at its end, so provider-side prompt caching keeps working, but
  the tokens sent over a loop grow with the square of its iterations.
- ``"last_attempt"``: the request, the latest attempt (with its tool calls and tool
  results) and the feedback on it. What is sent stays about the same size every
  iteration.
- ``"feedback_log"``: the request and one user message that lists the feedback on every
  earlier attempt, oldest first (see `feedback_log_message`); no earlier attempt is
  sent, so each iteration starts fresh.
- a function of `LoopHistory` returning the messages to send, for anything else.

Every built-in policy keeps the loop's request, and drops an attempt only as a whole: a
tool call is never separated from its tool result. A message that was added to the
conversation during the loop and is neither an answer, a tool message nor feedback (for
instance an instruction added with ``update_state`` before a forked iteration) is kept
where it is.

A second run on the same thread (a checkpointer, a new user message) starts a new loop on
the same conversation. Its *request* is the new loop's ``init_messages`` (the new user
turn); its attempts are the answers of this loop only. The turns before it, ``earlier``
in `LoopHistory`, are the conversation the new request may refer to: ``"full"`` sends
them as they are, ``"last_attempt"`` and ``"feedback_log"`` send them as the user saw
them (`without_rejected_attempts`: each earlier loop reduced to its request and its final
answer).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias, TypedDict, cast, get_args

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langgraph.types import Overwrite

from loop_agents._agent import describe, is_async_callable
from loop_agents.feedback import FEEDBACK_KEY, is_feedback
from loop_agents.records import answer_id_of
from loop_agents.selection import selected_iteration_of
from loop_agents.state import IterationRecord, LoopState

HistoryName: TypeAlias = Literal["full", "last_attempt", "feedback_log"]
"""The built-in history policies."""

HISTORY_NAMES: tuple[str, ...] = get_args(HistoryName)


class Attempt(TypedDict):
    """One earlier attempt of the current loop.

    Attributes:
        iteration: The iteration of the attempt, starting at 1.
        messages: The messages between the previous feedback (or the request) and the
            feedback on this attempt: what the agent produced (tool calls, tool results,
            the answer last), preceded by any message added to the conversation before
            the attempt.
        feedback: The feedback message on the attempt (a marked ``HumanMessage``).

    """

    iteration: int
    messages: list[AnyMessage]
    feedback: HumanMessage


class LoopHistory(TypedDict):
    """What a history function is given at the start of each iteration.

    ``earlier + request + [every attempt's messages and feedback] + pending`` is the whole
    conversation, ``messages``, in order.

    Attributes:
        iteration: The iteration about to run (1 for the first).
        messages: The whole conversation: what the ``"full"`` policy sends.
        earlier: The conversation before this loop's request, as stored (empty on a
            thread's first loop; on a later run, the earlier turns with every attempt
            and feedback of earlier loops).
        request: This loop's request: its ``init_messages`` as they are in
            ``messages``.
        attempts: This loop's earlier attempts, oldest first (empty in iteration 1).
        pending: Messages after the latest feedback (or after the request in iteration
            1); usually empty, they hold what was added to the conversation before this
            iteration, e.g. with ``update_state``.
        feedback: The feedback texts of ``attempts``, oldest first.

    """

    iteration: int
    messages: list[AnyMessage]
    earlier: list[AnyMessage]
    request: list[AnyMessage]
    attempts: list[Attempt]
    pending: list[AnyMessage]
    feedback: list[str]


HistoryFunction: TypeAlias = Callable[[LoopHistory], Sequence[BaseMessage]]
"""A function choosing what the agent is sent, from the `LoopHistory` of an iteration."""

HistoryPolicy: TypeAlias = HistoryName | HistoryFunction
"""What ``history=`` accepts: a built-in policy's name or a `HistoryFunction`."""

SelectMessages: TypeAlias = Callable[
    [LoopState, dict[str, Any], list[AnyMessage]], list[AnyMessage]
]


# -- the policies ------------------------------------------------------------------------


def full(history: LoopHistory) -> list[AnyMessage]:
    """The ``"full"`` policy: the whole conversation.

    Example:
        ```python
        assert full(history) == history["messages"]
        ```

    """
    return history["messages"]


def last_attempt(history: LoopHistory) -> list[AnyMessage]:
    """The ``"last_attempt"`` policy: the request, the latest attempt and its feedback.

    Sends ``without_rejected_attempts(earlier)``, the request, the latest attempt's
    messages (tool calls and results included) and its feedback message, then
    ``pending``. Messages added during the loop that are not answers, tool messages or
    feedback are kept where they were.

    Example:
        ```python
        loop = create_loop_agent(agent, evaluate, 6, history="last_attempt")
        ```

    """
    attempts = history["attempts"]
    sent = [*without_rejected_attempts(history["earlier"]), *history["request"]]
    for attempt in attempts[:-1]:
        sent += _added(attempt["messages"])
    if attempts:
        sent += [*attempts[-1]["messages"], attempts[-1]["feedback"]]
    return [*sent, *history["pending"]]


def feedback_log(history: LoopHistory) -> list[AnyMessage]:
    """The ``"feedback_log"`` policy: the request and a log of all feedback, no attempts.

    Sends ``without_rejected_attempts(earlier)``, the request, then (from iteration 2
    on) one `feedback_log_message` listing the feedback on every earlier attempt, then
    ``pending``. No earlier attempt is sent. Messages added during the loop that are not
    answers, tool messages or feedback are kept, before the log.

    Example:
        ```python
        loop = create_loop_agent(agent, evaluate, 6, history="feedback_log")
        ```

    """
    attempts = history["attempts"]
    sent = [*without_rejected_attempts(history["earlier"]), *history["request"]]
    for attempt in attempts:
        sent += _added(attempt["messages"])
    if attempts:
        sent.append(feedback_log_message(history["feedback"]))
    return [*sent, *history["pending"]]


BUILT_IN: dict[str, HistoryFunction] = {
    "full": full,
    "last_attempt": last_attempt,
    "feedback_log": feedback_log,
}

FEEDBACK_LOG_HEADER = "Feedback on your earlier attempts at this request (not shown), oldest first:"
"""The first line of a `feedback_log_message`."""


def feedback_log_message(feedback: Sequence[str]) -> HumanMessage:
    """The user message of the ``"feedback_log"`` policy: every feedback, oldest first.

    Its text is `FEEDBACK_LOG_HEADER` followed by one paragraph per feedback,
    ``"Attempt N: <feedback>"``. It is marked as loop feedback (`is_feedback` is true;
    the mark names the iterations it covers) and has an id of its own. It is only sent
    to the agent, never stored in the loop's state.

    Args:
        feedback: The feedback texts, oldest first (at least one).

    Raises:
        ValueError: ``feedback`` is empty.

    Example:
        ```python
        message = feedback_log_message(["Too long.", "Mention the date."])
        print(message.text)
        # Feedback on your earlier attempts at this request (not shown), oldest first:
        #
        # Attempt 1: Too long.
        #
        # Attempt 2: Mention the date.
        ```

    """
    if not feedback:
        raise ValueError("feedback_log_message needs at least one feedback text; got none")
    entries = "\n\n".join(f"Attempt {i}: {text}" for i, text in enumerate(feedback, 1))
    return HumanMessage(
        content=f"{FEEDBACK_LOG_HEADER}\n\n{entries}",
        id=str(uuid.uuid4()),
        additional_kwargs={
            FEEDBACK_KEY: {
                "iteration": len(feedback),
                "iterations": list(range(1, len(feedback) + 1)),
            }
        },
    )


def without_rejected_attempts(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """A conversation as the user saw it: every loop reduced to its request and answer.

    Each run of agent messages (AI and tool messages and loop feedback) between two user
    turns is reduced to what came after its last feedback message: the final attempt,
    with its tool calls and results. When that ends with a copy of a selected answer
    (``select="best"``), only the copy is kept. Runs without feedback, and every other
    message, are kept as they are.

    Example:
        ```python
        # [request, answer 1, feedback 1, answer 2]  ->  [request, answer 2]
        compact = without_rejected_attempts(result["messages"])
        ```

    """
    kept: list[AnyMessage] = []
    run: list[AnyMessage] = []
    for message in messages:
        if _is_agent_side(message):
            run.append(message)
            continue
        kept += _final_attempt(run)
        run = []
        kept.append(message)
    return kept + _final_attempt(run)


# -- building what the agent is sent -------------------------------------------------------


def check_history(history: object) -> HistoryPolicy:
    """Validate the ``history`` option of `create_loop_agent`.

    Raises:
        ValueError: an unknown policy name.
        TypeError: neither a name nor a synchronous function.

    Example:
        ```python
        check_history("last_attempt")  # returns it
        check_history("last")  # ValueError naming the policies
        ```

    """
    if isinstance(history, str):
        if history not in HISTORY_NAMES:
            raise ValueError(
                f"history must be one of {', '.join(map(repr, HISTORY_NAMES))} or a function "
                f"of LoopHistory returning the messages to send; got {history!r}"
            )
        return cast(HistoryName, history)
    if not callable(history):
        raise TypeError(
            f"history must be one of {', '.join(map(repr, HISTORY_NAMES))} or a function of "
            f"LoopHistory returning the messages to send; got {type(history).__name__} "
            f"{history!r:.60}"
        )
    if is_async_callable(history):
        raise TypeError(
            f"history function {describe(history)!r} is async; it must be a plain (sync) "
            f"function of LoopHistory returning a list of messages"
        )
    return cast(HistoryFunction, history)


def message_selector(history: HistoryPolicy) -> SelectMessages | None:
    """What `LoopNodes` calls to choose the agent's input; ``None`` for ``"full"``.

    The selector is given the state, the updates that open the iteration and the whole
    conversation, and returns the messages to send (checked, for a function of yours).

    Example:
        ```python
        select = message_selector("last_attempt")
        sent = select(state, updates, messages)
        ```

    """
    if history == "full":
        return None
    if isinstance(history, str):
        policy = BUILT_IN[history]
        checked = False
    else:
        policy = history
        checked = True

    def select(
        state: LoopState, updates: dict[str, Any], messages: list[AnyMessage]
    ) -> list[AnyMessage]:
        view = loop_history(state, updates, messages)
        if not checked:
            return cast(list[AnyMessage], policy(view))
        return _checked(policy, view)

    return select


def loop_history(
    state: LoopState, updates: dict[str, Any], messages: list[AnyMessage]
) -> LoopHistory:
    """Split the conversation for the iteration the ``updates`` open (see `LoopHistory`).

    Args:
        state: The loop's state before the iteration.
        updates: The updates that open the iteration (``init_messages`` in them when a
            new loop starts).
        messages: The whole conversation the iteration starts from.

    Example:
        ```python
        view = loop_history(state, {"iteration": 1}, list(state["messages"]))
        print(len(view["attempts"]), view["feedback"])
        ```

    """
    new_loop = "init_messages" in updates
    init = list(updates["init_messages"] if new_loop else state.get("init_messages") or [])
    ids = {m.id for m in init if m.id is not None} | set(
        updates.get("loop_init_ids") or state.get("loop_init_ids") or []
    )
    records: list[IterationRecord] = [] if new_loop else list(state.get("records") or [])
    start, end = _request_span(messages, init, ids, records)
    part = messages[end:]
    marks = [
        i
        for i, m in enumerate(part)
        if isinstance(m, HumanMessage) and FEEDBACK_KEY in m.additional_kwargs
    ]
    attempts: list[Attempt] = []
    after = 0
    for number, index in enumerate(marks, 1):
        feedback = cast(HumanMessage, part[index])
        attempts.append({"iteration": number, "messages": part[after:index], "feedback": feedback})
        after = index + 1
    iteration = updates["iteration"]
    return {
        "iteration": 1 if isinstance(iteration, Overwrite) else state.get("iteration", 0) + 1,
        "messages": messages,
        "earlier": messages[:start],
        "request": messages[start:end],
        "attempts": attempts,
        "pending": part[after:],
        "feedback": [_text(a["feedback"]) for a in attempts],
    }


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


def _request_span(
    messages: Sequence[AnyMessage],
    init: Sequence[AnyMessage],
    ids: set[str | None],
    records: Sequence[IterationRecord],
) -> tuple[int, int]:
    """Where the loop's request is in ``messages``: ``(start, end)``, end exclusive.

    The request is found by the ids of ``init_messages`` (or, failing that, by their
    type and content); everything after it is this loop's. When it is not in the
    conversation, this loop's part starts at its first answer (with the tool traffic
    before it) and everything before that counts as the request; when that is not
    found either, the whole conversation does.
    """
    signatures = {(m.type, repr(m.content)) for m in init}

    def matches(message: AnyMessage) -> bool:
        return message.id in ids or (message.type, repr(message.content)) in signatures

    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id in ids), None)
    if last is None:
        last = next((i for i in range(len(messages) - 1, -1, -1) if matches(messages[i])), None)
    if last is not None:
        start = last
        while start > 0 and last - start + 1 < len(init) and matches(messages[start - 1]):
            start -= 1
        if not records or _index_of(messages, answer_id_of(records[0])) > last:
            return start, last + 1
    if records:
        first = _index_of(messages, answer_id_of(records[0]))
        if first < len(messages):
            while first > 0 and isinstance(messages[first - 1], AIMessage | ToolMessage):
                first -= 1
            return 0, first
    return 0, len(messages)


def _index_of(messages: Sequence[AnyMessage], message_id: str | None) -> int:
    return next((i for i, m in enumerate(messages) if m.id == message_id), len(messages))


def _is_agent_side(message: AnyMessage) -> bool:
    return isinstance(message, AIMessage | ToolMessage) or is_feedback(message)


def _added(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """The messages of an attempt that the agent did not produce (kept by every policy).

    An attempt's messages hold no feedback (feedback closes an attempt), so these are
    the ones that are neither AI nor tool messages.
    """
    return [m for m in messages if not isinstance(m, AIMessage | ToolMessage)]


def _final_attempt(run: list[AnyMessage]) -> list[AnyMessage]:
    last_feedback = max((i for i, m in enumerate(run) if is_feedback(m)), default=-1)
    if last_feedback < 0:
        return run
    final = run[last_feedback + 1 :]
    copies = [i for i, m in enumerate(final) if selected_iteration_of(m) is not None]
    return final[copies[-1] :] if copies else final


# -- checking what a history function returned ---------------------------------------------


def _checked(policy: HistoryFunction, view: LoopHistory) -> list[AnyMessage]:
    name = describe(policy)
    where = f"history function {name!r} at iteration {view['iteration']}"
    result: Any = policy(view)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise TypeError(f"{where} returned an awaitable; it must be a plain (sync) function")
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
