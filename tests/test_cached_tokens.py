"""Cached input tokens: counted for every role, priced at their own rate, never at full price."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, UnknownPriceError, create_loop_agent
from loop_agents.cli.results import token_totals
from loop_agents.evaluators import llm_judge
from loop_agents.loop.controls.budgets import Budgets, PriceTable, check_prices
from loop_agents.loop.usage import CallUsage, usage_of_metadata
from tests.fakes import FakeChat

REQUEST = HumanMessage("Describe a solar kettle.")


def cached_answer(text: str, prompt: int, cached: int, output: int = 10) -> AIMessage:
    usage = {
        "input_tokens": prompt,
        "output_tokens": output,
        "total_tokens": prompt + output,
        "input_token_details": {"cache_read": cached},
    }
    return AIMessage(text, usage_metadata=usage, response_metadata={"model_name": "m"})


def never(context: LoopContext) -> LoopEvaluation:
    return {"stop": False, "feedback": "Again."}


def test_usage_reads_the_cache_reads_of_a_message():
    assert usage_of_metadata({"input_tokens": 900, "output_tokens": 40}) == (900, 40, 0)
    details = {"input_tokens": 900, "output_tokens": 40, "input_token_details": {"cache_read": 800}}
    assert usage_of_metadata(details) == (900, 40, 800)


def test_records_carry_the_agent_s_cached_tokens_and_the_judge_s():
    agent = FakeChat.of(cached_answer("draft 1", 1000, 0), cached_answer("draft 2", 1200, 1000))
    judge_model = FakeChat.of(
        AIMessage(
            "",
            tool_calls=[{"name": "Verdict", "args": {"score": 40, "feedback": "More."}, "id": "v"}],
            usage_metadata={
                "input_tokens": 500,
                "output_tokens": 20,
                "total_tokens": 520,
                "input_token_details": {"cache_read": 450},
            },
        )
    )
    judge = llm_judge(judge_model, "Score 0-100.", threshold=90, method="function_calling")
    result = create_loop_agent(agent, judge, 2).invoke({"messages": [REQUEST]})
    first, second = result["records"]
    assert (first["cached_input_tokens"], second["cached_input_tokens"]) == (0, 1000)
    assert second["evaluator_cached_tokens"] == 450
    assert token_totals(result["records"])["cached_input"] == 1000 + 450 + 450


def prices(**rates: float) -> dict[str, dict[str, float]]:
    return {"m": {"input": 1.0, "output": 2.0, **rates}}


def test_cached_tokens_are_priced_at_the_cached_rate():
    table = PriceTable(check_prices(prices(cached_input=0.1)) or {})
    usage = CallUsage(models={"m": (1_000_000, 1_000_000, 800_000)})
    # 200k at 1.0, 800k at 0.1, 1M output at 2.0 (per million)
    assert table.cost(usage) == pytest.approx(0.2 + 0.08 + 2.0)


def test_a_model_without_cache_details_is_priced_as_before():
    table = PriceTable(check_prices(prices()) or {})
    assert table.cost(CallUsage(models={"m": (1_000_000, 0, 0)})) == pytest.approx(1.0)


def test_a_cache_read_without_a_cached_rate_is_never_priced_in_full():
    loose = PriceTable(check_prices(prices()) or {})
    assert loose.cost(CallUsage(models={"m": (1000, 10, 800)})) is None
    strict = PriceTable(check_prices(prices()) or {}, strict=True)
    with pytest.raises(UnknownPriceError, match="no 'cached_input' rate"):
        strict.cost(CallUsage(models={"m": (1000, 10, 800)}))


def test_the_cost_budget_uses_the_cached_rate():
    # each iteration: 1,000 prompt tokens of which 900 cached, 10 out; per 1M: 1.0 / 0.1 / 2.0
    answers = [cached_answer(f"draft {n}", 1000, 900 if n > 1 else 0) for n in range(1, 20)]
    loop = create_loop_agent(
        FakeChat.of(*answers),
        never,
        50,
        prices=prices(cached_input=0.1),
        cost_budget=0.0045,
    )
    result = loop.invoke({"messages": [REQUEST]})
    costs = [r["cost"] for r in result["records"]]
    assert costs[0] == pytest.approx(0.00102)  # 1,000 x 1.0 + 10 x 2.0, per million
    assert costs[1] == pytest.approx(0.00021)  # 100 x 1.0 + 900 x 0.1 + 10 x 2.0
    assert result["stop_reason"] == "cost_budget"
    # priced at the full input price, iteration 4 would already have passed the budget
    assert result["iteration"] > 4


def test_a_cost_budget_refuses_a_cache_read_it_cannot_price():
    loop = create_loop_agent(
        FakeChat.of(cached_answer("draft", 1000, 900)), never, 5, prices=prices(), cost_budget=1.0
    )
    with pytest.raises(UnknownPriceError, match="cached_input"):
        loop.invoke({"messages": [REQUEST]})


def test_prices_refuse_unknown_keys_and_bad_cached_rates():
    with pytest.raises(TypeError, match="optional 'cached_input'"):
        Budgets(prices={"m": {"input": 1.0, "output": 1.0, "cache": 0.1}})
    with pytest.raises(ValueError, match="'cached_input'"):
        Budgets(prices={"m": {"input": 1.0, "output": 1.0, "cached_input": -1}})
