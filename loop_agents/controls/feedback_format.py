"""How the feedback is put to the agent: `FeedbackStyle`, the loop's feedback format.

The default is a fenced review of the previous answer (`loop_agents.loop.feedback`);
docs/feedback.md has the templates, functions and ``FeedbackStyle("{feedback}")``.
"""

from __future__ import annotations

from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, check_feedback_format
from loop_agents.loop.protocol import LoopControl, Stage


class FeedbackStyle(LoopControl):
    """How every feedback turn is written (and ``"feedback_log"``'s quotes).

    ``feedback_format`` is a template with ``{feedback}`` (and ``{iteration}``,
    ``{fence}``) or a function ``(text, iteration) -> str | HumanMessage``.

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
        self.format = check_feedback_format(feedback_format)

    def feedback_format(self) -> FeedbackFormat:
        """The loop's feedback format: how every feedback turn is written."""
        return self.format
