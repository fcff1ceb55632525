"""Several first answers, then repair of the best: `DiverseFirst`.

At the same budget of answers, a few independent first samples followed by repair of
the best one beat a long chain of repairs of a single first answer (Olausson et al.,
*Is Self-Repair a Silver Bullet for Code Generation?*, 2024). With `DiverseFirst(k)`
the loop's first iteration makes k answers at once, exactly as ``candidates=k`` does
(each judged, the best kept, every one recorded in ``record["candidates"]``, each a
LangGraph task of its own); every later iteration makes one answer, a repair of the
answer kept so far. A loop with ``max_iterations=m`` then writes at most ``k + m - 1``
answers: give ``max_iterations = K - k + 1`` for a budget of K answers.

Example:
    ```python
    from loop_agents.loop.controls import DiverseFirst

    # a budget of 3 answers: 2 first samples, then 1 repair of the better one
    loop = create_loop_agent(model, tests, 2, controls=[DiverseFirst(2)])
    ```
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from loop_agents.loop.agents import AgentLike
from loop_agents.loop.controls.base import AgentCall
from loop_agents.loop.controls.candidates import Candidates


class DiverseFirst(Candidates):
    """k first answers in the loop's first iteration, then one repair per iteration.

    Args:
        k: First answers (2 to 64; 1 would be the plain loop).
        temperature: With a chat-model agent: the temperature of every first answer (a
            number) or of each (k numbers).
        agent: Only with ``temperature``, or when an LLM cache is set: the loop's agent,
            a chat model, whose copies (at each temperature, never answering from the
            cache) make the first answers. Without it every first answer is the loop's
            agent's own call.

    Raises:
        TypeError: an option of the wrong type.
        ValueError: ``k`` out of range.

    Example:
        ```python
        loop = create_loop_agent(model, judge, 3, controls=[DiverseFirst(3)])
        ```
    """

    name = "diverse_first"

    def __init__(
        self,
        k: int = 2,
        *,
        temperature: float | Sequence[float] | None = None,
        agent: AgentLike | None = None,
    ) -> None:
        """Check the options; build each first answer's agent."""
        super().__init__(k, temperature=temperature, agent=agent)
        if self.k < 2:
            raise ValueError(
                f"DiverseFirst(k) makes k first answers and needs k >= 2 (k=1 is the plain "
                f"loop: leave the control out); got k={k}"
            )

    def around_agent(self, call: AgentCall) -> Generator[Any, Any, Any]:
        """K calls at once in the loop's first iteration; the call as it is afterwards."""
        if call.iteration > 1:
            attempt = yield call
            return attempt
        return (yield from super().around_agent(call))

    def agent_calls_at_most(self, max_iterations: int) -> int:
        """``k`` first answers, then one per iteration."""
        return max_iterations + self.k - 1
