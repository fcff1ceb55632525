"""Criteria up front: the evaluator's criteria in the agent's first prompt, once."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents import (
    LoopContext,
    LoopEvaluation,
    all_of,
    create_loop_agent,
    llm_judge,
    panel,
    rule,
    text_rule,
)
from loop_agents.controls import Criteria, History
from loop_agents.controls.criteria import is_criteria
from loop_agents.loop.evaluation import criteria_of
from tests.fakes import FakeChat

REQUEST = HumanMessage("Announce the release.")


def short(text: str) -> bool:
    """At most 40 characters."""
    return len(text) <= 40


SHORT = text_rule(short, "Too long.")


def test_every_ready_made_evaluator_states_its_criteria():
    judge = llm_judge(FakeChat.of("x"), "Score 0-100: clear and friendly.", threshold=70)
    assert judge.criteria == "Score 0-100: clear and friendly."
    assert SHORT.criteria == "At most 40 characters."  # the predicate's docstring
    assert text_rule(lambda t: True, "Name the version.").criteria == "Name the version."
    assert rule(lambda c: (True, ""), description="Cite a source.").criteria == "Cite a source."
    assert rule(lambda c: (True, "")).criteria is None
    combined = all_of(SHORT, judge).criteria
    assert (
        combined
        == "[short]\nAt most 40 characters.\n\n[llm_judge]\nScore 0-100: clear and friendly."
    )
    assert panel(SHORT).criteria == "At most 40 characters."
    assert criteria_of(judge.with_config(run_name="j")) == judge.criteria

    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": True}

    evaluate.criteria = "Mine."  # type: ignore[attr-defined]
    assert criteria_of(evaluate) == "Mine."


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_criteria_reach_the_first_prompt_once(call):
    agent = FakeChat.of("x" * 50, "short one")
    loop = create_loop_agent(agent, SHORT, 3, controls=[Criteria()])
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    first_prompt = agent.calls[0]
    assert next(m.text for m in first_prompt) == "Announce the release."
    assert is_criteria(first_prompt[1])
    assert "At most 40 characters." in first_prompt[1].text
    # not added again on the second iteration: the same message, once
    assert sum(is_criteria(m) for m in agent.calls[1]) == 1
    assert sum(is_criteria(m) for m in result["messages"]) == 1
    assert result["init_messages"][-1].id == first_prompt[1].id


def test_explicit_criteria_win_and_a_second_run_does_not_repeat_them():
    agent = FakeChat.of("short")
    loop = create_loop_agent(
        agent,
        SHORT,
        2,
        controls=[Criteria("Short, and name v2.")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [REQUEST]}, config)
    result = loop.invoke({"messages": [HumanMessage("And in French?")]}, config)
    shown = [m for m in result["messages"] if is_criteria(m)]
    assert len(shown) == 1
    assert "Short, and name v2." in shown[0].text
    assert "At most 40" not in shown[0].text


def test_criteria_with_the_last_attempt_history_are_kept_in_the_request():
    agent = FakeChat.of("x" * 50, "y" * 50, "ok")
    create_loop_agent(agent, SHORT, 3, controls=[Criteria(), History("last_attempt")]).invoke(
        {"messages": [REQUEST]}
    )
    assert all(any(is_criteria(m) for m in call) for call in agent.calls)


def test_criteria_errors_name_the_control():
    agent = FakeChat.of("a")
    with pytest.raises(ValueError, match=r"control 'criteria': Criteria\(\) .*states none"):
        create_loop_agent(agent, lambda c: {"stop": True}, controls=[Criteria()])
    with pytest.raises(TypeError, match=r"Criteria\(text=\) must be a non-empty text"):
        Criteria("  ")
    # the keyword options of 0.2 name the control that replaces them
    with pytest.raises(TypeError, match=r"'criteria': .* pass controls=\[Criteria\('x'\)\]"):
        create_loop_agent(agent, SHORT, criteria="x")
    with pytest.raises(TypeError, match=r"'show_criteria': .* pass controls=\[Criteria\(\)\]"):
        create_loop_agent(agent, SHORT, show_criteria=True)


def test_a_resumed_loop_shows_the_criteria_once():
    answers = iter([RuntimeError("model down"), "short"])

    def agent(messages):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    loop = create_loop_agent(agent, SHORT, 2, controls=[Criteria()], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "resume"}}
    with pytest.raises(RuntimeError, match="model down"):
        loop.invoke({"messages": [REQUEST]}, config)
    result = loop.invoke(None, config)
    assert result["stop_reason"] == "accepted"
    assert sum(is_criteria(m) for m in result["messages"]) == 1
