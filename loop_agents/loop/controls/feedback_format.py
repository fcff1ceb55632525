"""How the feedback is put to the agent: `FeedbackStyle`, the control of ``feedback_format``.

The loop's default puts the evaluator's feedback to the agent as a review of its previous
answer, fenced so the feedback cannot pose as instructions (`loop_agents.loop.feedback`).
``feedback_format=`` changes the message: a template with ``{feedback}``, ``{iteration}``
and ``{fence}``, or a function ``(text, iteration) -> str | HumanMessage``.
"""

from __future__ import annotations

from loop_agents.loop.controls.base import LoopControl, Outcome
from loop_agents.loop.feedback import (
    DEFAULT_FEEDBACK_FORMAT,
    FeedbackFormat,
    check_feedback_format,
    feedback_message,
)


class FeedbackStyle(LoopControl):
    """The message the agent reads after a verdict that asks for another attempt.

    Args:
        feedback_format: A template or a function (see `FeedbackFormat`).

    Raises:
        TypeError: a format of the wrong kind.
        ValueError: a template without ``{feedback}``.

    Example:
        ```python
        plain = FeedbackStyle("{feedback}")
        loop = create_loop_agent(agent, judge, 5, controls=[plain])
        ```

    """

    name = "feedback_format"

    def __init__(self, feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT) -> None:
        """Check the format."""
        self.feedback_format = check_feedback_format(feedback_format)

    @property
    def active(self) -> bool:
        """Whether the format is not the default."""
        return self.feedback_format != DEFAULT_FEEDBACK_FORMAT

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Write the message the agent reads if the loop goes on."""
        if not outcome.stop:
            outcome.message = feedback_message(
                outcome.feedback_text,
                iteration=outcome.iteration,
                feedback_format=self.feedback_format,
            )
        return outcome
