"""LoopMiddleware beside LangChain's own middleware.

Each neighbour is tested in both orders of the ``middleware`` list where the order can
matter (which hook runs first, which ``wrap_model_call`` is outermost). Fake models.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
)
from langchain.agents.middleware.model_call_limit import ModelCallLimitExceededError
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from loop_agents import LoopContext, LoopEvaluation, LoopMiddleware, todos_complete
from loop_agents.controls import AnswerSelection
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import selected_iteration_of
from tests.durable_helpers import REQUEST, CountingEvaluator, thread
from tests.fakes import FakeChat


def in_order(loop: Any, other: Any, order: str) -> list[Any]:
    return [loop, other] if order == "loop_first" else [other, loop]


ORDERS = ["loop_first", "loop_last"]


# -- SummarizationMiddleware ----------------------------------------------------------------


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("order", ORDERS)
async def test_beside_summarization_the_records_keep_the_answers_it_summarized_away(order, call):
    def evaluate(context: LoopContext) -> LoopEvaluation:
        score = {1: 90.0, 2: 20.0, 3: 30.0}[context["iteration"]]
        return {"stop": False, "score": score, "feedback": f"feedback {context['iteration']}"}

    summary = SummarizationMiddleware(
        FakeChat.of("SUMMARY"), trigger=("messages", 5), keep=("messages", 2)
    )
    loop = LoopMiddleware(evaluate, 3, controls=[AnswerSelection("best")])
    model = FakeChat.of("first", "second", "third")
    agent = create_agent(model, middleware=in_order(loop, summary, order))
    request = {"messages": [REQUEST]}
    result = await agent.ainvoke(request) if call == "ainvoke" else agent.invoke(request)
    assert result["loop_stop_reason"] == "max_iterations"
    assert [r["answer"].text for r in result["loop_records"]] == ["first", "second", "third"]
    # the third model call read the task (the loop's request) and the summary, not the
    # first attempt
    assert model.calls[2][0].text == REQUEST.text
    assert "SUMMARY" in model.calls[2][1].text
    assert "first" not in [m.text for m in result["messages"] if m.type == "ai"][:-1]
    # the best answer was summarized away; the loop's answer is still its copy
    final = result["messages"][-1]
    assert (final.text, selected_iteration_of(final)) == ("first", 1)


# -- TodoListMiddleware ---------------------------------------------------------------------


def planner(messages: list[AnyMessage]) -> AIMessage:
    """Plans two steps; after a review, ticks them off; answers after each tool result."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Here is the plan's result.")
    done = any(is_feedback(m) for m in messages)
    todos = [
        {"content": "outline", "status": "completed"},
        {"content": "write", "status": "completed" if done else "in_progress"},
    ]
    call = {"name": "write_todos", "args": {"todos": todos}, "id": f"t{len(messages)}"}
    return AIMessage("", tool_calls=[call])


@pytest.mark.parametrize("order", ORDERS)
def test_beside_todo_list_the_evaluator_reads_the_plan(order):
    loop = LoopMiddleware(todos_complete(), 3)
    agent = create_agent(
        FakeChat.of(planner), middleware=in_order(loop, TodoListMiddleware(), order)
    )
    result = agent.invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "accepted"
    assert "Not done yet" in result["loop_feedback"][0]
    assert "- write (in_progress)" in result["loop_feedback"][0]
    assert [t["status"] for t in result["todos"]] == ["completed", "completed"]


# -- HumanInTheLoopMiddleware ----------------------------------------------------------------


@tool
def publish(text: str) -> str:
    """Publish a text."""
    return f"published {text!r}"


def publisher(messages: list[AnyMessage]) -> AIMessage:
    attempt = sum(1 for m in messages if is_feedback(m)) + 1
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(f"published draft {attempt}")
    call = {"name": "publish", "args": {"text": f"draft {attempt}"}, "id": f"p{attempt}"}
    return AIMessage("", tool_calls=[call])


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("order", ORDERS)
async def test_beside_human_in_the_loop_each_attempt_s_tool_call_waits_for_approval(order, call):
    approvals = HumanInTheLoopMiddleware(interrupt_on={"publish": True})
    loop = LoopMiddleware(CountingEvaluator(accept_at=2), 3)  # revises
    agent = create_agent(
        FakeChat.of(publisher),
        [publish],
        middleware=in_order(loop, approvals, order),
        checkpointer=InMemorySaver(),
    )

    async def send(given: Any) -> Any:
        if call == "ainvoke":
            return await agent.ainvoke(given, thread("hitl"))
        return agent.invoke(given, thread("hitl"))

    first = await send({"messages": [REQUEST]})
    assert first["__interrupt__"]  # the first attempt's tool call waits
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    second = await send(approve)
    assert second["__interrupt__"]  # judged, fed back: the second attempt's call waits
    assert second["loop_records"][0]["answer"].text == "published draft 1"
    result = await send(approve)
    assert result["loop_stop_reason"] == "accepted"
    tools = [m.text for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tools == ["published 'draft 1'", "published 'draft 2'"]


# -- ModelCallLimitMiddleware ---------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_a_model_call_limit_that_ends_the_run_ends_the_loop(order):
    evaluator = CountingEvaluator(accept_at=99)
    limit = ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")
    loop = LoopMiddleware(evaluator, 5)
    agent = create_agent(FakeChat.of("a", "b", "c"), middleware=in_order(loop, limit, order))
    result = agent.invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "model_call_limit"
    assert evaluator.calls == [1, 2]  # the evaluator is not asked about the limit's message
    records = result["loop_records"]
    assert [r.get("error") is None for r in records] == [True, True, False]
    assert "Model call limits exceeded: run limit (2/2)" in records[2]["error"]
    assert result["loop_selected_iteration"] == 2
    assert result["messages"][-1].text == "b"  # the loop's answer, after the limit's note


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def researcher(messages: list[AnyMessage]) -> AIMessage:
    """Looks something up before every answer: a tool call, then the answer."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(f"answer {sum(isinstance(m, ToolMessage) for m in messages)}")
    call = {"name": "lookup", "args": {"topic": "rain"}, "id": f"call{len(messages)}"}
    return AIMessage("", tool_calls=[call])


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    ("limit", "reason", "note"),
    [
        (
            lambda: ModelCallLimitMiddleware(run_limit=3, exit_behavior="end"),
            "model_call_limit",
            "Model call limits exceeded: run limit (3/3)",
        ),
        (
            lambda: ToolCallLimitMiddleware(run_limit=1, exit_behavior="end"),
            "tool_call_limit",
            "Tool call limit reached",
        ),
    ],
)
def test_a_limit_s_note_is_never_judged_nor_the_loop_s_answer(order, limit, reason, note):
    judged: list[str] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        judged.append(context["last_response"].text)
        return {"stop": False, "feedback": "more", "score": 50.0}

    loop = LoopMiddleware(evaluate, 5, controls=[AnswerSelection("best")])
    model = FakeChat.of(*[researcher] * 8)
    agent = create_agent(model, [lookup], middleware=in_order(loop, limit(), order))
    result = agent.invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == reason
    assert not any(note in text for text in judged)  # the note was never judged
    records = result["loop_records"]
    assert note in records[-1]["error"]
    answered = [r for r in records if "error" not in r]
    final = result["messages"][-1]
    if answered:  # the loop's answer: an answered attempt's, after the note
        assert final.text == answered[-1]["answer"].text
        assert note not in final.text
    assert all(note not in r["answer"].text for r in answered)


@pytest.mark.parametrize("order", ORDERS)
def test_a_model_call_limit_that_raises_keeps_the_records_so_far(order):
    limit = ModelCallLimitMiddleware(run_limit=2, exit_behavior="error")
    loop = LoopMiddleware(CountingEvaluator(accept_at=99), 5)
    agent = create_agent(
        FakeChat.of("a", "b", "c"),
        middleware=in_order(loop, limit, order),
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(ModelCallLimitExceededError):
        agent.invoke({"messages": [REQUEST]}, thread("limit"))
    values = agent.get_state(thread("limit")).values
    assert [r["iteration"] for r in values["loop_records"]] == [1, 2]
    assert values["loop_stop_reason"] is None
