"""Which attempt is the loop's answer: the last one, or the best-scoring one.

With ``select="best"`` the loop's answer is the attempt with the highest score (the later
one on a tie); attempts without a score are not candidates, and when no attempt has a
score the last one is chosen. When the chosen attempt is not the last, a copy of it with
a fresh id is appended to ``messages`` and becomes ``last_response``, so the conversation
ends with the loop's answer while every attempt stays in the history. The copy is marked
(see `selected_iteration_of`) and carries no ``usage_metadata``: its tokens were counted
once, when it was first produced.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import BaseMessage

from loop_agents.loop.records import record_answer
from loop_agents.loop.state import IterationRecord

Selection = Literal["last", "best"]
"""How the loop's answer is chosen: the ``last`` attempt or the ``best``-scoring one."""

SELECTED_KEY = "loop_agents_selected"
"""The ``additional_kwargs`` key that marks the appended copy of a selected answer."""


def check_select(select: object) -> Selection:
    """Return ``select`` if it is ``"last"`` or ``"best"``, else raise ``ValueError``."""
    if select == "last" or select == "best":
        return select
    raise ValueError(
        f"select must be 'last' (the loop's answer is its last attempt) or 'best' (the "
        f"best-scoring attempt; needs an evaluator that gives scores); got {select!r}"
    )


def choose(records: Sequence[IterationRecord], select: Selection) -> IterationRecord | None:
    """The record of the attempt that is the loop's answer.

    Failed attempts (``on_agent_error="feedback"``: no answer) are never chosen; when
    every attempt failed there is none (``None``).

    Example:
        ```python
        chosen = choose(result["records"], "best")
        print(chosen["iteration"], chosen["score"])
        ```

    """
    if not records:
        raise ValueError("choose() needs at least one iteration record; got none")
    answered = [r for r in records if "error" not in r]
    if select == "best":
        scored = [r for r in answered if r["score"] is not None]
        if scored:
            # max() keeps the first maximum; reversed() makes ties go to the later one
            return max(reversed(scored), key=lambda r: r["score"] or 0.0)
    return answered[-1] if answered else None


def selection_updates(
    records: Sequence[IterationRecord], select: Selection, state: Mapping[str, Any]
) -> dict[str, Any]:
    """The state updates that record the loop's chosen answer when the loop ends.

    ``state`` is the loop's state, whose ``messages`` hold the chosen answer.
    """
    chosen = choose(records, select)
    if chosen is None:
        return {"selected_iteration": None, "selected_score": None}
    updates: dict[str, Any] = {
        "selected_iteration": chosen["iteration"],
        "selected_score": chosen["score"],
    }
    if chosen is not records[-1]:
        answer = record_answer(chosen, state)
        copy = answer.model_copy(
            update={
                "id": str(uuid.uuid4()),
                "additional_kwargs": {
                    **answer.additional_kwargs,
                    SELECTED_KEY: {"iteration": chosen["iteration"]},
                },
                "usage_metadata": None,
            }
        )
        updates["messages"] = [copy]
        updates["last_response"] = copy
    return updates


def selected_iteration_of(message: BaseMessage) -> int | None:
    """The iteration a message is the selected copy of, or ``None`` for other messages.

    Example:
        ```python
        final = result["messages"][-1]
        if selected_iteration_of(final) is not None:
            print("the loop's answer is the attempt of iteration", selected_iteration_of(final))
        ```

    """
    mark = message.additional_kwargs.get(SELECTED_KEY)
    if isinstance(mark, dict) and isinstance(mark.get("iteration"), int):
        return int(mark["iteration"])
    return None
