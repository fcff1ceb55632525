"""human_review: pause for a person, resume with Command(resume=...), on every saver."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from loop_agents import (
    InvalidReviewError,
    LoopContext,
    LoopEvaluation,
    all_of,
    create_loop_agent,
    human_review,
    llm_judge,
)
from loop_agents.evaluators.human import parse_review
from loop_agents.loop.checkpoints import checkpointed
from loop_agents.loop.feedback import is_feedback
from tests.durable_helpers import (
    REQUEST,
    AsyncCountingAgent,
    CountingAgent,
    answers,
    thread,
)
from tests.fakes import review
from tests.scripted_openai import ScriptedOpenAI, Structured


def review_of(result: dict[str, Any]) -> dict[str, Any]:
    (pending,) = result["__interrupt__"]
    return pending.value


class CountingJudge:
    """Rejects the first ``reject`` answers, accepts after; counts its calls."""

    def __init__(self, reject: int = 0) -> None:
        self.reject = reject
        self.calls: list[int] = []
        self.__name__ = "judge"

    def __call__(self, context: LoopContext) -> LoopEvaluation:
        self.calls.append(context["iteration"])
        if context["iteration"] <= self.reject:
            return {"stop": False, "feedback": f"judge: improve {context['iteration']}"}
        return {"stop": True, "feedback": "judge: fine", "score": 70.0}


# -- the pause and what the reviewer sees ---------------------------------------------


def test_pauses_with_the_review_request(saver):
    agent = CountingAgent()
    loop = create_loop_agent(agent, human_review(), 5, checkpointer=saver)
    config = thread("pause")

    paused = loop.invoke({"messages": [REQUEST]}, config)

    assert review_of(paused) == {
        "kind": "loop_agents.human_review",
        "request": REQUEST.text,
        "answer": "answer 1",
        "iteration": 1,
        "feedback": [],
        "judge": None,
        "instructions": review_of(paused)["instructions"],
    }
    assert "Command(resume=True)" in review_of(paused)["instructions"]
    schema = paused["__interrupt__"][0].response_schema
    assert {"const": True, "title": "Approve"} in schema["anyOf"]
    state = loop.get_state(config)
    assert state.next == ("evaluate",)
    assert state.interrupts[0].value["answer"] == "answer 1"
    assert agent.calls == [1]


def test_revise_then_approve(saver):
    agent = CountingAgent()
    loop = create_loop_agent(agent, human_review(), 5, checkpointer=saver)
    config = thread("revise")
    loop.invoke({"messages": [REQUEST]}, config)

    second = loop.invoke(Command(resume="Mention the smell of wet earth."), config)
    assert review_of(second)["iteration"] == 2
    assert review_of(second)["answer"] == "answer 2"
    assert review_of(second)["feedback"] == ["Mention the smell of wet earth."]

    third = loop.invoke(Command(resume={"feedback": "Shorter, please."}), config)
    assert review_of(third)["feedback"] == ["Mention the smell of wet earth.", "Shorter, please."]

    result = loop.invoke(Command(resume=True), config)
    assert "__interrupt__" not in result
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 3
    assert agent.calls == [1, 2, 3]
    feedback_turns = [m.text for m in result["messages"] if is_feedback(m)]
    assert feedback_turns == [
        review("Mention the smell of wet earth.", 1),
        review("Shorter, please.", 2),
    ]
    assert [r["evaluator"] for r in result["records"]] == ["human_review"] * 3


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, {"stop": True}),
        ({"approve": True}, {"stop": True}),
        ({"approve": True, "feedback": "Lovely.", "score": 9}, {"stop": True, "score": 9.0}),
    ],
)
def test_approval_shapes(answer, expected):
    loop = create_loop_agent(CountingAgent(), human_review(), 5, checkpointer=InMemorySaver())
    config = thread("approve")
    loop.invoke({"messages": [REQUEST]}, config)
    result = loop.invoke(Command(resume=answer), config)
    record = result["records"][-1]
    assert result["stop_reason"] == "accepted"
    assert record["stop"] is True
    assert record["score"] == expected.get("score")
    assert answers(result["messages"]) == ["answer 1"]  # the note is not sent to the agent


@pytest.mark.parametrize(
    "answer",
    [
        "Rhyme the last line.",
        {"feedback": "Rhyme the last line."},
        {"approve": False, "feedback": "Rhyme the last line.", "score": 4},
    ],
)
def test_revision_shapes(answer):
    agent = CountingAgent()
    loop = create_loop_agent(agent, human_review(), 5, checkpointer=InMemorySaver())
    config = thread("revise-shapes")
    loop.invoke({"messages": [REQUEST]}, config)
    paused = loop.invoke(Command(resume=answer), config)
    assert review_of(paused)["iteration"] == 2
    state = loop.get_state(config).values
    assert state["feedback"] == ["Rhyme the last line."]
    assert state["messages"][-2].text == review("Rhyme the last line.", 1)
    assert is_feedback(state["messages"][-2])
    assert agent.calls == [1, 2]


def test_revision_at_the_cap_ends_the_loop():
    loop = create_loop_agent(CountingAgent(), human_review(), 2, checkpointer=InMemorySaver())
    config = thread("cap")
    loop.invoke({"messages": [REQUEST]}, config)
    loop.invoke(Command(resume="again"), config)
    result = loop.invoke(Command(resume="still not right"), config)
    assert result["stop_reason"] == "max_iterations"
    assert result["feedback"] == ["again", "still not right"]


# -- malformed answers: a clear error, and the loop stays paused ----------------------

MALFORMED = [
    (42, r"the review answer is int 42; expected True, a feedback string or a mapping"),
    (None, r"the review answer is NoneType None"),
    (False, r"False alone says nothing to improve"),
    ("", r"the review answer is an empty string"),
    ("   ", r"the review answer is an empty string"),
    ([True], r"the review answer is list \[True\]"),
    ({"approve": "yes"}, r"'approve' is str 'yes'; it must be True or False"),
    ({"feedback": 3}, r"'feedback' is int 3; it must be a string"),
    ({"approve": False}, r"neither approves nor gives feedback"),
    ({"decision": "ok"}, r"unknown keys \['decision'\]"),
    ({"approve": True, "score": "high"}, r"'score' is str 'high'; it must be a finite number"),
    ({"approve": True, "score": float("inf")}, r"'score' is float inf"),
    (
        {"approve": True, "score": 10**400},
        r"'score' is an int of 401 digits; it must be a finite number",
    ),
]


@pytest.mark.parametrize(("answer", "message"), MALFORMED)
def test_parse_review_rejects(answer, message):
    with pytest.raises(InvalidReviewError, match=message):
        parse_review(answer)


@pytest.mark.parametrize(
    ("answer", "message"), [MALFORMED[0], MALFORMED[6], MALFORMED[8], MALFORMED[-1]]
)
def test_malformed_answer_is_an_error_and_the_loop_stays_paused(saver, answer, message):
    agent = CountingAgent()
    judge = CountingJudge()
    loop = create_loop_agent(agent, human_review(judge), 5, checkpointer=saver)
    config = thread("malformed")
    loop.invoke({"messages": [REQUEST]}, config)

    with pytest.raises(InvalidReviewError, match=r"human_review at iteration 1: .*" + message):
        loop.invoke(Command(resume=answer), config)
    with pytest.raises(InvalidReviewError, match="The loop is still paused"):
        loop.invoke(Command(resume=""), config)

    state = loop.get_state(config)
    assert state.next == ("evaluate",)
    assert state.interrupts[0].value["answer"] == "answer 1"
    # a valid answer now resumes it
    paused = loop.invoke(Command(resume="Use fewer adjectives."), config)
    assert review_of(paused)["feedback"] == ["Use fewer adjectives."]
    result = loop.invoke(Command(resume=True), config)
    assert result["stop_reason"] == "accepted"
    assert agent.calls == [1, 2]
    assert judge.calls == [1, 2]  # never twice for one answer, whatever the resumes


# -- a judge first, the person when the judge accepts ---------------------------------


def test_judge_first_person_only_when_the_judge_accepts(saver):
    agent = CountingAgent()
    judge = CountingJudge(reject=2)
    # every retry a repair: the agent reads its iteration from the answers it is sent
    loop = create_loop_agent(agent, human_review(judge), 6, checkpointer=saver)
    config = thread("judge-first")

    paused = loop.invoke({"messages": [REQUEST]}, config)
    # iterations 1 and 2 were rejected by the judge without asking the person
    assert review_of(paused)["iteration"] == 3
    assert review_of(paused)["feedback"] == ["judge: improve 1", "judge: improve 2"]
    assert review_of(paused)["judge"] == {"stop": True, "feedback": "judge: fine", "score": 70.0}
    assert judge.calls == [1, 2, 3]

    paused = loop.invoke(Command(resume="The person wants a title."), config)
    assert review_of(paused)["iteration"] == 4
    result = loop.invoke(Command(resume=True), config)

    assert agent.calls == [1, 2, 3, 4]
    assert judge.calls == [1, 2, 3, 4]
    assert result["stop_reason"] == "accepted"
    # the person gave no score: the judge's is kept
    assert [r["score"] for r in result["records"]] == [None, None, 70.0, 70.0]
    assert [r["decided_by"] for r in result["records"]] == [
        ["judge"],
        ["judge"],
        ["human_review"],
        ["human_review"],
    ]
    assert result["feedback"][:3] == [
        "judge: improve 1",
        "judge: improve 2",
        "The person wants a title.",
    ]


async def test_async_judge_and_async_agent(async_saver):
    calls: list[int] = []

    async def judge(context: LoopContext) -> LoopEvaluation:
        await asyncio.sleep(0)
        calls.append(context["iteration"])
        return {"stop": True, "score": 50.0}

    agent = AsyncCountingAgent()
    loop = create_loop_agent(agent, human_review(judge), 5, checkpointer=async_saver)
    config = thread("async-review")

    paused = await loop.ainvoke({"messages": [REQUEST]}, config)
    assert review_of(paused)["judge"] == {"stop": True, "score": 50.0}
    with pytest.raises(InvalidReviewError):
        await loop.ainvoke(Command(resume={"approve": False}), config)
    paused = await loop.ainvoke(Command(resume="More rain."), config)
    assert review_of(paused)["iteration"] == 2
    result = await loop.ainvoke(Command(resume={"approve": True, "score": 95}), config)

    assert result["stop_reason"] == "accepted"
    assert [r["score"] for r in result["records"]] == [50.0, 95.0]
    assert agent.calls == [1, 2]
    assert calls == [1, 2]


def test_sync_judge_under_ainvoke_and_async_judge_under_invoke_rules():
    async def judge(context: LoopContext) -> LoopEvaluation:
        return {"stop": True}

    loop = create_loop_agent(CountingAgent(), human_review(judge), 5, checkpointer=InMemorySaver())
    with pytest.raises(TypeError, match=r"evaluator 'judge' is async; .*ainvoke"):
        loop.invoke({"messages": [REQUEST]}, thread("sync-with-async-judge"))


def judge_model(script: ScriptedOpenAI) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-test",
        api_key="sk-test",
        base_url="https://scripted.invalid/v1",
        http_client=httpx.Client(transport=script.transport()),
    )


@pytest.mark.parametrize(
    "compose",
    ["human_review(judge)", "all_of(checkpointed(judge), person)", "all_of(judge, person)"],
)
def test_llm_judge_then_person_calls_the_judge_model_once_per_answer(saver, compose):
    script = ScriptedOpenAI(
        [
            Structured({"score": 40, "feedback": "Too plain."}),
            Structured({"score": 80, "feedback": "Nice imagery."}),
            Structured({"score": 90, "feedback": "Lovely."}),
        ]
    )
    judge = llm_judge(judge_model(script), "Score the haiku from 0 to 100.", threshold=75)
    evaluator = {
        "human_review(judge)": lambda: human_review(judge),
        "all_of(checkpointed(judge), person)": lambda: all_of(checkpointed(judge), human_review()),
        "all_of(judge, person)": lambda: all_of(judge, human_review()),
    }[compose]()
    agent = CountingAgent()
    # every retry a repair: the agent reads its iteration from the answers it is sent
    loop = create_loop_agent(agent, evaluator, 5, checkpointer=saver)
    config = thread("llm-judge")

    paused = loop.invoke({"messages": [REQUEST]}, config)  # 1: judge rejects; 2: person
    assert review_of(paused)["iteration"] == 2
    with pytest.raises(InvalidReviewError):
        loop.invoke(Command(resume={"approve": "sure"}), config)
    paused = loop.invoke(Command(resume="Add a kigo."), config)
    assert review_of(paused)["iteration"] == 3
    result = loop.invoke(Command(resume=True), config)

    assert result["stop_reason"] == "accepted"
    assert agent.calls == [1, 2, 3]
    assert len(script.requests) == 3  # one judge call per answer, none repeated on resume
    assert "Too plain." in result["feedback"][0]
    assert result["feedback"][1] == "Add a kigo."


def test_checkpointed_judge_in_a_hand_written_evaluator(saver):
    """Compose by hand: a checkpointed judge, then the person; the judge runs once."""
    judge = CountingJudge()
    judge_once = checkpointed(judge)
    person = human_review()
    side_effects: list[int] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        verdict = judge_once.invoke(context)
        if not verdict["stop"]:
            return verdict
        side_effects.append(context["iteration"])  # runs again on resume (not checkpointed)
        return person.invoke(context)

    loop = create_loop_agent(CountingAgent(), evaluate, 5, checkpointer=saver)
    config = thread("by-hand")
    loop.invoke({"messages": [REQUEST]}, config)
    loop.invoke(Command(resume="again"), config)
    result = loop.invoke(Command(resume=True), config)

    assert result["stop_reason"] == "accepted"
    assert judge.calls == [1, 2]
    assert side_effects == [1, 1, 2, 2]  # what checkpointed() protects against


async def test_checkpointed_judge_in_hand_written_evaluators_under_ainvoke(async_saver):
    judge = CountingJudge()
    judge_once = checkpointed(judge)
    person = human_review()

    def sync_evaluate(context: LoopContext) -> LoopEvaluation:  # run in a worker thread
        verdict = judge_once.invoke(context)
        return person.invoke(context) if verdict["stop"] else verdict

    async def async_evaluate(context: LoopContext) -> LoopEvaluation:
        verdict = await judge_once.ainvoke(context)
        return await person.ainvoke(context) if verdict["stop"] else verdict

    for evaluate in (sync_evaluate, async_evaluate):
        judge.calls.clear()
        loop = create_loop_agent(AsyncCountingAgent(), evaluate, 5, checkpointer=async_saver)
        config = thread(evaluate.__name__)
        await loop.ainvoke({"messages": [REQUEST]}, config)
        with pytest.raises(InvalidReviewError):
            await loop.ainvoke(Command(resume=7), config)
        await loop.ainvoke(Command(resume="again"), config)
        result = await loop.ainvoke(Command(resume=True), config)
        assert result["stop_reason"] == "accepted"
        assert judge.calls == [1, 2], evaluate.__name__


def test_checkpointed_outside_a_graph_calls_the_evaluator():
    judge = CountingJudge()
    context: LoopContext = {
        "iteration": 1,
        "init_messages": [REQUEST],
        "last_response": AIMessage("a"),
        "feedback": [],
        "messages": [REQUEST],
    }
    assert checkpointed(judge).invoke(context)["stop"] is True
    assert asyncio.run(checkpointed(judge).ainvoke(context))["stop"] is True
    assert judge.calls == [1, 1]


# -- misuse ---------------------------------------------------------------------------


def test_needs_a_checkpointer():
    judge = CountingJudge()
    loop = create_loop_agent(CountingAgent(), human_review(judge), 5)
    with pytest.raises(ValueError, match=r"human_review needs a checkpointer .*InMemorySaver"):
        loop.invoke({"messages": [REQUEST]})
    assert judge.calls == []  # checked before anything runs


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_inside_a_parent_graph_with_a_checkpointer():
    """The loop inherits the parent's checkpointer; the pause reaches the parent's caller."""
    agent = CountingAgent()
    loop = create_loop_agent(agent, human_review(), 5)
    parent = (
        StateGraph(Parent)
        .add_node("refine", loop)
        .add_edge(START, "refine")
        .compile(checkpointer=InMemorySaver())
    )
    config = thread("parent")
    paused = parent.invoke({"messages": [REQUEST]}, config)
    assert review_of(paused)["answer"] == "answer 1"
    paused = parent.invoke(Command(resume="again"), config)
    result = parent.invoke(Command(resume=True), config)
    assert answers(result["messages"]) == ["answer 1", "answer 2"]
    assert agent.calls == [1, 2]
    assert paused["__interrupt__"][0].value["iteration"] == 2


def test_bad_arguments():
    with pytest.raises(TypeError, match=r"name must be a non-empty string; got str ''"):
        human_review(name="")
    with pytest.raises(TypeError, match=r"evaluator must be a function .*got int"):
        human_review(75)  # type: ignore[arg-type]


def test_calling_it_directly_is_an_error():
    with pytest.raises(RuntimeError, match="call it only as the loop's evaluator"):
        human_review().invoke(
            {
                "iteration": 1,
                "init_messages": [HumanMessage("q")],
                "last_response": AIMessage("a"),
                "feedback": [],
                "messages": [],
            }
        )
