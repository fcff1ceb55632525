"""Cached input tokens: counted for every role, priced at their own rate, never at full price."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI

from loop_agents import LoopContext, LoopEvaluation, UnknownPriceError, create_loop_agent
from loop_agents.controls import Adaptive, Budgets
from loop_agents.controls.budgets import PriceTable, check_prices
from loop_agents.evaluators import llm_judge
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.usage import CallUsage, usage_of_metadata
from loop_agents_cli.results import token_totals
from tests.fakes import FakeChat
from tests.scripted_openai import CHARS_PER_TOKEN, ScriptedOpenAI, Structured, prompt_text, tokens

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
        controls=[Budgets(cost_budget=0.0045, prices=prices(cached_input=0.1))],
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
        FakeChat.of(cached_answer("draft", 1000, 900)),
        never,
        5,
        controls=[Budgets(cost_budget=1.0, prices=prices())],
    )
    with pytest.raises(UnknownPriceError, match="cached_input"):
        loop.invoke({"messages": [REQUEST]})


def test_prices_refuse_unknown_keys_and_bad_cached_rates():
    with pytest.raises(TypeError, match="optional 'cached_input'"):
        Budgets(prices={"m": {"input": 1.0, "output": 1.0, "cache": 0.1}})
    with pytest.raises(ValueError, match="'cached_input'"):
        Budgets(prices={"m": {"input": 1.0, "output": 1.0, "cached_input": -1}})


# -- a provider's prefix cache (the scripted server's), through ChatOpenAI -------------------

RUBRIC = "Score the kettle description from 0 to 100 for accuracy, clarity and detail. " * 4
WIRE_PRICES = {
    "agent-m": {"input": 1.0, "cached_input": 0.1, "output": 4.0},
    "judge-m": {"input": 0.5, "cached_input": 0.05, "output": 2.0},
}


def script(iterations: int) -> list[str | Structured]:
    """The agent's drafts and the judge's verdicts, alternating (the judge never accepts)."""
    replies: list[str | Structured] = []
    for n in range(1, iterations + 1):
        replies.append(f"Draft {n}: a kettle with a parabolic mirror. " + "It boils. " * 30)
        replies.append(Structured({"feedback": f"Review {n}: add the boiling time.", "score": 40}))
    return replies


def wire_loop(
    server: ScriptedOpenAI, iterations: int, *, streaming: bool = False, **options: Any
) -> Any:
    agent = ChatOpenAI(
        model="agent-m",
        api_key="sk-test",
        http_client=server.client(),
        streaming=streaming,
        stream_usage=True,
    )
    judge_model = ChatOpenAI(model="judge-m", api_key="sk-test", http_client=server.client())
    judge = llm_judge(judge_model, RUBRIC, threshold=90)
    # repairs unless a test says otherwise: each retry extends the conversation before it
    return create_loop_agent(agent, judge, iterations, **options)


def priced(record: IterationRecord, *, cached_rate: bool = True) -> float:
    """The record's cost computed from its token counts and `WIRE_PRICES`."""
    total = 0.0
    for model, (tokens_in, tokens_out, cached) in {
        "agent-m": (record["input_tokens"], record["output_tokens"], record["cached_input_tokens"]),
        "judge-m": (
            record["evaluator_input_tokens"],
            record["evaluator_output_tokens"],
            record["evaluator_cached_tokens"],
        ),
    }.items():
        rates = WIRE_PRICES[model]
        cached_price = rates["cached_input"] if cached_rate else rates["input"]
        total += (tokens_in - cached) * rates["input"] + cached * cached_price
        total += tokens_out * rates["output"]
    return total / 1_000_000


@pytest.mark.parametrize("streaming", [False, True])
def test_a_server_s_prefix_cache_reaches_the_records_and_the_cost(streaming):
    server = ScriptedOpenAI(script(3), prefix_cache=True)
    loop = wire_loop(server, 3, streaming=streaming, controls=[Budgets(prices=WIRE_PRICES)])
    result = loop.invoke({"messages": [REQUEST]})
    assert [bool(r.get("stream")) for r in server.requests[0::2]] == [streaming] * 3
    records = result["records"]
    assert len(records) == 3
    agent_calls, judge_calls = server.requests[0::2], server.requests[1::2]
    agent_usage, judge_usage = server.usages[0::2], server.usages[1::2]
    assert [r["cached_input_tokens"] for r in records] == [
        u["prompt_tokens_details"]["cached_tokens"] for u in agent_usage
    ]
    assert [r["evaluator_cached_tokens"] for r in records] == [
        u["prompt_tokens_details"]["cached_tokens"] for u in judge_usage
    ]
    assert [r["input_tokens"] for r in records] == [u["prompt_tokens"] for u in agent_usage]
    assert records[0]["cached_input_tokens"] == records[0]["evaluator_cached_tokens"] == 0
    for n in (1, 2):
        # the agent's previous prompt is the start of this one, so all of it is cached
        before, now = agent_calls[n - 1], agent_calls[n]
        assert now["messages"][: len(before["messages"])] == before["messages"]
        assert records[n]["cached_input_tokens"] == len(prompt_text(before)) // CHARS_PER_TOKEN
        assert 0 < records[n]["cached_input_tokens"] < records[n]["input_tokens"]
        # the judge: its schema, the rubric and the request are cached, the new draft is not
        fixed = {**judge_calls[n], "messages": judge_calls[n]["messages"][:-1]}
        assert judge_calls[n]["messages"][:-1] == judge_calls[0]["messages"][:-1]
        # (the drafts' first characters are alike too: '{"content": "Draft ')
        shared = prompt_text(fixed) + '{"content": "Draft '
        assert records[n]["evaluator_cached_tokens"] == len(shared) // CHARS_PER_TOKEN
    for record in records:
        assert record["cost"] == pytest.approx(priced(record))
    assert records[2]["cost"] < priced(records[2], cached_rate=False)


def test_a_cost_budget_counts_a_server_s_cache_reads_at_the_cached_rate():
    server = ScriptedOpenAI(script(3), prefix_cache=True)
    first, second, _ = wire_loop(server, 3, controls=[Budgets(prices=WIRE_PRICES)]).invoke(
        {"messages": [REQUEST]}
    )["records"]
    # the budget lets a third iteration start only at the cached rate: after iteration 2
    # the loop stops when what it spent plus iteration 2's cost would pass the budget
    budget = (first["cost"] + 2 * second["cost"]) * (1 + 1e-9)
    uncached = [priced(r, cached_rate=False) for r in (first, second)]
    assert uncached[0] + 2 * uncached[1] > budget
    again = ScriptedOpenAI(script(6), prefix_cache=True)
    loop = wire_loop(again, 6, controls=[Budgets(prices=WIRE_PRICES, cost_budget=budget)])
    result = loop.invoke({"messages": [REQUEST]})
    assert result["iteration"] == 3
    assert result["stop_reason"] == "cost_budget"
    assert [r["cost"] for r in result["records"][:2]] == pytest.approx(
        [first["cost"], second["cost"]]
    )


def test_a_repair_loop_keeps_what_each_role_was_sent_before_cacheable():
    """Agent (history "full", fenced feedback) and judge over 4 iterations, on the wire.

    From iteration 2 on, at least 90% of what the role was sent before is read from the
    cache: for the agent its whole previous prompt, for the judge everything before the
    new draft (its schema, the rubric, the request).
    """
    server = ScriptedOpenAI(script(4), prefix_cache=True)
    result = wire_loop(server, 4).invoke({"messages": [REQUEST]})
    records = result["records"]
    assert len(records) == 4
    agent_calls, judge_calls = server.requests[0::2], server.requests[1::2]
    for n in range(1, 4):
        before = tokens(prompt_text(agent_calls[n - 1]))
        assert records[n]["cached_input_tokens"] >= 0.9 * before
        fixed = {**judge_calls[n], "messages": judge_calls[n]["messages"][:-1]}
        assert records[n]["evaluator_cached_tokens"] >= 0.9 * tokens(prompt_text(fixed))
    # the agent's cacheable share grows with the conversation
    shares = [r["cached_input_tokens"] / r["input_tokens"] for r in records]
    assert shares == sorted(shares)
    assert shares[-1] > 0.6


def test_the_prefix_cache_is_kept_per_model_unless_asked_otherwise():
    body = {"model": "a", "messages": [{"role": "user", "content": "same words " * 10}]}
    shared = ScriptedOpenAI([], prefix_cache=True, cache_per_model=False)
    apart = ScriptedOpenAI([], prefix_cache=True)
    for server in (shared, apart):
        server._cached_tokens(body)
    other = {**body, "model": "b"}
    assert shared._cached_tokens(other) == tokens(prompt_text(other))
    assert apart._cached_tokens(other) == 0
    assert apart._cached_tokens(body) == tokens(prompt_text(body))


def test_an_adaptive_loop_keeps_the_judge_s_prefix_cacheable_whatever_the_retry():
    """`Adaptive` may retry by a fresh sample (the request alone) or an informed one (the
    request with the points): the agent's prompt then starts anew, and only the judge's
    schema, rubric and request stay cached (a repair keeps the agent's too, above)."""
    server = ScriptedOpenAI(script(4), prefix_cache=True)
    result = wire_loop(server, 4, controls=[Adaptive(seed=0)]).invoke({"messages": [REQUEST]})
    records = result["records"]
    assert len(records) == 4
    kinds = [record["strategy"]["kind"] for record in records]
    assert kinds[0] == "first"
    assert set(kinds[1:]) - {"repair"}  # not only repairs here
    for n, kind in enumerate(kinds[1:], 1):
        sent = server.requests[2 * n]["messages"]
        assert any(m["role"] == "assistant" for m in sent) == (kind == "repair")
    judge_calls = server.requests[1::2]
    for n in range(1, 4):
        fixed = {**judge_calls[n], "messages": judge_calls[n]["messages"][:-1]}
        assert records[n]["evaluator_cached_tokens"] >= 0.9 * tokens(prompt_text(fixed))
