"""Which attempt is the loop's answer: `AnswerSelection`.

With ``AnswerSelection("best")`` the loop's answer is the attempt with the highest score (the later
one on a tie); attempts without a score are not candidates, and when no attempt has a
score the last one is chosen. When the chosen attempt is not the last, a copy of it with
a fresh id is appended to ``messages`` and becomes ``last_response``, so the conversation
ends with the loop's answer while every attempt stays in the history. The copy is marked
(see `selected_iteration_of`) and carries no ``usage_metadata``: its tokens were counted
once, when it was first produced.
"""

from __future__ import annotations

from collections.abc import Sequence

from loop_agents.loop.protocol import LoopControl, Stage
from loop_agents.loop.records import Selection, check_select, choose
from loop_agents.loop.state import IterationRecord


class AnswerSelection(LoopControl):
    """Which attempt is the loop's answer: ``"last"`` (as without the control) or ``"best"``.

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


__all__ = ["AnswerSelection"]
