"""How the feedback is put to the agent: `FeedbackStyle`, the loop's feedback format.

The loop's default puts the evaluator's feedback to the agent as a review of its previous
answer, fenced so the feedback cannot pose as instructions (`loop_agents.loop.feedback`).
``FeedbackStyle(format)`` changes every feedback turn, and the ``"feedback_log"`` history
policy's quotes: a template with ``{feedback}``, ``{iteration}`` and ``{fence}``, or a
function ``(text, iteration) -> str | HumanMessage``; ``FeedbackStyle("{feedback}")``
(`loop_agents.loop.feedback.PLAIN_FEEDBACK`) sends the evaluator's text as it is.
"""

from __future__ import annotations

from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, check_feedback_format
from loop_agents.loop.protocol import LoopControl, Stage


class FeedbackStyle(LoopControl):
    """How every feedback turn is written: the message the agent reads after a verdict.

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
    stage = Stage.FEEDBACK
    claims = frozenset({"feedback_format"})

    def __init__(self, feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT) -> None:
        """Check the format."""
        self.format = check_feedback_format(feedback_format)

    def feedback_format(self) -> FeedbackFormat:
        """The loop's feedback format: how every feedback turn is written."""
        return self.format


__all__ = ["FeedbackStyle"]
