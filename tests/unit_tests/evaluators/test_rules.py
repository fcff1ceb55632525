"""Rule checks as evaluators, and the 相见欢 form checker on the seeds' drafts."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from loop_agents import LoopContext, create_loop_agent, rule, text_rule
from tests.fakes import FakeChat

REQUEST = HumanMessage("Write.")


def context(text: str) -> LoopContext:
    answer = AIMessage(text, id="a1")
    return {
        "iteration": 1,
        "init_messages": [REQUEST],
        "last_response": answer,
        "feedback": [],
        "messages": [REQUEST, answer],
    }


CONFIG: RunnableConfig = {}

# -- rule and text_rule ------------------------------------------------------------------


def cites_a_source(context: LoopContext) -> tuple[bool, str]:
    ok = "http" in context["last_response"].text
    return ok, "" if ok else "Cite a source by its URL."


async def test_rule_from_a_sync_check_works_both_ways():
    evaluator = rule(cites_a_source)
    assert evaluator.name == "cites_a_source"
    assert evaluator.invoke(context("see http://x")) == {"stop": True, "feedback": ""}
    assert await evaluator.ainvoke(context("trust me")) == {
        "stop": False,
        "feedback": "Cite a source by its URL.",
    }


async def test_rule_from_an_async_check_needs_ainvoke():
    async def long_enough(context: LoopContext) -> tuple[bool, str]:
        return len(context["last_response"].text) > 3, "Write more."

    evaluator = rule(long_enough, name="length")
    assert await evaluator.ainvoke(context("ab")) == {"stop": False, "feedback": "Write more."}
    with pytest.raises(TypeError, match=r"rule 'length' is async; run the loop with ainvoke"):
        evaluator.invoke(context("ab"))


def test_rule_errors_name_the_rule():
    with pytest.raises(TypeError, match=r"rule 'bad' returned 'yes'.*pair \(ok, feedback\)"):
        rule(lambda c: "yes", name="bad").invoke(context("x"))  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="rule 'mute' failed without feedback"):
        rule(lambda c: (False, " "), name="mute").invoke(context("x"))
    with pytest.raises(TypeError, match="check must be a function"):
        rule(42)  # type: ignore[arg-type]


def test_text_rule():
    short = text_rule(
        lambda text: len(text) <= 10,
        lambda text: f"{len(text)} characters; keep it to 10.",
        name="short",
    )
    assert short.invoke(context("tiny")) == {"stop": True, "feedback": ""}
    assert short.invoke(context("far too long a text")) == {
        "stop": False,
        "feedback": "19 characters; keep it to 10.",
    }
    polite = text_rule(lambda text: "please" in text, "Say please.")
    assert polite.invoke(context("do it"))["feedback"] == "Say please."
    with pytest.raises(TypeError, match="must return True or False"):
        text_rule(lambda text: 1, "x", name="numeric").invoke(context("a"))  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="feedback must be a non-empty text"):
        text_rule(lambda text: True, "")


def test_rule_in_a_loop_with_invoke_and_records():
    loop = create_loop_agent(FakeChat.of("no source", "see http://a"), rule(cites_a_source), 3)
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert result["feedback"] == ["Cite a source by its URL.", ""]
    assert result["records"][0]["decided_by"] == ["cites_a_source"]
