"""Opening an iteration: a new loop or the next iteration of the running one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.types import Overwrite

from loop_agents.loop.agents import with_fresh_ids
from loop_agents.loop.state import LoopState


def wall_clock() -> float:
    """Seconds since the epoch: when a loop starts (a time budget counts from it)."""
    return time.time()


def start_iteration(state: LoopState) -> tuple[dict[str, Any], list[AnyMessage], int]:
    """The updates that open an iteration, the messages the agent is sent, its number.

    After a loop that ended on the thread (``stop_reason`` set) a new one starts: its
    counters restart, the conversation stays.
    """
    messages = list(state.get("messages") or [])
    previous_done = state.get("stop_reason") is not None
    if not previous_done and state.get("iteration", 0) > 0:
        return {"iteration": 1}, messages, state["iteration"] + 1
    init = _initial_messages(state, messages, previous_done)
    updates: dict[str, Any] = {
        "init_messages": init,
        "loop_init_ids": [cast(str, m.id) for m in init],
        "stop_reason": None,
        "started_at": wall_clock(),
        "selected_iteration": None,
        "selected_score": None,
    }
    if previous_done:
        updates |= {
            "iteration": Overwrite(1),
            "feedback": Overwrite([]),
            "records": Overwrite([]),
            "attempt_states": Overwrite([]),
            "stop": False,
        }
    else:
        updates["iteration"] = 1
    if not messages:
        updates["messages"] = init
        messages = list(init)
    return updates, messages, 1


def _initial_messages(
    state: LoopState, messages: list[AnyMessage], previous_done: bool
) -> list[AnyMessage]:
    given = list(state.get("init_messages") or [])
    if previous_done:
        recorded = state.get("loop_init_ids") or []
        if not given or [m.id for m in given] == recorded:
            given = _after_previous_answer(messages, state.get("last_response"))
    elif not given:
        given = messages
    if not given:
        raise ValueError(
            "a loop needs a request to start from: pass {'messages': [HumanMessage(...)]} "
            "(or the seed form {'init_messages': [...], 'messages': [...]}) with at least "
            "one message"
        )
    return with_fresh_ids(given, ()) if any(m.id is None for m in given) else given


def _after_previous_answer(
    messages: Sequence[AnyMessage], answer: AIMessage | None
) -> list[AnyMessage]:
    ids = [m.id for m in messages]
    if answer is not None and answer.id in ids:
        return list(messages[ids.index(answer.id) + 1 :])
    last_ai = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
    return list(messages[last_ai + 1 :])
