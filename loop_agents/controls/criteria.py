"""Criteria up front: the evaluator's criteria in the agent's first prompt (`Criteria`).

A marked user message after the request, part of it (``init_messages``), added once a thread.
What each evaluator states: docs/judges.md; the control: docs/loop-control.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage

from loop_agents.loop.agents import describe
from loop_agents.loop.evaluation import criteria_of
from loop_agents.loop.feedback import fence_for, injected
from loop_agents.loop.protocol import LoopControl, LoopSpec, Stage, Turn

CRITERIA_KEY = "loop_agents_criteria"
"""The ``additional_kwargs`` key that marks the criteria message."""

CRITERIA_SOURCE = "loop_criteria"
"""The ``name`` and ``lc_source`` of the criteria message (see `injected`)."""

CRITERIA_FORMAT = (
    "Your answer will be judged by these criteria, quoted between the {fence} lines:"
    "\n\n{fence}criteria\n{criteria}\n{fence}\n\nAim to meet them in your answer."
)
"""The text of the criteria message."""


def criteria_note(text: str) -> str:
    """The criteria ``text`` as the agent reads it: a short preamble and the fenced text.

    Example:
        ```python
        message = HumanMessage(criteria_note("At most 280 characters."))
        ```
    """
    return CRITERIA_FORMAT.format(fence=fence_for(text), criteria=text)


def criteria_message(text: str, request_ids: Sequence[str | None] = ()) -> HumanMessage:
    """The marked user message showing ``text``; the same id for the same loop and text."""
    key = f"loop_agents:criteria:{list(request_ids)!r}:{text}"
    message = HumanMessage(
        criteria_note(text),
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
        additional_kwargs={CRITERIA_KEY: text},
    )
    return injected(message, CRITERIA_SOURCE)


def is_criteria(message: BaseMessage) -> bool:
    """Whether ``message`` is a loop's criteria message.

    Example:
        ```python
        shown = [m for m in result["messages"] if is_criteria(m)]
        ```
    """
    return isinstance(message, HumanMessage) and isinstance(
        message.additional_kwargs.get(CRITERIA_KEY), str
    )


class Criteria(LoopControl):
    """The criteria in the agent's first prompt: ``text``, or the evaluator's own.

    Raises `TypeError` for a text that is not a non-empty string; `ValueError` when the
    loop is built, given no text and an evaluator that states no criteria.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 3, controls=[Criteria()])
        shown = Criteria("At most 280 characters.")
        ```
    """

    name = "criteria"
    stage = Stage.CRITERIA
    claims = frozenset({"criteria"})

    def __init__(self, text: str | None = None) -> None:
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise TypeError(
                f"Criteria(text=) must be a non-empty text (what the answer is judged by) or "
                f"None (the evaluator's criteria); got {type(text).__name__} {text!r:.40}"
            )
        self.text = text.strip() if isinstance(text, str) else None

    def bind(self, loop: LoopSpec) -> Criteria:
        """The criteria to show: ``text``, or the evaluator's (an error when it has none)."""
        if self.text is not None:
            return self
        found = criteria_of(loop.evaluator)
        if found is None:
            raise ValueError(
                f"control 'criteria': Criteria() shows the evaluator's criteria, and evaluator "
                f"{describe(loop.evaluator)!r} states none (it has no 'criteria' text); pass "
                f"Criteria('what the answer is judged by'), or set evaluator.criteria, or use "
                f"a ready-made evaluator (llm_judge, rule, ...)"
            )
        return Criteria(found)

    def shape_input(self, messages: list[AnyMessage], turn: Turn) -> list[AnyMessage]:
        """When a loop starts, add the criteria message after its request (once a thread)."""
        text = self.text
        if text is None or not turn.new_loop:  # None: not bound to a loop
            return messages
        if any(is_criteria(m) and m.additional_kwargs[CRITERIA_KEY] == text for m in messages):
            return messages
        message = criteria_message(text, [m.id for m in turn.request])
        turn.add_to_request(message)
        return [*messages, message]
