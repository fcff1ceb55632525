"""Score-only evaluators: a threshold decides, an advisor (or a default sentence) gives feedback."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import InvalidEvaluationError, LoopContext, all_of, create_loop_agent, panel
from loop_agents.controls import Advice
from loop_agents.loop.feedback import feedback_text
from tests.fakes import FakeChat, review

REQUEST = HumanMessage("Write a slogan.")


def metric(context: LoopContext) -> float:
    """A metric function: the answer's length as a bare number."""
    return float(len(context["last_response"].text))


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_an_advisor_s_advice_reaches_the_agent(call):
    agent = FakeChat.of("no", "better slogan")
    advisor = FakeChat.of("Make it longer and name the product.")

    def score_only(context: LoopContext) -> dict:
        return {"score": len(context["last_response"].text)}

    loop = create_loop_agent(agent, score_only, 3, controls=[Advice(10, model=advisor)])
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    assert result["stop_reason"] == "accepted"
    first = result["records"][0]
    assert (first["stop"], first["score"]) == (False, 2.0)
    assert first["feedback"] == "Make it longer and name the product."
    assert first["feedback_from"] == "advisor"
    # the agent's second call read the advice, fenced like any feedback
    sent = agent.calls[1][-1]
    assert sent.text == review("Make it longer and name the product.", 1)
    assert feedback_text(sent) == "Make it longer and name the product."
    # the advisor saw the task, the answer and the score
    prompt = advisor.calls[0][-1].text
    assert "Write a slogan." in prompt
    assert "no" in prompt
    assert "scored 2" in prompt
    assert "feedback_from" not in result["records"][1]  # accepted: the evaluator's own


def test_the_advisor_is_a_named_counted_run():
    usage = {"input_tokens": 30, "output_tokens": 6, "total_tokens": 36}
    advisor = FakeChat.of(AIMessage("Add a verb.", usage_metadata=usage))
    names: list[str] = []

    class Names(BaseCallbackHandler):
        def on_chain_start(self, serialized, inputs, **kwargs):
            names.append(kwargs.get("name") or "")

    loop = create_loop_agent(FakeChat.of("x"), metric, 2, controls=[Advice(5, model=advisor)])
    result = loop.invoke({"messages": [REQUEST]}, {"callbacks": [Names()]})
    assert "iteration 1: advisor" in names
    first, last = result["records"]
    assert (first["advisor_input_tokens"], first["advisor_output_tokens"]) == (30, 6)
    assert first["requests"] == 2  # the agent's call and the advisor's
    assert "advisor_input_tokens" not in last  # the loop ended: no advice asked for


def test_a_bare_number_with_a_threshold_and_the_default_sentence():
    agent = FakeChat.of("abc", "abcdefgh")
    result = create_loop_agent(agent, metric, 3, controls=[Advice(5)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["stop_reason"] == "accepted"
    first = result["records"][0]
    assert first["feedback"] == (
        "The answer scored 3; an answer is accepted at 5 or more. Improve it and answer "
        "the request again."
    )
    assert first["feedback_from"] == "default"
    assert agent.calls[1][-1].text == review(first["feedback"], 1)


def test_a_given_stop_wins_over_the_threshold():
    def verdict(context: LoopContext) -> dict:
        return {"stop": False, "score": 99}

    result = create_loop_agent(FakeChat.of("a"), verdict, 2, controls=[Advice(5)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["stop_reason"] == "max_iterations"
    assert result["records"][0]["feedback_from"] == "default"


def test_score_only_without_a_threshold_is_a_clear_error():
    loop = create_loop_agent(FakeChat.of("a"), metric, 2)
    with pytest.raises(
        InvalidEvaluationError,
        match=r"returned a score without a decision \(a bare number.*Advice\(threshold\)",
    ):
        loop.invoke({"messages": [REQUEST]})
    loop = create_loop_agent(FakeChat.of("a"), lambda c: {"score": 3}, 2)
    with pytest.raises(
        InvalidEvaluationError, match=r"'score' without 'stop'.*Advice\(threshold\)"
    ):
        loop.invoke({"messages": [REQUEST]})
    loop = create_loop_agent(FakeChat.of("a"), lambda c: {"stop": False, "score": 3}, 2)
    with pytest.raises(
        InvalidEvaluationError, match=r"without feedback.*Advice\(threshold, model="
    ):
        loop.invoke({"messages": [REQUEST]})


def test_hostile_scores_are_still_rejected():
    for bad in (float("nan"), float("inf"), True):
        loop = create_loop_agent(FakeChat.of("a"), lambda c, b=bad: b, 2, controls=[Advice(5)])
        with pytest.raises(InvalidEvaluationError):
            loop.invoke({"messages": [REQUEST]})
    with pytest.raises(TypeError, match="threshold must be a finite number"):
        create_loop_agent(FakeChat.of("a"), metric, controls=[Advice(float("nan"))])
    with pytest.raises(TypeError, match="advisor must be a chat model"):
        create_loop_agent(FakeChat.of("a"), metric, controls=[Advice(model="gpt-5")])  # type: ignore[arg-type]


async def test_the_advisor_s_tokens_stream_with_its_role():
    from loop_agents.loop.tracing import role_of

    advisor = FakeChat.of("Be bolder.")
    loop = create_loop_agent(FakeChat.of("x"), metric, 2, controls=[Advice(5, model=advisor)])
    advice = ""
    async for token, metadata in loop.astream({"messages": [REQUEST]}, stream_mode="messages"):
        if role_of(metadata) == "advisor":
            advice += token.text
    assert advice == "Be bolder."


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_an_empty_advice_keeps_the_default_sentence_and_says_so(call):
    advisor = FakeChat.of(AIMessage("   "))
    loop = create_loop_agent(FakeChat.of("x"), metric, 2, controls=[Advice(5, model=advisor)])
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    first = result["records"][0]
    assert first["feedback"].startswith("The answer scored 1")
    assert first["feedback_from"] == "default"  # before: "advisor", for the default text
    assert first["requests"] == 2  # the agent's call and the advisor's


def test_a_bare_score_from_a_member_of_all_of_says_members_decide():
    loop = create_loop_agent(FakeChat.of("x"), all_of(metric), 2, controls=[Advice(5)])
    with pytest.raises(InvalidEvaluationError, match=r"as a member of all_of\(\) it must decide"):
        loop.invoke({"messages": [REQUEST]})
    loop = create_loop_agent(
        FakeChat.of("x"), panel(lambda c: {"score": 3}), 2, controls=[Advice(5)]
    )
    with pytest.raises(InvalidEvaluationError, match=r"as a member of panel\(\) it must decide"):
        loop.invoke({"messages": [REQUEST]})
