"""Every evaluator and every loop control, inside create_agent through LoopMiddleware.

Fake chat models; a scripted judge (GenericFakeChatModel with text verdicts); no network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, RetryPolicy

from loop_agents import (
    IterationRecord,
    LoopContext,
    LoopControl,
    LoopEvaluation,
    LoopMiddleware,
    LoopTimeoutError,
    all_of,
    from_openevals,
    human_review,
    llm_judge,
    panel,
    rule,
    text_rule,
)
from loop_agents.controls import Advice, Budgets, Criteria, FeedbackStyle, History, Plateau, Retries
from loop_agents.controls.criteria import is_criteria
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.protocol import Progress
from loop_agents.loop.records import selected_iteration_of
from tests.durable_helpers import REQUEST, Boom, CountingEvaluator, thread
from tests.fakes import FakeChat, texts


def looped(model: Any, evaluator: Any, max_iterations: int = 5, **options: Any) -> Any:
    checkpointer = options.pop("checkpointer", None)
    middleware = [LoopMiddleware(evaluator, max_iterations, **options)]
    return create_agent(model, middleware=middleware, checkpointer=checkpointer)


def scores(*values: float, feedback: str = "Better.") -> Any:
    """An evaluator that never accepts and gives these scores, one per iteration."""

    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "score": values[context["iteration"] - 1], "feedback": feedback}

    return evaluate


def metered(text: str, *, tokens: tuple[int, int, int] = (1000, 100, 0)) -> AIMessage:
    """An answer that reports its usage and its model, as a provider's response does."""
    usage: dict[str, Any] = {
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "total_tokens": tokens[0] + tokens[1],
    }
    if tokens[2]:
        usage["input_token_details"] = {"cache_read": tokens[2]}
    return AIMessage(text, usage_metadata=usage, response_metadata={"model_name": "mini"})


def judge_model(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


# -- the evaluators -----------------------------------------------------------------------


def test_llm_judge_scores_each_attempt_and_its_calls_are_counted():
    judge = llm_judge(
        judge_model("Score: 40\nFeedback: Dry.", "Score: 90\nFeedback: Wet."),
        "Score the haiku from 0 to 100.",
        threshold=75,
        structured_output="text",
    )
    result = looped(FakeChat.of("dry", "wet"), judge).invoke({"messages": [REQUEST]})
    assert [r["score"] for r in result["loop_records"]] == [40.0, 90.0]
    assert result["loop_stop_reason"] == "accepted"
    assert "Dry." in result["loop_feedback"][0]
    assert [r["requests"] for r in result["loop_records"]] == [2, 2]  # the agent's and the judge's


def test_rule_and_text_rule_and_all_of_and_panel():
    short = text_rule(lambda text: len(text) <= 6, "Six characters at most.", name="short")
    polite = rule(
        lambda context: ("please" in context["last_response"].text, "Say please."), name="polite"
    )
    result = looped(FakeChat.of("way too long", "please"), all_of(short, polite)).invoke(
        {"messages": [REQUEST]}
    )
    assert result["loop_feedback"][0] == "Six characters at most."
    assert result["loop_stop_reason"] == "accepted"
    voters = panel(short, polite)
    result = looped(FakeChat.of("nope!", "please"), voters).invoke({"messages": [REQUEST]})
    assert [r["stop"] for r in result["loop_records"]] == [False, True]


def test_from_openevals_exact_match():
    exact_match = pytest.importorskip("openevals.exact").exact_match
    evaluator = from_openevals(exact_match, reference_outputs="Paris")
    result = looped(FakeChat.of("Lyon", "Paris"), evaluator).invoke(
        {"messages": [HumanMessage("Capital of France?")]}
    )
    assert result["loop_iteration"] == 2
    assert result["messages"][-1].text == "Paris"


def test_human_review_pauses_the_agent_and_resumes_it_with_the_person_s_answer():
    agent = looped(FakeChat.of("draft 1", "draft 2"), human_review(), checkpointer=InMemorySaver())
    paused = agent.invoke({"messages": [REQUEST]}, thread("h"))
    request = paused["__interrupt__"][0].value
    assert request["answer"] == "draft 1"
    assert request["iteration"] == 1
    second = agent.invoke(Command(resume="Mention the smell of wet earth."), thread("h"))
    assert second["__interrupt__"][0].value["answer"] == "draft 2"
    result = agent.invoke(Command(resume=True), thread("h"))
    assert result["loop_stop_reason"] == "accepted"
    assert result["loop_feedback"][0] == "Mention the smell of wet earth."
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["draft 1", "draft 2"]


async def test_an_async_evaluator_under_ainvoke():
    async def evaluate(context: LoopContext) -> LoopEvaluation:
        await asyncio.sleep(0)
        return {"stop": context["iteration"] == 2, "feedback": "Again."}

    result = await looped(FakeChat.of("a", "b"), evaluate).ainvoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "accepted"


# -- the controls ---------------------------------------------------------------------------


def test_patience_stops_a_plateau():
    result = looped(FakeChat.of("a"), scores(50, 60, 55, 58), controls=[Plateau(2)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["loop_stop_reason"] == "plateau"
    assert result["loop_iteration"] == 4


def test_the_token_and_request_budgets():
    model = FakeChat.of(metered("a"))
    result = looped(model, scores(1, 2, 3, 4), controls=[Budgets(token_budget=2000)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["loop_stop_reason"] == "token_budget"
    assert [r["input_tokens"] for r in result["loop_records"]] == [1000, 1000]
    result = looped(
        FakeChat.of("a"), scores(1, 2, 3, 4), controls=[Budgets(request_budget=3)]
    ).invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "request_budget"
    assert result["loop_iteration"] == 3  # one model call each; the third reaches 3


def test_the_cost_budget_prices_cached_tokens_at_their_own_rate():
    prices = {"mini": {"input": 1.0, "cached_input": 0.1, "output": 10.0}}
    model = FakeChat.of(metered("a", tokens=(1_000_000, 100_000, 800_000)))
    result = looped(
        model, scores(1, 2, 3), controls=[Budgets(cost_budget=2.5, prices=prices)]
    ).invoke({"messages": [REQUEST]})
    # 200k uncached at 1.0 + 800k cached at 0.1 + 100k out at 10.0 = 0.2 + 0.08 + 1.0
    assert [r["cost"] for r in result["loop_records"]] == [pytest.approx(1.28)]
    assert result["loop_stop_reason"] == "cost_budget"  # a second would pass 2.5


def test_the_time_budget_counts_from_the_loop_s_start():
    result = looped(FakeChat.of("a"), scores(1, 2, 3), controls=[Budgets(time_budget=1e-9)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["loop_stop_reason"] == "time_budget"
    assert result["loop_iteration"] == 1


def test_feedback_format_template_and_function():
    result = looped(
        FakeChat.of("a", "b"),
        CountingEvaluator(accept_at=2),
        controls=[FeedbackStyle("Fix: {feedback}")],
    ).invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if is_feedback(m)] == ["Fix: feedback 1"]

    def as_reviewer(text: str, iteration: int) -> HumanMessage:
        return HumanMessage(f"Reviewer on attempt {iteration}: {text}")

    result = looped(
        FakeChat.of("a", "b"), CountingEvaluator(accept_at=2), controls=[FeedbackStyle(as_reviewer)]
    ).invoke({"messages": [REQUEST]})
    feedback = [m for m in result["messages"] if is_feedback(m)]
    assert [m.text for m in feedback] == ["Reviewer on attempt 1: feedback 1"]
    assert feedback[0].additional_kwargs["lc_source"] == "loop_feedback"


def test_show_criteria_puts_the_judge_s_criteria_before_the_first_attempt():
    model = FakeChat.of("a", "b")
    judge = text_rule(lambda text: text == "b", "Say b.", name="says_b", description="Say b.")
    result = looped(model, judge, controls=[Criteria()]).invoke({"messages": [REQUEST]})
    shown = [m for m in result["messages"] if is_criteria(m)]
    assert len(shown) == 1
    assert "Say b." in shown[0].text
    assert shown[0].name == "loop_criteria"
    assert texts(model.calls[0]) == [("human", REQUEST.text), ("human", shown[0].text)]
    result = looped(FakeChat.of("a"), judge, controls=[Criteria("Mine.")]).invoke(
        {"messages": [REQUEST]}
    )
    assert "Mine." in next(m for m in result["messages"] if is_criteria(m)).text


def test_threshold_decides_a_bare_score_and_an_advisor_writes_the_feedback():
    def metric(context: LoopContext) -> float:
        return {1: 30.0, 2: 80.0}[context["iteration"]]

    advisor = FakeChat.of("Add a second image.")
    result = looped(FakeChat.of("a", "b"), metric, controls=[Advice(70, model=advisor)]).invoke(
        {"messages": [REQUEST]}
    )
    assert [r["stop"] for r in result["loop_records"]] == [False, True]
    assert result["loop_records"][0]["feedback_from"] == "advisor"
    assert result["loop_feedback"][0] == "Add a second image."
    assert len(advisor.calls) == 1


class SameScoreTwice(LoopControl):
    """Stops after two equal scores in a row; the answer is the shortest one."""

    name = "same_score"

    def stop_reason(self, progress: Progress) -> str | None:
        last = [r["score"] for r in progress.records[-2:]]
        return "same_score" if len(last) == 2 and last[0] == last[1] else None

    def choose(self, records: Sequence[IterationRecord]) -> IterationRecord | None:
        return min(records, key=lambda r: r["answer"].text.__len__())


def test_controls_of_one_s_own_stop_and_choose():
    result = looped(
        FakeChat.of("long one", "mid", "longest one"), scores(5, 7, 7), controls=[SameScoreTwice()]
    ).invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "same_score"
    assert result["loop_selected_iteration"] == 2
    assert selected_iteration_of(result["messages"][-1]) == 2
    assert result["messages"][-1].text == "mid"


def sent_texts(call: list[Any]) -> list[tuple[str, str]]:
    return [(m.type, m.text[:20]) for m in call]


def test_history_last_attempt_sends_the_request_and_the_latest_attempt_only():
    model = FakeChat.of("a", "b", "c")
    result = looped(
        model, CountingEvaluator(accept_at=3), controls=[History("last_attempt")]
    ).invoke({"messages": [REQUEST]})
    assert len(result["messages"]) == 6  # the agent's state keeps the whole conversation
    third = model.calls[2]
    assert [m.type for m in third] == ["human", "ai", "human"]
    assert third[0].text == REQUEST.text
    assert third[1].text == "b"
    assert "feedback 2" in third[2].text


def test_history_feedback_log_sends_the_request_and_one_log():
    model = FakeChat.of("a", "b", "c")
    looped(model, CountingEvaluator(accept_at=3), controls=[History("feedback_log")]).invoke(
        {"messages": [REQUEST]}
    )
    third = model.calls[2]
    assert [m.type for m in third] == ["human", "human"]
    assert "feedback 1" in third[1].text
    assert "feedback 2" in third[1].text


def test_a_history_function_of_one_s_own():
    def request_only(history: Any) -> list[AnyMessage]:
        return list(history["request"])

    model = FakeChat.of("a", "b")
    looped(model, CountingEvaluator(accept_at=2), controls=[History(request_only)]).invoke(
        {"messages": [REQUEST]}
    )
    assert texts(model.calls[1]) == [("human", REQUEST.text)]


async def test_evaluator_timeout_names_the_iteration():
    async def stuck(context: LoopContext) -> LoopEvaluation:
        await asyncio.Event().wait()
        raise AssertionError("never")

    agent = looped(FakeChat.of("a"), stuck, controls=[Retries(evaluator_timeout=0.05)])
    with pytest.raises(LoopTimeoutError, match="iteration 1"):
        await agent.ainvoke({"messages": [REQUEST]})


def test_evaluator_retry_policy_retries_the_evaluation_alone():
    model = FakeChat.of("a", "b")
    evaluator = CountingEvaluator(accept_at=2, fail_at=1)
    policy = RetryPolicy(max_attempts=2, initial_interval=0.001, retry_on=Boom)
    result = looped(model, evaluator, controls=[Retries(evaluator_retry_policy=policy)]).invoke(
        {"messages": [REQUEST]}
    )
    assert result["loop_stop_reason"] == "accepted"
    assert evaluator.calls == [1, 1, 2]
    assert len(model.calls) == 2
