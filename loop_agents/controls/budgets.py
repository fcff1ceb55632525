"""Budgets: `Budgets`, the control of the token, time, request and cost budgets and prices.

Every chat-model call made while the loop runs is counted; with ``prices`` each record has
its ``cost``. Pricing and when a budget stops the loop: docs/loop-control.md, docs/stopping.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import NotRequired, TypeAlias, TypedDict, cast

from loop_agents.controls.options import check_count
from loop_agents.loop.protocol import LoopControl, Progress, Stage
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.usage import CallUsage

ANY_MODEL = "*"
"""The key of ``prices`` that prices every model not named in it."""

MILLION = 1_000_000

MOST_REQUESTS = 10**15
"""The largest ``request_budget`` (a larger one is not a budget: pass ``None``)."""


class Price(TypedDict):
    """What one model costs per million tokens, in the price table's currency.

    ``cached_input`` prices prompt tokens read from the server's prompt cache (needed
    once a server reports cached tokens).
    """

    input: float
    output: float
    cached_input: NotRequired[float]


Prices: TypeAlias = Mapping[str, Price]
"""``prices=``: a `Price` by model name (``"*"`` for every other model)."""


class UnknownPriceError(ValueError):
    """A model call cannot be priced, and the loop has a ``cost_budget``.

    ``model`` is the response's model name (``""``: none); ``unmetered``: it reported no
    token usage; ``cached``: it read cached prompt tokens and has no ``cached_input`` rate.
    """

    def __init__(
        self, model: str, known: Sequence[str], *, unmetered: bool = False, cached: bool = False
    ) -> None:
        self.model, self.unmetered, self.cached = model, unmetered, cached
        shown = repr(model) if model else "a model that gave no name"
        if cached:
            message = (
                f"cost_budget: a call of {shown} read prompt tokens from the server's prompt "
                f"cache, and its price has no 'cached_input' rate, so it cannot be priced "
                f"(pricing cached tokens at the full input price would overstate the cost). "
                f"Add the rate, e.g. {{'input': 0.25, 'cached_input': 0.025, 'output': 2.0}}"
            )
        elif unmetered:
            message = (
                f"cost_budget: a call of {shown} reported no token usage, so it cannot be "
                f"priced and the budget cannot be kept. Make the model report usage (for "
                f"ChatOpenAI on a streaming run, stream_usage=True; for another server, its "
                f"option to send usage when streaming), or give it the price 0 in prices "
                f"if its calls are free"
            )
        else:
            message = (
                f"cost_budget: a call of {shown} cannot be priced; prices has "
                f"{', '.join(map(repr, known)) or 'no models'}. Add an entry for it (a "
                f"response is priced by its response_metadata['model_name'], exactly or by "
                f"the longest key it starts with), or a '*' entry for every other model"
            )
        super().__init__(message)


def check_prices(prices: object) -> dict[str, Price] | None:
    """Validate ``prices=`` (see `Price`); return a clean copy (``None`` when not given)."""
    if prices is None:
        return None
    example = "{'gpt-5.4-mini': {'input': 0.25, 'output': 2.0}}"
    if not isinstance(prices, Mapping) or not prices:
        raise TypeError(
            f"prices must be a non-empty mapping of model names to prices per million "
            f"tokens, e.g. {example}; got {type(prices).__name__} {prices!r:.60}"
        )
    clean: dict[str, Price] = {}
    for name, price in prices.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"prices: model names must be non-empty strings; got {name!r:.60}")
        if not isinstance(price, Mapping) or not (
            {"input", "output"} <= set(price) <= {"input", "output", "cached_input"}
        ):
            raise TypeError(
                f"prices[{name!r}] must be {{'input': <per 1M prompt tokens>, 'output': <per "
                f"1M completion tokens>}}, with an optional 'cached_input' (per 1M prompt "
                f"tokens read from the server's prompt cache); got {price!r:.80}"
            )
        for key, value in price.items():
            number = None if isinstance(value, bool) else finite_float(value)
            if number is None or number < 0:
                raise ValueError(
                    f"prices[{name!r}][{key!r}] must be a finite number >= 0 (the price of "
                    f"a million tokens); got {describe_number(value)}"
                )
        clean[name] = cast(Price, {key: finite_float(value) for key, value in price.items()})
    return clean


@dataclass(frozen=True)
class PriceTable:
    """Prices of models, and whether an unpriced call is an error (a cost budget is set).

    Example:
        ```python
        table = PriceTable({"m": {"input": 1.0, "output": 2.0}}, strict=True)
        table.cost(CallUsage(models={"m": (1_000_000, 500_000, 0)}))  # 2.0
        ```
    """

    prices: Mapping[str, Price]
    strict: bool = False

    def price_of(self, model: str) -> Price | None:
        """The price of ``model``: exact name, longest key it starts with, then ``"*"``."""
        if model in self.prices and model != ANY_MODEL:
            return self.prices[model]
        prefixes = [k for k in self.prices if k != ANY_MODEL and model and model.startswith(k)]
        if prefixes:
            return self.prices[max(prefixes, key=len)]
        return self.prices.get(ANY_MODEL)

    def cost(self, usage: CallUsage) -> float | None:
        """What the calls in ``usage`` cost (``None`` when one cannot be priced).

        Cached prompt tokens are priced at ``cached_input``, never at the full input
        price. Raises `UnknownPriceError` for a call that cannot be priced when strict.
        """
        total = 0.0
        for model, (tokens_in, tokens_out, cached) in usage.models.items():
            price = self.price_of(model)
            unmetered = (
                price is not None
                and bool(usage.unmetered.get(model))
                and (price["input"] > 0 or price["output"] > 0)
            )
            no_cached_rate = price is not None and cached > 0 and "cached_input" not in price
            if price is None or unmetered or no_cached_rate:
                if self.strict:
                    raise UnknownPriceError(
                        model, list(self.prices), unmetered=unmetered, cached=no_cached_rate
                    )
                return None
            paid_in = (tokens_in - cached) * price["input"] + cached * price.get("cached_input", 0)
            total += (paid_in + tokens_out * price["output"]) / MILLION
        return total


def requests_used(records: Sequence[IterationRecord]) -> int:
    """The model calls made over ``records`` (agent, evaluator, advisor, history).

    Example:
        ```python
        calls = requests_used(result["records"])
        ```
    """
    return sum(int(r.get("requests", 0)) for r in records)


def cost_of(records: Sequence[IterationRecord]) -> float | None:
    """What ``records`` cost in the currency of the prices (``None`` if any is unknown).

    Example:
        ```python
        print(f"{cost_of(result['records']):.4f}")
        ```
    """
    costs = [record.get("cost") for record in records]
    return None if None in costs else sum((c for c in costs if c is not None), 0.0)


def tokens_used(records: Sequence[IterationRecord]) -> int:
    """All tokens the agent, the evaluator, the advisor and the history policy used.

    Example:
        ```python
        print(tokens_used(result["records"]))
        ```
    """
    parts = ("", "evaluator_", "history_", "advisor_")
    keys = [f"{part}{kind}_tokens" for part in parts for kind in ("input", "output")]
    return sum(cast(Mapping[str, int], r).get(key, 0) for r in records for key in keys)


def wall_clock() -> float:
    """Seconds since the epoch: the clock of the time budget (it survives a restart)."""
    return time.time()


def _over(used: float, latest: float, budget: float | None) -> bool:
    """Whether a budget is used up, or the next iteration costing ``latest`` would pass it."""
    return budget is not None and (used >= budget or used + latest > budget * (1 + 1e-12))


def _check_time_budget(time_budget: object) -> float | None:
    if time_budget is None:
        return None
    if isinstance(time_budget, bool) or not isinstance(time_budget, int | float | timedelta):
        raise TypeError(
            f"time_budget must be seconds (a number) or a timedelta; got "
            f"{type(time_budget).__name__} {time_budget!r}"
        )
    given = time_budget.total_seconds() if isinstance(time_budget, timedelta) else time_budget
    seconds = finite_float(given)
    if seconds is None or seconds <= 0:  # None: inf, nan, 10**400
        raise ValueError(
            f"time_budget must be > 0 seconds (a finite number); got {describe_number(time_budget)}"
        )
    return seconds


class Budgets(LoopControl):
    """Stop before tokens, time, model calls or money run out; price every call.

    Checked after each evaluation, in this order: ``token_budget`` (tokens of this loop's
    model calls), ``request_budget`` (its model calls), ``cost_budget`` (their cost by
    ``prices``, which it needs), ``time_budget`` (seconds or a ``timedelta`` since the
    loop's first agent call, kept in the state). The stop reason is the budget's name.
    The iteration that crosses a budget finishes; the request and cost budgets also stop
    the loop when the next iteration, costing what the latest did, would pass them.

    Example:
        ```python
        budgets = Budgets(cost_budget=0.05, prices={"*": {"input": 0.25, "output": 2.0}})
        loop = create_loop_agent(agent, judge, 10, controls=[budgets])
        ```
    """

    name = "budgets"
    stage = Stage.STOP
    claims = frozenset({"budgets"})

    def __init__(
        self,
        *,
        token_budget: int | None = None,
        time_budget: float | timedelta | None = None,
        request_budget: int | None = None,
        cost_budget: float | None = None,
        prices: Prices | None = None,
    ) -> None:
        if token_budget is not None:
            check_count("token_budget", token_budget, "tokens; None means no budget")
        if request_budget is not None:
            check_count("request_budget", request_budget, "model calls; None means no budget")
            if request_budget > MOST_REQUESTS:
                raise ValueError(
                    f"request_budget must be at most {MOST_REQUESTS:,} model calls (None means "
                    f"no budget); got {describe_number(request_budget)}"
                )
        cost = finite_float(cost_budget)
        if cost_budget is not None and (cost is None or cost <= 0):
            number = isinstance(cost_budget, int | float) and not isinstance(cost_budget, bool)
            raise (ValueError if number else TypeError)(
                f"cost_budget must be a finite number > 0 (in the currency of prices=; None "
                f"means no budget); got {describe_number(cost_budget)}"
            )
        self.token_budget = token_budget
        self.time_budget = _check_time_budget(time_budget)
        self.request_budget = None if request_budget is None else float(request_budget)
        self.cost_budget = cost
        table = check_prices(prices)
        if self.cost_budget is not None and table is None:
            raise ValueError(
                "cost_budget needs prices= to price the model calls, e.g. "
                "prices={'gpt-5.4-mini': {'input': 0.25, 'output': 2.0}} (per million tokens)"
            )
        strict = self.cost_budget is not None
        self.prices = PriceTable(table, strict=strict) if table is not None else None

    def pricing(self) -> PriceTable | None:
        """The prices of the model calls (records then carry their ``cost``)."""
        return self.prices

    def stop_reason(self, progress: Progress) -> str | None:
        """The first budget used up, in the order above."""
        records = progress.records
        if self.token_budget is not None and tokens_used(records) >= self.token_budget:
            return "token_budget"
        latest = records[-1] if records else None
        latest_requests = int(latest.get("requests", 0)) if latest else 0
        if _over(requests_used(records), latest_requests, self.request_budget):
            return "request_budget"
        # unknown costs count as 0: a loop with a cost budget has none (they raise)
        spent = sum((r.get("cost") or 0.0) for r in records)
        if _over(spent, (latest.get("cost") or 0.0) if latest else 0.0, self.cost_budget):
            return "cost_budget"
        if (
            self.time_budget is not None
            and progress.started_at is not None
            and wall_clock() - progress.started_at >= self.time_budget
        ):
            return "time_budget"
        return None
