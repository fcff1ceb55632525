"""Criteria up front: the evaluator's criteria in the agent's first prompt.

Every ready-made evaluator says what it checks in one attribute, ``criteria`` (a text,
or ``None`` when it has nothing to say): `llm_judge` its instructions (the rubric),
`rule` and `text_rule` their ``description`` (default: the check's docstring, or a
text rule's fixed feedback), `command_check` its command, `xiangjianhuan_form` the
form, and `all_of` / `panel` their members' criteria, each under the member's name.
A function of yours may carry one too (``evaluate.criteria = "..."``). `criteria_of`
reads it.

With ``create_loop_agent(..., controls=[Criteria()])`` the criteria are shown to the agent
before its first attempt, so that the first answer already aims at them (as Microsoft
Agent Framework's ``with_judge`` does): when a loop starts, one user message holding
them (fenced, marked with `CRITERIA_KEY`) is added after the request, and it is part
of the loop's request (``init_messages``): every history policy sends it, every
iteration, and it is never added twice. ``Criteria("...")`` gives the text yourself
(instead of the evaluator's). A later loop on the same thread does not repeat
criteria the conversation already holds.
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
"""The ``name`` and ``lc_source`` of the criteria message (an injected message, see
`loop_agents.loop.feedback.injected`)."""

CRITERIA_FORMAT = (
    "Your answer will be judged by these criteria, quoted between the {fence} lines:"
    "\n\n{fence}criteria\n{criteria}\n{fence}\n\nAim to meet them in your answer."
)
"""The text of the criteria message."""


def criteria_note(text: str) -> str:
    """The criteria ``text`` as the agent reads it: a short preamble and the fenced text.

    Example:
        ```python
        print(criteria_note("At most 280 characters."))
        ```

    """
    return CRITERIA_FORMAT.format(fence=fence_for(text), criteria=text)


def criteria_message(text: str, request_ids: Sequence[str | None] = ()) -> HumanMessage:
    """The marked user message that shows ``text`` to the agent.

    Its id is derived from the text and the request's ids, so building it again for the
    same loop (a node run again) gives the same message.

    Example:
        ```python
        message = criteria_message("At most 280 characters.")
        assert is_criteria(message)
        ```

    """
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
    """The criteria in the agent's first prompt: what its answers will be judged by.

    When a loop starts, a marked user message after the request shows the agent the
    criteria: ``text``, or the evaluator's own (its ``criteria`` attribute: an
    ``llm_judge``'s instructions, a rule's description, ...).

    Args:
        text: The criteria to show; ``None`` (the default): the evaluator's.

    Raises:
        TypeError: a text that is not a non-empty string.
        ValueError: (when the loop is built) no text, and an evaluator that states no
            criteria.

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
        """Check the text."""
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
