"""all_of (in order, first to continue decides) and panel (concurrent, verdicts combined)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI

from loop_agents import (
    InvalidEvaluationError,
    LoopContext,
    LoopEvaluation,
    all_of,
    create_loop_agent,
    llm_judge,
    panel,
    rule,
    text_rule,
)
from tests.fakes import FakeChat
from tests.scripted_openai import ScriptedOpenAI, Structured

REQUEST = HumanMessage("Write.")


def context(text: str = "an answer") -> LoopContext:
    answer = AIMessage(text, id="a1")
    return {
        "iteration": 1,
        "init_messages": [REQUEST],
        "last_response": answer,
        "feedback": [],
        "messages": [REQUEST, answer],
    }


class Counted:
    """A sync evaluator with a fixed verdict that counts its calls."""

    def __init__(self, name: str, verdict: LoopEvaluation) -> None:
        self.__name__ = name
        self.verdict = verdict
        self.calls = 0

    def __call__(self, context: LoopContext) -> LoopEvaluation:
        self.calls += 1
        return dict(self.verdict)  # type: ignore[return-value]


def passes(name: str, score: float | None = None, feedback: str = "") -> Counted:
    verdict: LoopEvaluation = {"stop": True, "feedback": feedback}
    if score is not None:
        verdict["score"] = score
    return Counted(name, verdict)


def fails(name: str, feedback: str, score: float | None = None) -> Counted:
    verdict: LoopEvaluation = {"stop": False, "feedback": feedback}
    if score is not None:
        verdict["score"] = score
    return Counted(name, verdict)


# -- all_of ------------------------------------------------------------------------------


async def test_all_of_first_to_continue_decides_and_later_are_skipped():
    first, second, third = passes("first"), fails("second", "Fix B.", 40), passes("third")
    chain = all_of(first, second, third)
    assert chain.invoke(context()) == {
        "stop": False,
        "feedback": "Fix B.",
        "score": 40.0,
        "decided_by": ["second"],
    }
    assert (first.calls, second.calls, third.calls) == (1, 1, 0)
    assert (await chain.ainvoke(context()))["decided_by"] == ["second"]
    assert (first.calls, second.calls, third.calls) == (2, 2, 0)


def test_all_of_when_everyone_accepts():
    chain = all_of(passes("form", feedback="Form ok."), passes("judge", 88, "Lovely."))
    assert chain.invoke(context()) == {
        "stop": True,
        "feedback": "[form]\nForm ok.\n\n[judge]\nLovely.",
        "score": 88.0,
        "decided_by": ["form", "judge"],
    }


def test_all_of_skips_the_judge_for_a_malformed_draft():
    server = ScriptedOpenAI([Structured({"feedback": "Nice.", "score": 90})])
    model = ChatOpenAI(model="m", api_key="sk-test", http_client=server.client())
    # a rule that costs no call, in front of the judge (the demo's form check is one)
    form = text_rule(lambda text: "月如钩" in text, "Not the form.", name="form")
    chain = all_of(form, llm_judge(model, "Score.", threshold=75))
    malformed = (
        "当年初见斜阳，过横塘。一诺轻轻，笑语付疏妆。桑叶落，心先薄，泪成行。淇水汤汤，流尽旧时光。"
    )
    verdict = chain.invoke(context(malformed))
    assert verdict["stop"] is False
    assert verdict["decided_by"] == ["form"]
    assert server.requests == []  # no judge call
    li_yu = "无言独上西楼，月如钩。寂寞梧桐深院锁清秋。剪不断，理还乱，是离愁。别是一般滋味在心头。"
    verdict = chain.invoke(context(li_yu))
    assert verdict["stop"] is True
    assert verdict["score"] == 90.0
    assert len(server.requests) == 1


def test_all_of_validates_members_by_name():
    def sloppy(context: LoopContext) -> LoopEvaluation:
        return {"stop": False}  # no feedback

    with pytest.raises(InvalidEvaluationError, match="evaluator 'sloppy' at iteration 1"):
        all_of(passes("ok"), sloppy).invoke(context())
    with pytest.raises(ValueError, match="needs at least one evaluator"):
        all_of()
    with pytest.raises(TypeError, match="evaluator must be a function"):
        all_of(42)  # type: ignore[arg-type]


# -- panel -------------------------------------------------------------------------------


async def test_panel_all_must_pass():
    jury = panel(passes("style", 80, "Good style."), fails("facts", "Date is wrong.", 30))
    expected = {
        "stop": False,
        "feedback": "[facts]\nDate is wrong.",
        "score": 30.0,
        "decided_by": ["facts"],
    }
    assert jury.invoke(context()) == expected
    assert await jury.ainvoke(context()) == expected
    happy = panel(passes("a", 70), passes("b", 90, "Fine."))
    assert happy.invoke(context()) == {
        "stop": True,
        "feedback": "[b]\nFine.",
        "score": 70.0,
        "decided_by": ["a", "b"],
    }


def test_panel_min_and_mean():
    members = (passes("a", 90, "Great."), fails("b", "Weak ending.", 60))
    low = panel(*members, combine="min", threshold=70).invoke(context())
    assert low["stop"] is False
    assert low["score"] == 60.0
    assert low["decided_by"] == ["b"]
    assert low["feedback"] == (
        "[a]\nGreat.\n\n[b]\nWeak ending.\n\nPanel score (min of a 90, b 60): 60, threshold 70."
    )
    mean = panel(*members, combine="mean", threshold=70).invoke(context())
    assert (mean["stop"], mean["score"], mean["decided_by"]) == (True, 75.0, ["a", "b"])


def test_panel_score_rules_need_scores_and_a_threshold():
    with pytest.raises(ValueError, match="'b' gave no score"):
        panel(passes("a", 90), passes("b"), combine="mean", threshold=50).invoke(context())
    with pytest.raises(ValueError, match=r"needs threshold="):
        panel(passes("a", 90), combine="min")
    with pytest.raises(ValueError, match="threshold is only used with"):
        panel(passes("a", 90), threshold=50)
    with pytest.raises(ValueError, match="combine must be"):
        panel(passes("a", 90), combine="median")  # type: ignore[arg-type]


def test_panel_custom_combine():
    def majority(verdicts: dict[str, LoopEvaluation]) -> LoopEvaluation:
        yes = [name for name, v in verdicts.items() if v["stop"]]
        if len(yes) * 2 > len(verdicts):
            return {"stop": True}
        return {"stop": False, "feedback": "Most reviewers want changes."}

    jury = panel(passes("a"), passes("b"), fails("c", "No."), combine=majority)
    assert jury.invoke(context()) == {"stop": True, "decided_by": ["a", "b", "c"]}


async def test_panel_members_run_concurrently_async():
    both_started = asyncio.Barrier(2)

    async def first(context: LoopContext) -> LoopEvaluation:
        await asyncio.wait_for(both_started.wait(), 10)  # only passes if the other runs too
        return {"stop": True, "score": 1}

    async def second(context: LoopContext) -> LoopEvaluation:
        await asyncio.wait_for(both_started.wait(), 10)
        return {"stop": True, "score": 2}

    verdict = await panel(first, second).ainvoke(context())
    assert verdict["decided_by"] == ["first", "second"]


def test_panel_members_run_concurrently_sync():
    both_started = threading.Barrier(2, timeout=10)

    def first(context: LoopContext) -> LoopEvaluation:
        both_started.wait()  # raises BrokenBarrierError unless the other runs at once
        return {"stop": True}

    def second(context: LoopContext) -> LoopEvaluation:
        both_started.wait()
        return {"stop": False, "feedback": "Again."}

    assert panel(first, second).invoke(context())["decided_by"] == ["second"]


async def test_panel_failure_cancels_the_others():
    cancelled = asyncio.Event()

    async def slow(context: LoopContext) -> LoopEvaluation:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {"stop": True}

    async def broken(context: LoopContext) -> LoopEvaluation:
        raise RuntimeError("judge down")

    with pytest.raises(RuntimeError, match="judge down"):
        await panel(slow, broken).ainvoke(context())
    await asyncio.wait_for(cancelled.wait(), 10)


def test_same_names_are_numbered_and_nested_deciders_recorded():
    jury = panel(fails("judge", "A."), fails("judge", "B."))
    assert jury.invoke(context())["decided_by"] == ["judge", "judge#2"]
    chain = all_of(passes("form"), panel(passes("x", 80), fails("y", "Fix.", 50)))
    assert chain.invoke(context())["decided_by"] == ["y"]


def test_combinators_in_a_loop_record_who_decided():
    evaluator = all_of(
        rule(lambda c: (len(c["last_response"].text) > 5, "Longer."), name="length"),
        panel(passes("a", 80), passes("b", 90), combine="mean", threshold=70),
    )
    loop = create_loop_agent(FakeChat.of("short", "long enough"), evaluator, 3)
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "accepted"
    assert [r["decided_by"] for r in result["records"]] == [["length"], ["length", "a", "b"]]
    assert [r["score"] for r in result["records"]] == [None, 85.0]
    assert [r["evaluator"] for r in result["records"]] == ["all_of", "all_of"]
