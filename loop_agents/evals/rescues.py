"""What an arm did after its first answer: the answers it rescued and the ones it broke.

The pass rate mixes two things: how often the first answer passes (the same for every
arm that starts from one sample of the task) and what the arm does afterwards. `Rescues`
counts the second part alone, from each result's per-attempt curve: of the tasks whose
first answer failed, how many the arm's final answer passes (*rescued*); of those whose
first answer passed, how many it does not (*broken*: a judge talked the model out of a
right answer, or a loop kept going past one). With ``same_first_answer`` every arm starts
from the same first answers, so the arms' rescues are counted on the same tasks.

Example:
    ```python
    for arm, found in rescues_of(report.results).items():
        print(arm, f"{found.rescued}/{found.failed_first}", found.broken)
    ```
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report imports this module
    from loop_agents.evals.report import TaskResult

__all__ = ["Rescues", "rescues_of"]


@dataclass(frozen=True)
class Rescues:
    """One arm's results after its first answer.

    Attributes:
        arm: The arm.
        failed_first: Tasks whose first answer failed.
        rescued: Of those, the tasks whose final answer passes.
        passed_first: Tasks whose first answer passed.
        broken: Of those, the tasks whose final answer fails.
    """

    arm: str
    failed_first: int
    rescued: int
    passed_first: int
    broken: int

    @property
    def rescue_rate(self) -> float:
        """The share of failed first answers the arm rescued (0 when none failed)."""
        return self.rescued / self.failed_first if self.failed_first else 0.0


def rescues_of(results: Iterable[TaskResult]) -> dict[str, Rescues]:
    """`Rescues` per arm, for the arms whose results record more than one step.

    Results without a per-attempt curve (an opaque agent, a file written before curves
    were kept) and one-answer arms (``single``) are left out.

    Example:
        ```python
        rescues_of(report.results)["loop"].rescued
        ```
    """
    counts: dict[str, list[int]] = {}
    for result in results:
        if len(result.by_attempt) < 2:
            continue
        found = counts.setdefault(result.arm, [0, 0, 0, 0])
        if result.by_attempt[0]:
            found[2] += 1
            found[3] += not result.passed
        else:
            found[0] += 1
            found[1] += result.passed
    return {arm: Rescues(arm, *found) for arm, found in counts.items()}
