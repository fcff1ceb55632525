"""Streaming: the agent's tokens on "messages", loop events on "custom", named and tagged runs."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AnswerSelection
from loop_agents.evaluators import all_of, text_rule
from loop_agents.loop.events import LOOP_EVENT_TYPES, is_loop_event
from loop_agents.loop.tracing import iteration_config, iteration_of, role_of
from tests.fakes import FakeChat

REQUEST = HumanMessage("Write a haiku about rain.")
ANSWERS = ("one two", "three four", "five six")


def scored(context: LoopContext) -> LoopEvaluation:
    """Scores 70, 80, 90; accepts the third answer."""
    iteration = context["iteration"]
    return {
        "stop": iteration >= 3,
        "feedback": f"feedback {iteration}",
        "score": 60 + 10 * iteration,
    }


def expected_events(loop: str = "loop_agent") -> list[tuple[Any, ...]]:
    """The token and event sequence of a 3-iteration loop, as `digest` writes it."""
    sequence: list[tuple[Any, ...]] = []
    for i, answer in enumerate(ANSWERS, start=1):
        sequence.append(("iteration_started", loop, i, 3))
        sequence.extend(("token", i, word) for word in answer.replace(" ", "| |").split("|"))
        sequence.append(("agent_finished", loop, i, answer))
        sequence.append(
            ("evaluation_finished", loop, i, i == 3, 60.0 + 10 * i, f"feedback {i}", "scored")
        )
    sequence.append(("loop_finished", loop, "accepted", 3, 90.0, 3, 3, "five six"))
    return sequence


def digest(mode: str, payload: Any) -> tuple[Any, ...] | None:
    """A comparable summary of one stream item (None for items that are not the loop's)."""
    if mode == "messages":
        chunk, metadata = payload
        if role_of(metadata) == "agent" and isinstance(chunk, AIMessageChunk):
            return ("token", iteration_of(metadata), chunk.text)
        return None
    assert is_loop_event(payload), payload
    event = payload
    assert isinstance(event.get("loop"), str)
    if event["type"] == "iteration_started":
        return (event["type"], event["loop"], event["iteration"], event["max_iterations"])
    if event["type"] == "agent_finished":
        assert event["seconds"] >= 0
        assert (event["input_tokens"], event["output_tokens"]) == (0, 0)  # the fake reports none
        return (event["type"], event["loop"], event["iteration"], event["answer"])
    if event["type"] == "evaluation_finished":
        assert event["seconds"] >= 0
        assert (event["input_tokens"], event["output_tokens"]) == (0, 0)  # no model call
        assert event["decided_by"] == [event["evaluator"]]
        return (
            event["type"],
            event["loop"],
            event["iteration"],
            event["stop"],
            event["score"],
            event["feedback"],
            event["evaluator"],
        )
    return (
        event["type"],
        event["loop"],
        event["stop_reason"],
        event["iterations"],
        event["best_score"],
        event["best_iteration"],
        event["selected_iteration"],
        event["answer"],
    )


async def test_tokens_and_events_of_a_three_iteration_loop():
    loop = create_loop_agent(FakeChat.of(*ANSWERS), scored, max_iterations=3)
    seen = []
    async for mode, payload in loop.astream(
        {"messages": [REQUEST]}, stream_mode=["messages", "custom"]
    ):
        if (item := digest(mode, payload)) is not None:
            seen.append(item)
    assert seen == expected_events()


def test_sync_stream_gives_the_same_sequence():
    loop = create_loop_agent(FakeChat.of(*ANSWERS), scored, max_iterations=3, name="poet")
    seen = [
        item
        for mode, payload in loop.stream(
            {"messages": [REQUEST]}, stream_mode=["messages", "custom"]
        )
        if (item := digest(mode, payload)) is not None
    ]
    assert seen == expected_events("poet")


async def test_graph_agent_tokens_carry_the_iteration_with_subgraphs():
    agent = create_agent(FakeChat.of(*ANSWERS), system_prompt="You write haiku.")
    loop = create_loop_agent(agent, scored, max_iterations=3)
    seen = []
    namespaces = set()
    async for namespace, mode, payload in loop.astream(
        {"messages": [REQUEST]}, stream_mode=["messages", "custom"], subgraphs=True
    ):
        if (item := digest(mode, payload)) is not None:
            seen.append(item)
            if item[0] == "token":
                namespaces.add(namespace[0].split(":")[0])
                assert payload[1]["langgraph_node"] == "model"  # the agent graph's own node
            else:
                assert namespace == ()
    assert seen == expected_events()
    assert namespaces == {"invoke_agent"}


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str


@pytest.mark.parametrize("graph_agent", [False, True], ids=["chat-model", "create_agent"])
async def test_sequence_through_a_parent_graph_with_subgraphs(graph_agent):
    model = FakeChat.of(*ANSWERS)
    agent = create_agent(model, system_prompt="You write haiku.") if graph_agent else model
    loop = create_loop_agent(agent, scored, max_iterations=3, name="refine")
    parent = (
        StateGraph(Parent)
        .add_node("prepare", lambda state: {"topic": "rain"})
        .add_node("refine", loop)
        .add_edge(START, "prepare")
        .add_edge("prepare", "refine")
        .compile()
    )
    seen = []
    async for namespace, mode, payload in parent.astream(
        {"messages": [REQUEST]}, stream_mode=["messages", "custom"], subgraphs=True
    ):
        if (item := digest(mode, payload)) is not None:
            seen.append(item)
            assert namespace[0].startswith("refine:")
    assert seen == expected_events("refine")


async def test_new_loop_on_a_thread_numbers_from_one_again():
    loop = create_loop_agent(
        FakeChat.of(*ANSWERS), scored, max_iterations=3, checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    first = [e async for e in loop.astream({"messages": [REQUEST]}, config, stream_mode="custom")]
    second = [
        e
        async for e in loop.astream(
            {"messages": [HumanMessage("Another one.")]}, config, stream_mode="custom"
        )
    ]
    started = [e["iteration"] for e in second if e["type"] == "iteration_started"]
    assert started == [1, 2, 3]
    assert first[-1]["type"] == second[-1]["type"] == "loop_finished"


def test_loop_finished_at_the_cap_without_scores():
    def never(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "again"}

    loop = create_loop_agent(FakeChat.of("a", "b"), never, max_iterations=2)
    events = list(loop.stream({"messages": [REQUEST]}, stream_mode="custom"))
    assert [e["type"] for e in events] == [
        "iteration_started",
        "agent_finished",
        "evaluation_finished",
        "iteration_started",
        "agent_finished",
        "evaluation_finished",
        "loop_finished",
    ]
    assert events[-1] == {
        "type": "loop_finished",
        "loop": "loop_agent",
        "stop_reason": "max_iterations",
        "iterations": 2,
        "best_score": None,
        "best_iteration": None,
        "selected_iteration": 2,
        "answer": "b",
    }


def test_loop_finished_names_the_selected_answer():
    def scores(context: LoopContext) -> LoopEvaluation:
        score = {1: 50, 2: 90, 3: 70}[context["iteration"]]
        return {"stop": False, "feedback": "again", "score": score}

    loop = create_loop_agent(
        FakeChat.of(*ANSWERS), scores, max_iterations=3, controls=[AnswerSelection("best")]
    )
    events = list(loop.stream({"messages": [REQUEST]}, stream_mode="custom"))
    finished = events[-1]
    assert (finished["stop_reason"], finished["iterations"]) == ("max_iterations", 3)
    assert (finished["best_score"], finished["best_iteration"]) == (90.0, 2)
    assert (finished["selected_iteration"], finished["answer"]) == (2, "three four")


def test_loop_finished_under_a_low_recursion_limit():
    def never(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "again", "score": 5}

    loop = create_loop_agent(FakeChat.of("a"), never, max_iterations=50)
    events = list(
        loop.stream({"messages": [REQUEST]}, {"recursion_limit": 10}, stream_mode="custom")
    )
    finished = events[-1]
    assert finished["type"] == "loop_finished"
    assert finished["stop_reason"] == "recursion_limit"
    assert finished["iterations"] == sum(e["type"] == "iteration_started" for e in events)
    assert (finished["best_score"], finished["best_iteration"]) == (5.0, finished["iterations"])


def test_agent_finished_reports_tokens():
    answer = AIMessage(
        "done", usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    )
    loop = create_loop_agent(lambda messages: answer, lambda c: {"stop": True}, 1)
    events = list(loop.stream({"messages": [REQUEST]}, stream_mode="custom"))
    finished = next(e for e in events if e["type"] == "agent_finished")
    assert (finished["answer"], finished["input_tokens"], finished["output_tokens"]) == (
        "done",
        12,
        5,
    )


def test_evaluation_finished_reports_the_judges_tokens():
    judge_model = FakeChat.of(
        AIMessage(
            "fine", usage_metadata={"input_tokens": 40, "output_tokens": 9, "total_tokens": 49}
        )
    )

    def judge(context: LoopContext) -> LoopEvaluation:
        judge_model.invoke("Is it good?")
        return {"stop": True, "score": 1.0}

    loop = create_loop_agent(FakeChat.of("done"), judge, 1)
    events = list(loop.stream({"messages": [REQUEST]}, stream_mode="custom"))
    evaluated = next(e for e in events if e["type"] == "evaluation_finished")
    assert (evaluated["input_tokens"], evaluated["output_tokens"]) == (40, 9)


def test_evaluation_finished_names_the_member_that_decided():
    short = text_rule(lambda text: len(text) <= 9, "At most nine characters.", name="short")
    loop = create_loop_agent(
        FakeChat.of("far too long", "ok"), all_of(short, scored, name="checks"), 3
    )
    events = [
        e
        for e in loop.stream({"messages": [REQUEST]}, stream_mode="custom")
        if e["type"] == "evaluation_finished"
    ]
    assert [(e["evaluator"], e["decided_by"], e["stop"]) for e in events] == [
        ("checks", ["short"], False),  # the rule asked to continue; the rest was skipped
        ("checks", ["scored"], False),
        ("checks", ["short", "scored"], True),  # every member accepted
    ]


# -- runs: names, tags, metadata --------------------------------------------------------


class RunRecorder(BaseCallbackHandler):
    """Records the name, tags and metadata of every chain and chat-model run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, list[str], dict[str, Any]]] = []

    def on_chain_start(self, serialized, inputs, *, tags=None, metadata=None, **kwargs):
        self.runs.append(("chain", kwargs.get("name") or "", tags or [], metadata or {}))

    def on_chat_model_start(self, serialized, messages, *, tags=None, metadata=None, **kwargs):
        self.runs.append(("model", kwargs.get("name") or "", tags or [], metadata or {}))


def test_runs_are_named_tagged_and_carry_the_iteration():
    judge_model = FakeChat.of("fine")

    def judge(context: LoopContext) -> LoopEvaluation:
        # an LLM call inside a plain function inherits the evaluator run's tags and metadata
        judge_model.invoke("Is it good?")
        return scored(context)

    recorder = RunRecorder()
    loop = create_loop_agent(FakeChat.of(*ANSWERS), judge, max_iterations=3, name="poet")
    loop.invoke({"messages": [REQUEST]}, {"callbacks": [recorder]})

    named = [(name, tags, meta) for kind, name, tags, meta in recorder.runs if kind == "chain"]
    calls = [(name, tags, meta) for name, tags, meta in named if name.startswith("iteration ")]
    assert [name for name, _, _ in calls] == [
        f"iteration {i}: {role}" for i in (1, 2, 3) for role in ("agent", "evaluator")
    ]
    for name, tags, meta in calls:
        iteration, role = int(name.split()[1].rstrip(":")), name.split()[2]
        assert {"loop_agents", f"iteration:{iteration}", f"loop_role:{role}"} <= set(tags)
        assert (meta["loop_name"], meta["loop_iteration"], meta["loop_role"]) == (
            "poet",
            iteration,
            role,
        )

    models = [(tags, meta) for kind, _, tags, meta in recorder.runs if kind == "model"]
    assert [(m["loop_iteration"], m["loop_role"]) for _, m in models] == [
        (i, role) for i in (1, 2, 3) for role in ("agent", "evaluator")
    ]
    assert all("loop_agents" in tags for tags, _ in models)


# -- helpers ------------------------------------------------------------------------------


def test_iteration_config_keeps_the_callers_config():
    config = iteration_config(
        {"tags": ["mine"], "metadata": {"user": "ann"}, "configurable": {"thread_id": "t"}},
        loop="poet",
        iteration=2,
        role="agent",
    )
    assert config["run_name"] == "iteration 2: agent"
    assert set(config["tags"]) == {"mine", "loop_agents", "iteration:2", "loop_role:agent"}
    assert config["metadata"] == {
        "user": "ann",
        "loop_name": "poet",
        "loop_iteration": 2,
        "loop_role": "agent",
    }
    assert config["configurable"] == {"thread_id": "t"}


def test_metadata_readers_and_event_guard():
    assert iteration_of({"loop_iteration": 3}) == 3
    assert iteration_of({"loop_iteration": True}) is None
    assert iteration_of({}) is None
    assert role_of({"loop_role": "evaluator"}) == "evaluator"
    assert role_of({"loop_role": "compaction"}) == "compaction"
    assert role_of({"loop_role": "judge"}) is None
    assert is_loop_event({"type": "loop_finished", "loop": "x"})
    assert not is_loop_event({"type": "progress", "loop": "x"})
    assert not is_loop_event({"type": "loop_finished"})
    assert not is_loop_event("loop_finished")
    assert {
        "iteration_started",
        "agent_finished",
        "agent_failed",
        "candidates_judged",
        "evaluation_finished",
        "loop_finished",
        "history_compacted",
    } == LOOP_EVENT_TYPES
