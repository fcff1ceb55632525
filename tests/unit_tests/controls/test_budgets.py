"""Request and cost budgets: the loop stops at the right call; records carry requests and cost."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, UnknownPriceError, create_loop_agent
from loop_agents.controls import Budgets, Candidates
from loop_agents.controls.budgets import cost_of, requests_used
from tests.fakes import FakeChat

REQUEST = HumanMessage("Write a haiku.")


def answer(text: str, model: str, tokens: tuple[int, int]) -> AIMessage:
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    return AIMessage(text, usage_metadata=usage, response_metadata={"model_name": model})


def judged_by(judge: FakeChat):
    """An evaluator that calls ``judge`` once per answer and always asks for more."""

    def evaluate(context: LoopContext) -> LoopEvaluation:
        judge.invoke([context["last_response"]])
        return {"stop": False, "feedback": "again", "score": 1}

    async def aevaluate(context: LoopContext) -> LoopEvaluation:
        await judge.ainvoke([context["last_response"]])
        return {"stop": False, "feedback": "again", "score": 1}

    return evaluate, aevaluate


@pytest.mark.parametrize(("budget", "iterations"), [(3, 1), (4, 2), (5, 2), (6, 3)])
@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_request_budget_stops_at_the_right_call(budget, iterations, call):
    # two calls an iteration (the agent's and the judge's): the loop stops when the next
    # iteration would not fit, so it never goes over the budget
    agent, judge = FakeChat.of("a"), FakeChat.of("verdict")
    evaluate, aevaluate = judged_by(judge)
    loop = create_loop_agent(
        agent,
        evaluate if call == "invoke" else aevaluate,
        10,
        controls=[Budgets(request_budget=budget)],
    )
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    assert (result["stop_reason"], result["iteration"]) == ("request_budget", iterations)
    assert len(agent.calls) + len(judge.calls) == 2 * iterations <= budget
    assert [r["requests"] for r in result["records"]] == [2] * iterations
    assert requests_used(result["records"]) == 2 * iterations


def test_request_budget_counts_every_candidate():
    agent, judge = FakeChat.of("a"), FakeChat.of("verdict")
    evaluate, _ = judged_by(judge)
    loop = create_loop_agent(
        agent, evaluate, 10, controls=[Candidates(3), Budgets(request_budget=12)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("request_budget", 2)
    assert len(agent.calls) == 6
    assert len(judge.calls) == 6
    assert [r["requests"] for r in result["records"]] == [6, 6]


PRICES = {
    "agent-model": {"input": 1000.0, "output": 2000.0},
    "judge-model": {"input": 1000.0, "output": 1000.0},
}


def test_cost_budget_and_costs_in_records():
    # the agent: 10 + 5 tokens at 1000/2000 per 1M = 0.02; the judge: 100 + 20 at 1000 = 0.12
    agent = FakeChat.of(answer("a", "agent-model-2026-01", (10, 5)))
    judge = FakeChat.of(answer("v", "judge-model", (100, 20)))
    evaluate, _ = judged_by(judge)
    loop = create_loop_agent(
        agent, evaluate, 10, controls=[Budgets(cost_budget=0.30, prices=PRICES)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("cost_budget", 2)
    assert [r["cost"] for r in result["records"]] == pytest.approx([0.14, 0.14])
    assert cost_of(result["records"]) == pytest.approx(0.28)


def test_without_prices_cost_is_none_and_an_unknown_model_is_an_error_with_a_budget():
    agent = FakeChat.of(answer("a", "other-model", (10, 5)))
    result = create_loop_agent(agent, lambda c: {"stop": True}, 2).invoke({"messages": [REQUEST]})
    assert result["records"][0]["cost"] is None
    assert cost_of(result["records"]) is None
    loop = create_loop_agent(agent, lambda c: {"stop": True}, 2, controls=[Budgets(prices=PRICES)])
    assert loop.invoke({"messages": [REQUEST]})["records"][0]["cost"] is None
    loop = create_loop_agent(
        agent, lambda c: {"stop": True}, 2, controls=[Budgets(cost_budget=1, prices=PRICES)]
    )
    with pytest.raises(UnknownPriceError, match="'other-model' cannot be priced"):
        loop.invoke({"messages": [REQUEST]})
    starred = {**PRICES, "*": {"input": 0.0, "output": 0.0}}
    loop = create_loop_agent(
        agent, lambda c: {"stop": True}, 2, controls=[Budgets(cost_budget=1, prices=starred)]
    )
    assert loop.invoke({"messages": [REQUEST]})["records"][0]["cost"] == 0.0


@pytest.mark.parametrize("call", ["invoke", "stream"])
def test_a_call_that_reports_no_usage_cannot_be_priced(call):
    # a streaming server that sends no usage: the budget cannot be kept, so it is an error
    # (before, such calls were priced 0 and a cost budget never stopped the loop)
    silent = AIMessage("draft", response_metadata={"model_name": "agent-model"})

    ask_more = lambda c: {"stop": False, "feedback": "again"}  # noqa: E731
    loop = create_loop_agent(
        FakeChat.of(silent), ask_more, 10, controls=[Budgets(cost_budget=0.01, prices=PRICES)]
    )
    with pytest.raises(UnknownPriceError, match="reported no token usage") as raised:
        loop.invoke({"messages": [REQUEST]}) if call == "invoke" else list(
            loop.stream({"messages": [REQUEST]}, stream_mode="messages")
        )
    assert raised.value.unmetered
    assert raised.value.model == "agent-model"
    result = create_loop_agent(
        FakeChat.of(silent), ask_more, 2, controls=[Budgets(prices=PRICES)]
    ).invoke({"messages": [REQUEST]})
    assert [r["cost"] for r in result["records"]] == [None, None]
    free = {"agent-model": {"input": 0.0, "output": 0.0}}
    loop = create_loop_agent(
        FakeChat.of(silent), ask_more, 2, controls=[Budgets(cost_budget=1, prices=free)]
    )
    assert [r["cost"] for r in loop.invoke({"messages": [REQUEST]})["records"]] == [0.0, 0.0]


@pytest.mark.parametrize("call", ["invoke", "stream"])
def test_usage_reported_while_streaming_is_priced(call):
    agent = FakeChat.of(answer("a", "agent-model", (10, 5)))
    loop = create_loop_agent(
        agent,
        lambda c: {"stop": False, "feedback": "again"},
        10,
        controls=[Budgets(cost_budget=0.05, prices=PRICES)],
    )
    inputs = {"messages": [REQUEST]}
    if call == "invoke":
        records = loop.invoke(inputs)["records"]
    else:
        values = [
            v
            for mode, v in loop.stream(inputs, stream_mode=["messages", "values"])
            if mode == "values"
        ]
        records = values[-1]["records"]
    assert [r["cost"] for r in records] == pytest.approx([0.02, 0.02])
    assert len(records) == 2


def test_budget_option_errors():
    agent = FakeChat.of("a")
    with pytest.raises(TypeError, match="request_budget must be an int"):
        create_loop_agent(agent, lambda c: {"stop": True}, controls=[Budgets(request_budget=2.5)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="request_budget must be >= 1"):
        create_loop_agent(agent, lambda c: {"stop": True}, controls=[Budgets(request_budget=0)])
    with pytest.raises(ValueError, match=r"request_budget must be at most .* 501 digits"):
        create_loop_agent(
            agent, lambda c: {"stop": True}, controls=[Budgets(request_budget=10**500)]
        )
    with pytest.raises(ValueError, match="cost_budget needs prices="):
        create_loop_agent(agent, lambda c: {"stop": True}, controls=[Budgets(cost_budget=1.0)])
    with pytest.raises(ValueError, match="cost_budget must be a finite number > 0"):
        create_loop_agent(
            agent, lambda c: {"stop": True}, controls=[Budgets(cost_budget=-1, prices=PRICES)]
        )
    with pytest.raises(TypeError, match="prices must be a non-empty mapping"):
        create_loop_agent(agent, lambda c: {"stop": True}, controls=[Budgets(prices=[])])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"prices\['m'\] must be"):
        create_loop_agent(
            agent, lambda c: {"stop": True}, controls=[Budgets(prices={"m": {"in": 1}})]
        )  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"prices\['m'\]\['output'\] must be a finite number"):
        create_loop_agent(
            agent,
            lambda c: {"stop": True},
            controls=[Budgets(prices={"m": {"input": 1, "output": float("inf")}})],
        )


def test_usage_in_llm_output_counts_as_reported():
    # a model that reports its usage only in llm_output["token_usage"] is metered (priced),
    # one that reports it nowhere is not
    from langchain_core.outputs import ChatGeneration, Generation, LLMResult

    from loop_agents.runtime.usage import TokenCounter

    counter = TokenCounter()
    usage = {"prompt_tokens": 12, "completion_tokens": 3}
    counter.on_llm_end(
        LLMResult(generations=[[Generation(text="x")]], llm_output={"token_usage": usage})
    )
    counter.on_llm_end(
        LLMResult(
            generations=[[ChatGeneration(message=AIMessage("y"))]],
            llm_output={"token_usage": usage, "model_name": "m"},
        )
    )
    counter.on_llm_end(LLMResult(generations=[[ChatGeneration(message=AIMessage("z"))]]))
    used = counter.usage()
    assert (used.input_tokens, used.output_tokens, used.requests) == (24, 6, 3)
    assert used.unmetered == {"": 1}
