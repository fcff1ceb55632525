"""When a loop stops: acceptance, the iteration cap, a plateau, budgets, failing agents.

`StopPolicy` holds the stop options of `create_loop_agent` and decides, after each
evaluation, whether the loop ends and why (a `StopReason`). The rules, in the order they
are checked:

1. ``accepted``: the evaluator said stop.
2. ``agent_errors``: the agent failed ``max_agent_errors`` times in a row (with
   ``on_agent_error="feedback"``).
3. ``token_budget``: the tokens used in this loop (agent, evaluator, advisor and a
   history policy's model calls, from ``usage_metadata``) reached ``token_budget``.
4. ``request_budget``: the model calls of this loop reached ``request_budget``, or the
   next iteration, making as many calls as the latest, would pass it.
5. ``cost_budget``: the same for their cost by ``prices`` (see `loop_agents.loop.control.budgets`).
6. ``time_budget``: the loop's wall-clock time reached ``time_budget`` seconds.
7. ``plateau``: ``patience`` scored iterations in a row brought no gain of at least
   ``min_delta`` over the best score so far.
8. ``max_iterations``: the agent was called ``max_iterations`` times (failed attempts
   not counted with ``count_failed_attempts=False``).
9. ``recursion_limit``: the graph's step budget has no room for another iteration.

Budgets are checked after each evaluation, so the iteration that crosses a budget
finishes (its answer is judged and recorded) and no further iteration starts. The
request and cost budgets also look one iteration ahead (the next one is assumed to
cost what the latest did), so iterations of the same shape never go over them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from loop_agents.loop._numbers import describe_number, finite_float
from loop_agents.loop.control.budgets import budget_reason_values, check_budget, over_budget
from loop_agents.loop.state import IterationRecord, StopReason


def wall_clock() -> float:
    """Seconds since the epoch: the clock of the time budget (it survives a restart)."""
    return time.time()


def tokens_used(records: Sequence[IterationRecord]) -> int:
    """All tokens the agent, the evaluator and the history policy used over ``records``.

    Example:
        ```python
        result = loop.invoke({"messages": [HumanMessage("...")]})
        print(tokens_used(result["records"]))
        ```

    """
    return sum(
        r["input_tokens"]
        + r["output_tokens"]
        + r.get("evaluator_input_tokens", 0)
        + r.get("evaluator_output_tokens", 0)
        + r.get("history_input_tokens", 0)
        + r.get("history_output_tokens", 0)
        + r.get("advisor_input_tokens", 0)
        + r.get("advisor_output_tokens", 0)
        for r in records
    )


def failures_in_a_row(records: Sequence[IterationRecord]) -> int:
    """How many of the last ``records`` in a row are failed agent calls.

    Example:
        ```python
        failures_in_a_row(result["records"])  # 0 when the last attempt answered
        ```

    """
    count = 0
    for record in reversed(records):
        if "error" not in record:
            break
        count += 1
    return count


def counted_iterations(records: Sequence[IterationRecord], iteration: int) -> int:
    """The iterations that count toward ``max_iterations``: all but uncounted failures."""
    return iteration - sum(1 for r in records if r.get("counted") is False)


def plateaued(records: Sequence[IterationRecord], *, patience: int, min_delta: float) -> bool:
    """Tell whether the scores in ``records`` stopped improving.

    A scored iteration improves when its score exceeds the best earlier score by at
    least ``min_delta`` (and is higher at all, so ``min_delta=0`` asks for any gain);
    the first scored iteration sets the baseline. Iterations without a score do not
    count before the baseline and count as no improvement after it. The loop has
    plateaued when the last ``patience`` counted iterations brought no improvement.

    Example:
        ```python
        records = [...]  # scores 70, 72, 71
        plateaued(records, patience=2, min_delta=5)  # True: 72 and 71 gain < 5 on 70
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


@dataclass(frozen=True)
class StopPolicy:
    """The stop options of one loop; see the module docstring for the rules.

    Attributes:
        max_iterations: The most agent calls in one loop.
        patience: Scored iterations without improvement before a ``plateau`` stop;
            ``None`` turns the rule off.
        min_delta: The least gain over the best score that counts as improvement.
        token_budget: Tokens (agent and evaluator, input and output) after which the
            loop stops; ``None`` for no budget.
        time_budget: Wall-clock seconds after which the loop stops; ``None`` for no
            budget.
        request_budget: Model calls after which the loop stops; ``None`` for none.
        cost_budget: Cost (by ``prices``) after which the loop stops; ``None`` for none.
        max_agent_errors: Failed agent calls in a row after which the loop stops;
            ``None`` for no limit.

    Example:
        ```python
        policy = StopPolicy.build(5, patience=2, min_delta=3, token_budget=20_000)
        ```

    """

    max_iterations: int
    patience: int | None = None
    min_delta: float = 0.0
    token_budget: int | None = None
    time_budget: float | None = None
    request_budget: int | None = None
    cost_budget: float | None = None
    max_agent_errors: int | None = None

    @classmethod
    def build(
        cls,
        max_iterations: int,
        *,
        patience: int | None = None,
        min_delta: float = 0.0,
        token_budget: int | None = None,
        time_budget: float | timedelta | None = None,
        request_budget: int | None = None,
        cost_budget: float | None = None,
        max_agent_errors: int | None = None,
    ) -> StopPolicy:
        """Check the options and build the policy.

        Raises:
            TypeError: an option has the wrong type.
            ValueError: an option is out of range; the message says what was given.

        """
        if patience is not None:
            _check_int("patience", patience, minimum=1, hint="None turns the rule off")
        if isinstance(min_delta, bool) or not isinstance(min_delta, int | float):
            raise TypeError(f"min_delta must be a number >= 0; got {min_delta!r}")
        if finite_float(min_delta) is None or min_delta < 0:
            raise ValueError(
                f"min_delta must be a finite number >= 0; got {describe_number(min_delta)}"
            )
        if min_delta and patience is None:
            raise ValueError(
                f"min_delta={min_delta!r} has no effect without patience; pass patience=N "
                f"to stop after N iterations without a gain of at least min_delta"
            )
        if token_budget is not None:
            _check_int("token_budget", token_budget, minimum=1, hint="None means no budget")
        seconds: float | None = None
        if time_budget is not None:
            if isinstance(time_budget, timedelta):
                seconds = time_budget.total_seconds()
            elif isinstance(time_budget, bool) or not isinstance(time_budget, int | float):
                raise TypeError(
                    f"time_budget must be seconds (a number) or a timedelta; got "
                    f"{type(time_budget).__name__} {time_budget!r}"
                )
            else:
                number = finite_float(time_budget)  # None: inf, nan or a huge int
                seconds = math.inf if number is None else number
            if not math.isfinite(seconds) or seconds <= 0:
                raise ValueError(
                    f"time_budget must be > 0 seconds (a finite number); got "
                    f"{describe_number(time_budget)}"
                )
        check_budget("request_budget", request_budget, integer=True)
        if cost_budget is not None:
            cost_budget = check_budget("cost_budget", cost_budget, integer=False)
        if max_agent_errors is not None:
            _check_int("max_agent_errors", max_agent_errors, minimum=1, hint="None: no limit")
        return cls(
            max_iterations,
            patience,
            float(min_delta),
            token_budget,
            seconds,
            request_budget,
            cost_budget,
            max_agent_errors,
        )

    def stop_reason(
        self,
        *,
        accepted: bool,
        iteration: int,
        records: Sequence[IterationRecord],
        started_at: float | None,
        out_of_steps: bool = False,
    ) -> StopReason | None:
        """Why the loop ends after the latest evaluation, or ``None`` to go on.

        Args:
            accepted: The latest evaluation's ``stop``.
            iteration: Agent calls made in this loop.
            records: This loop's records, the latest iteration's included.
            started_at: When the loop started (`wall_clock` seconds), if known.
            out_of_steps: The graph's recursion limit leaves no room for another
                iteration.

        """
        if accepted:
            return "accepted"
        if self.max_agent_errors is not None and (
            failures_in_a_row(records) >= self.max_agent_errors
        ):
            return "agent_errors"
        if self.token_budget is not None and tokens_used(records) >= self.token_budget:
            return "token_budget"
        requests, latest_requests, cost, latest_cost = budget_reason_values(records)
        if over_budget(requests, latest_requests, self.request_budget):
            return "request_budget"
        if over_budget(cost, latest_cost, self.cost_budget):
            return "cost_budget"
        if (
            self.time_budget is not None
            and started_at is not None
            and wall_clock() - started_at >= self.time_budget
        ):
            return "time_budget"
        if self.patience is not None and plateaued(
            records, patience=self.patience, min_delta=self.min_delta
        ):
            return "plateau"
        if counted_iterations(records, iteration) >= self.max_iterations:
            return "max_iterations"
        if out_of_steps:
            return "recursion_limit"
        return None


def _check_int(name: str, value: object, *, minimum: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {minimum} ({hint}); got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} ({hint}); got {value}")
