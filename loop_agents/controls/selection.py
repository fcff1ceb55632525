"""Which attempt is the loop's answer: `AnswerSelection` (docs/stopping.md).

A best attempt that is not the last is appended again to ``messages`` (a marked copy,
without ``usage_metadata``), so the conversation ends with the loop's answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from loop_agents.loop.protocol import LoopControl, Stage
from loop_agents.loop.records import Selection, check_select, choose
from loop_agents.loop.state import IterationRecord


class AnswerSelection(LoopControl):
    """Which attempt is the loop's answer: ``"last"`` (as without the control) or ``"best"``.

    ``"best"``: the highest score (the later on a tie; the last when none has a score).

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 5, controls=[AnswerSelection("best")])
        ```
    """

    name = "select"
    stage = Stage.CHOICE
    claims = frozenset({"choice"})

    def __init__(self, select: Selection = "last") -> None:
        self.select = check_select(select)

    def choose(self, records: Sequence[IterationRecord]) -> IterationRecord | None:
        """The best-scored answer (``"best"``), else the last."""
        return choose(records, self.select)
