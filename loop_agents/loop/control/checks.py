"""Checking the loop-control options of `create_loop_agent` into one `LoopControls`."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from loop_agents.loop._numbers import describe_number, finite_float
from loop_agents.loop.control.advice import check_advisor
from loop_agents.loop.control.agent_errors import OnAgentError, check_on_agent_error
from loop_agents.loop.control.budgets import PriceTable, check_prices
from loop_agents.loop.control.candidates import check_candidate_temperature, check_candidates
from loop_agents.loop.control.criteria import check_criteria


@dataclass(frozen=True)
class LoopControls:
    """The loop-control options of `create_loop_agent`, checked (see `loop_agents.loop.graph`).

    Attributes:
        candidates: Answers per iteration (`loop_agents.loop.control.candidates`).
        candidate_temperature: Each candidate's temperature, or ``None``.
        threshold: The score at which a score-only verdict accepts
            (`loop_agents.loop.control.advice`).
        advisor: The model that writes feedback for a verdict without any, or ``None``.
        criteria: The criteria shown to the agent before its first attempt, or ``None``.
        prices: The price table (`loop_agents.loop.control.budgets`), or ``None``.
        on_agent_error: ``"raise"`` or ``"feedback"`` (`loop_agents.loop.control.agent_errors`).
        count_failed_attempts: Whether a failed attempt counts toward ``max_iterations``.

    """

    candidates: int = 1
    candidate_temperature: list[float] | None = None
    threshold: float | None = None
    advisor: Runnable[list[BaseMessage], object] | None = None
    criteria: str | None = None
    prices: PriceTable | None = None
    on_agent_error: OnAgentError = "raise"
    count_failed_attempts: bool = True


def check_threshold(threshold: object) -> float | None:
    """Validate ``threshold=``: a finite number, or ``None``."""
    if threshold is None:
        return None
    number = None if isinstance(threshold, bool) else finite_float(threshold)
    if number is None:
        raise TypeError(
            f"threshold must be a finite number (the score at which a score-only verdict "
            f"accepts) or None; got {describe_number(threshold)}"
        )
    return number


def check_controls(
    agent: object,
    evaluator: object,
    *,
    candidates: object,
    candidate_temperature: object,
    threshold: object,
    advisor: object,
    show_criteria: object,
    criteria: object,
    cost_budget: object,
    prices: object,
    on_agent_error: object,
    count_failed_attempts: object,
    max_agent_errors: object,
) -> LoopControls:
    """Check the options (the budgets themselves are checked by `StopPolicy.build`).

    Raises:
        TypeError: an option has the wrong type.
        ValueError: an option is out of range, or options do not fit together.

    Example:
        ```python
        controls = check_controls(agent, judge, candidates=3, candidate_temperature=None,
                                  threshold=None, advisor=None, show_criteria=False,
                                  criteria=None, cost_budget=None, prices=None,
                                  on_agent_error="raise", count_failed_attempts=True,
                                  max_agent_errors=3)
        ```

    """
    k = check_candidates(candidates)
    table = check_prices(prices)
    if cost_budget is not None and table is None:
        raise ValueError(
            "cost_budget needs prices= to price the model calls, e.g. "
            "prices={'gpt-5.4-mini': {'input': 0.25, 'output': 2.0}} (per million tokens)"
        )
    mode = check_on_agent_error(on_agent_error)
    if max_agent_errors is not None and (
        isinstance(max_agent_errors, bool) or not isinstance(max_agent_errors, int)
    ):
        raise TypeError(
            f"max_agent_errors must be an int >= 1 (failed attempts in a row) or None; got "
            f"{type(max_agent_errors).__name__} {max_agent_errors!r:.40}"
        )
    if isinstance(max_agent_errors, int) and max_agent_errors < 1:
        raise ValueError(f"max_agent_errors must be >= 1 (None: no limit); got {max_agent_errors}")
    if not isinstance(count_failed_attempts, bool):
        raise TypeError(
            f"count_failed_attempts must be True or False; got {count_failed_attempts!r}"
        )
    if mode == "raise" and not count_failed_attempts:
        raise ValueError(
            "count_failed_attempts=False applies to failed attempts that are fed back; pass "
            "on_agent_error='feedback' too (with 'raise' an agent error ends the loop)"
        )
    if mode == "feedback" and not count_failed_attempts and max_agent_errors is None:
        raise ValueError(
            "count_failed_attempts=False with max_agent_errors=None would let an agent that "
            "always fails loop forever; give max_agent_errors=N (failures in a row)"
        )
    return LoopControls(
        candidates=k,
        candidate_temperature=check_candidate_temperature(candidate_temperature, k, agent),
        threshold=check_threshold(threshold),
        advisor=check_advisor(advisor),
        criteria=check_criteria(show_criteria, criteria, evaluator),
        prices=PriceTable(table, strict=cost_budget is not None) if table is not None else None,
        on_agent_error=mode,
        count_failed_attempts=count_failed_attempts,
    )
