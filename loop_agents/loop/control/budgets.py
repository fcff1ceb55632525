"""Budgets in model calls and in money: ``request_budget``, ``cost_budget`` and ``prices``.

A loop counts every chat-model (or LLM) call LangChain sees while it runs: the agent's
(each candidate's), the evaluator's (an LLM judge's), the advisor's and a history
policy's (a ``compacting`` summary). Each `IterationRecord` holds the iteration's
``requests`` and, when ``prices`` are given, its ``cost``: the tokens of each call
priced by the model that answered it (``response_metadata["model_name"]``).

``prices`` maps model names to prices per million tokens, in any one currency::

    prices = {
        "gpt-5.4-mini": {"input": 0.25, "output": 2.0},
        "gpt-5.4": {"input": 1.25, "output": 10.0},
        "*": {"input": 1.0, "output": 4.0},  # any other model (optional)
    }

A response's model name is looked up exactly, then by the longest price key it starts
with (``"gpt-5.4-mini-2026-01-15"`` is priced as ``"gpt-5.4-mini"``), then as ``"*"``.
A call whose model is in none of them has no price, and neither has a call whose
response reported no token usage (a streaming call to a server that does not send it;
free models, priced 0, aside): its iteration's ``cost`` is ``None``, and with a
``cost_budget`` the loop raises `UnknownPriceError` at once (a budget cannot be kept on
calls it cannot price). A call that names no model (plain functions, some custom or
fake models) is priced as ``"*"``.

Both budgets are checked after each evaluation (see `loop_agents.loop.stopping`). The loop
stops when a budget is used up, or when the next iteration, if it costs what the latest
one did, would go over it. Iterations of the same shape (same calls) therefore never go
over the budget; an iteration that costs more than the one before it (a longer answer,
a judge that retried) can, and it completes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypedDict

from loop_agents.loop._numbers import describe_number, finite_float
from loop_agents.loop._usage import CallUsage
from loop_agents.loop.state import IterationRecord

ANY_MODEL = "*"
"""The key of ``prices`` that prices every model not named in it."""

MILLION = 1_000_000

MOST_REQUESTS = 10**15
"""The largest ``request_budget`` (a larger one is not a budget: pass ``None``)."""


class Price(TypedDict):
    """What one model costs, per million tokens, in the price table's currency.

    Attributes:
        input: The price of a million prompt tokens.
        output: The price of a million completion tokens.

    """

    input: float
    output: float


Prices: TypeAlias = Mapping[str, Price]
"""``prices=``: a `Price` by model name (``"*"`` for every other model)."""


class UnknownPriceError(ValueError):
    """A model call cannot be priced, and the loop has a ``cost_budget``.

    A call cannot be priced when its model is not in ``prices``, or when its response
    reported no token usage (``unmetered``: a streaming call to a server that does not
    send usage, a model that never reports it).

    Attributes:
        model: The model name the response gave (``""`` when it gave none).
        unmetered: Whether the model is priced but its response reported no usage.

    """

    def __init__(self, model: str, known: Sequence[str], *, unmetered: bool = False) -> None:
        self.model = model
        self.unmetered = unmetered
        shown = repr(model) if model else "a model that gave no name"
        if unmetered:
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
    """Validate ``prices=``; return a clean copy (``None`` when not given).

    Raises:
        TypeError: not a mapping of names to ``{"input": ..., "output": ...}``.
        ValueError: a price is negative, not finite, or has other keys.

    Example:
        ```python
        check_prices({"gpt-5.4-mini": {"input": 0.25, "output": 2.0}})
        ```

    """
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
        if not isinstance(price, Mapping) or set(price) != {"input", "output"}:
            raise TypeError(
                f"prices[{name!r}] must be {{'input': <per 1M prompt tokens>, 'output': <per "
                f"1M completion tokens>}}; got {price!r:.80}"
            )
        numbers: list[float] = []
        for key in ("input", "output"):
            value = price[key]
            number = None if isinstance(value, bool) else finite_float(value)
            if number is None or number < 0:
                raise ValueError(
                    f"prices[{name!r}][{key!r}] must be a finite number >= 0 (the price of "
                    f"a million tokens); got {describe_number(value)}"
                )
            numbers.append(number)
        clean[name] = {"input": numbers[0], "output": numbers[1]}
    return clean


def check_budget(name: str, value: object, *, integer: bool) -> float | None:
    """Validate ``request_budget`` (an int >= 1) or ``cost_budget`` (a number > 0)."""
    if value is None:
        return None
    if integer:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"{name} must be an int >= 1 (model calls; None means no budget); got "
                f"{type(value).__name__} {value!r:.40}"
            )
        if value < 1:
            raise ValueError(f"{name} must be >= 1 (None means no budget); got {value}")
        if value > MOST_REQUESTS:
            raise ValueError(
                f"{name} must be at most {MOST_REQUESTS:,} model calls (None means no "
                f"budget); got {describe_number(value)}"
            )
        return float(value)
    number = None if isinstance(value, bool) else finite_float(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be a number > 0 (in the currency of prices=; None means no "
            f"budget); got {type(value).__name__} {value!r:.40}"
        )
    if number is None or number <= 0:
        raise ValueError(f"{name} must be a finite number > 0; got {describe_number(value)}")
    return number


@dataclass(frozen=True)
class PriceTable:
    """Prices of models, and whether an unpriced call is an error (a cost budget is set).

    Example:
        ```python
        table = PriceTable({"m": {"input": 1.0, "output": 2.0}}, strict=True)
        table.cost(CallUsage(models={"m": (1_000_000, 500_000)}))  # 2.0
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

        Raises:
            UnknownPriceError: a call cannot be priced and the table is strict.

        """
        total = 0.0
        for model, (tokens_in, tokens_out) in usage.models.items():
            price = self.price_of(model)
            unmetered = (
                price is not None
                and bool(usage.unmetered.get(model))
                and (price["input"] > 0 or price["output"] > 0)
            )
            if price is None or unmetered:
                if self.strict:
                    raise UnknownPriceError(model, list(self.prices), unmetered=unmetered)
                return None
            total += (tokens_in * price["input"] + tokens_out * price["output"]) / MILLION
        return total


def requests_used(records: Sequence[IterationRecord]) -> int:
    """The model calls made over ``records`` (agent, evaluator, advisor, history).

    Example:
        ```python
        result = loop.invoke({"messages": [HumanMessage("...")]})
        print(requests_used(result["records"]))
        ```

    """
    return sum(int(r.get("requests", 0)) for r in records)


def cost_of(records: Sequence[IterationRecord]) -> float | None:
    """What ``records`` cost in the currency of ``prices=`` (``None`` if any is unknown).

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 5, prices=PRICES)
        result = loop.invoke({"messages": [HumanMessage("...")]})
        print(f"{cost_of(result['records']):.4f}")
        ```

    """
    total = 0.0
    for record in records:
        cost = record.get("cost")
        if cost is None:
            return None
        total += cost
    return total


def over_budget(used: float, latest: float, budget: float | None) -> bool:
    """Whether a budget is used up, or the next iteration costing ``latest`` would pass it."""
    if budget is None:
        return False
    return used >= budget or used + latest > budget * (1 + 1e-12)


def budget_reason_values(records: Sequence[IterationRecord]) -> tuple[int, int, float, float]:
    """``(requests used, latest iteration's requests, cost used, latest cost)``.

    Unknown costs count as 0 here: a loop with a cost budget never has them (an unpriced
    call raises `UnknownPriceError`).
    """
    latest = records[-1] if records else None
    latest_requests = int(latest.get("requests", 0)) if latest else 0
    latest_cost = (latest.get("cost") or 0.0) if latest else 0.0
    spent = sum((r.get("cost") or 0.0) for r in records)
    return requests_used(records), latest_requests, spent, latest_cost
