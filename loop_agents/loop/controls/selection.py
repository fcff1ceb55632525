"""Which attempt is the loop's answer: `AnswerSelection`, the control of ``select``.

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

from loop_agents.loop.controls.base import LoopControl, Outcome, Stage
from loop_agents.loop.records import SELECTED_KEY, record_answer, selected_iteration_of
from loop_agents.loop.state import IterationRecord

Selection = Literal["last", "best"]
"""How the loop's answer is chosen: the ``last`` attempt or the ``best``-scoring one."""


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
            best: IterationRecord = max(reversed(scored), key=lambda r: r["score"] or 0.0)
            return best
    return answered[-1] if answered else None


def answer_copy(record: IterationRecord, state: Mapping[str, Any]) -> BaseMessage:
    """A marked copy of ``record``'s answer, with a fresh id, to end the conversation with.

    It carries no ``usage_metadata``: its tokens were counted when it was produced.
    """
    answer = record_answer(record, state)
    return answer.model_copy(
        update={
            "id": str(uuid.uuid4()),
            "additional_kwargs": {
                **answer.additional_kwargs,
                SELECTED_KEY: {"iteration": record["iteration"]},
            },
            "usage_metadata": None,
        }
    )


class AnswerSelection(LoopControl):
    """Which attempt is the loop's answer: ``select="last"`` or ``"best"`` (see above).

    Args:
        select: ``"last"`` or ``"best"``.

    Raises:
        ValueError: anything else.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 5, controls=[AnswerSelection("best")])
        ```

    """

    name = "select"
    stage = Stage.CHOICE
    claims = frozenset({"choice"})

    def __init__(self, select: Selection = "last") -> None:
        """Check ``select``."""
        self.select = check_select(select)

    def choose(self, records: Sequence[IterationRecord]) -> IterationRecord | None:
        """The best-scored answer (``"best"``), else the last."""
        return choose(records, self.select)


class KeptAnswers(LoopControl):
    """Every record keeps its answer (``record["answer"]``), for a conversation that changes.

    A host adds it when the loop's messages may not keep every attempt: `LoopMiddleware`
    (another middleware may rewrite the conversation, as a summary does) and
    ``output_mode="last_message"`` (the attempts leave ``messages`` when the loop ends).
    The answer is then read from the record when it is chosen, or shown.
    """

    name = "kept_answers"
    stage = Stage.CHOICE
    claims = frozenset({"kept_answers"})

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Keep the iteration's answer in its record."""
        answer = outcome.answer
        if answer is not None:
            outcome.extra["answer"] = answer
        return outcome


__all__ = [
    "SELECTED_KEY",
    "AnswerSelection",
    "KeptAnswers",
    "Selection",
    "answer_copy",
    "check_select",
    "choose",
    "selected_iteration_of",
]
