"""Several first answers, then repair of the best: `DiverseFirst`.

At the same budget of answers, a few independent first samples then repair of the best
beat a long chain of repairs (Olausson et al., 2024). The user guide: ``docs/strategies.md``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from loop_agents.controls.candidates import Candidates
from loop_agents.loop.protocol import AgentCall


class DiverseFirst(Candidates):
    """k first answers in the loop's first iteration (as `Candidates`), then one repair each.

    A loop with ``max_iterations=m`` writes at most ``k + m - 1`` answers.

    Args:
        k: First answers (2 to 64; 1 would be the plain loop).
        temperature: With a chat-model agent: the temperature of every first answer (a
            number) or of each (k numbers); the copies of the model never use an LLM cache.

    Example:
        ```python
        loop = create_loop_agent(model, judge, 3, controls=[DiverseFirst(3)])
        ```
    """

    name = "diverse_first"
    _count = "k"

    def __init__(self, k: int = 2, *, temperature: float | Sequence[float] | None = None) -> None:
        super().__init__(k, temperature=temperature)
        if self.k < 2:
            raise ValueError(
                f"DiverseFirst(k=) makes k first answers and needs k >= 2 (k=1 is the plain "
                f"loop: leave the control out); got k={k}"
            )

    def around_agent(self, call: AgentCall) -> Generator[Any, Any, Any]:
        """K calls at once in the loop's first iteration; the call as it is afterwards."""
        if call.iteration > 1:
            return (yield call)
        return (yield from super().around_agent(call))

    def agent_calls_at_most(self, max_iterations: int) -> int:
        """``k`` first answers, then one per iteration."""
        return max_iterations + self.k - 1
