"""Stop on a plateau of scores: `Plateau`, the control of ``patience`` and ``min_delta``."""

from __future__ import annotations

from collections.abc import Sequence

from loop_agents.controls.options import check_count
from loop_agents.loop.protocol import LoopControl, Progress, Stage
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.numbers import describe_number, finite_float


def plateaued(records: Sequence[IterationRecord], *, patience: int, min_delta: float) -> bool:
    """Whether the last ``patience`` iterations after the first scored one brought no gain.

    A gain beats the best earlier score by at least ``min_delta`` (and at all); an
    unscored iteration after the first scored one is no gain (docs/stopping.md).

    Example:
        ```python
        plateaued(records, patience=2, min_delta=5)  # scores 70, 72, 71: True
        ```
    """
    best: float | None = None
    without_gain = 0
    for record in records:
        score = record["score"]
        if best is None:
            if score is not None:
                best = score
            continue
        if score is not None and score > best and score - best >= min_delta:
            best = score
            without_gain = 0
        else:
            without_gain += 1
    return best is not None and without_gain >= patience


class Plateau(LoopControl):
    """Stop with reason ``"plateau"`` after ``patience`` iterations without a gain.

    ``min_delta`` is the least gain that counts (default 0: any gain); see `plateaued`.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 10, controls=[Plateau(2, min_delta=5)])
        ```
    """

    name = "plateau"
    stage = Stage.STOP + 10
    claims = frozenset({"plateau"})

    def __init__(self, patience: int, *, min_delta: float = 0.0) -> None:
        meaning = "scored iterations without a gain"
        self.patience = check_count("Plateau(patience=)", patience, meaning)
        if isinstance(min_delta, bool) or not isinstance(min_delta, int | float):
            raise TypeError(f"Plateau(min_delta=) must be a number >= 0; got {min_delta!r:.40}")
        if finite_float(min_delta) is None or min_delta < 0:
            raise ValueError(
                f"Plateau(min_delta=) must be a finite number >= 0; got "
                f"{describe_number(min_delta)}"
            )
        self.min_delta = float(min_delta)

    def stop_reason(self, progress: Progress) -> str | None:
        """``"plateau"`` after ``patience`` scored iterations without a gain."""
        if plateaued(progress.records, patience=self.patience, min_delta=self.min_delta):
            return "plateau"
        return None
