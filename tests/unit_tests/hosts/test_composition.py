"""A loop inside larger graphs: as a node, in sequence, inside a loop; output modes; limits."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from loop_agents import LoopContext, LoopEvaluation, StopReason, create_loop_agent
from loop_agents.controls import AnswerSelection
from loop_agents.loop.events import is_loop_event
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import record_answer
from tests.fakes import FakeChat, review, texts

REQUEST = HumanMessage("Write a haiku about rain.")


def until(n: int, label: str = "fb"):
    """An evaluator that accepts the n-th answer and records every context it saw."""
    seen: list[LoopContext] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(context)
        return {"stop": context["iteration"] >= n, "feedback": f"{label} {context['iteration']}"}

    evaluate.seen = seen  # type: ignore[attr-defined]
    return evaluate


def never(label: str = "again"):
    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": f"{label} {context['iteration']}"}

    return evaluate


def numbered(prefix: str = "answer") -> FakeChat:
    return FakeChat.of(*(f"{prefix} {i}" for i in range(1, 1001)))


class Conversation(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Reporting(TypedDict, total=False):
    """A parent that also takes the loop's stop_reason and iteration."""

    messages: Annotated[list[AnyMessage], add_messages]
    stop_reason: StopReason | None
    iteration: int


class OwnKeys(TypedDict, total=False):
    """A parent whose own keys share the loop's key names."""

    messages: Annotated[list[AnyMessage], add_messages]
    feedback: str
    iteration: str
    seen_by_next_step: dict[str, str]


def single_node_parent(schema: type, loop: Any) -> Any:
    return StateGraph(schema).add_node("refine", loop).add_edge(START, "refine").compile()


def loop_events(chunks: list[tuple[tuple[str, ...], str, Any]]) -> list[tuple[str, dict]]:
    """``(node of the innermost namespace, event)`` for every loop event on the custom stream."""
    return [
        (ns[-1].split(":")[0] if ns else "", data)
        for ns, mode, data in chunks
        if mode == "custom" and is_loop_event(data)
    ]


# -- a loop as a node ----------------------------------------------------------------


def test_parent_messages_are_the_loop_input_and_its_result_flows_back():
    chat = numbered()
    evaluate = until(2)
    loop = create_loop_agent(chat, evaluate)
    seen_after: list[list[AnyMessage]] = []

    def after(state: Reporting) -> dict[str, Any]:
        seen_after.append(list(state["messages"]))
        return {}

    parent = (
        StateGraph(Reporting)
        .add_node("refine", loop)
        .add_node("after", after)
        .add_edge(START, "refine")
        .add_edge("refine", "after")
        .compile()
    )
    history = [HumanMessage("Hello."), AIMessage("Hi, what shall I write?")]
    result = parent.invoke({"messages": [*history, REQUEST]})

    # the loop's agent was sent the parent's conversation
    assert texts(chat.calls[0]) == texts([*history, REQUEST])
    assert texts(evaluate.seen[0]["init_messages"]) == texts([*history, REQUEST])
    # the loop's transcript (the default output mode) came back into the parent
    assert texts(result["messages"]) == [
        *texts(history),
        ("human", REQUEST.text),
        ("ai", "answer 1"),
        ("human", review("fb 1", 1)),
        ("ai", "answer 2"),
    ]
    assert texts(seen_after[0]) == texts(result["messages"])
    # a parent that declares the loop's keys receives them
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2


@pytest.mark.parametrize("output_mode", ["full_history", "last_message"])
def test_parent_keys_named_like_the_loops_come_out_unchanged(output_mode):
    evaluate = until(2)
    loop = create_loop_agent(numbered(), evaluate, output_mode=output_mode)

    def next_step(state: OwnKeys) -> dict[str, Any]:
        return {
            "seen_by_next_step": {"feedback": state["feedback"], "iteration": state["iteration"]}
        }

    parent = (
        StateGraph(OwnKeys)
        .add_node("refine", loop)
        .add_node("next_step", next_step)
        .add_edge(START, "refine")
        .add_edge("refine", "next_step")
        .add_edge("next_step", END)
        .compile()
    )
    result = parent.invoke(
        {"messages": [REQUEST], "feedback": "the editor's note", "iteration": "draft A"}
    )
    assert result["feedback"] == "the editor's note"
    assert result["iteration"] == "draft A"
    assert result["seen_by_next_step"] == {"feedback": "the editor's note", "iteration": "draft A"}
    # inside the loop, feedback and iteration were the loop's own
    assert [c["iteration"] for c in evaluate.seen] == [1, 2]
    assert evaluate.seen[1]["feedback"] == ["fb 1"]
    if output_mode == "full_history":
        assert texts(result["messages"]) == [
            ("human", REQUEST.text),
            ("ai", "answer 1"),
            ("human", review("fb 1", 1)),
            ("ai", "answer 2"),
        ]
    else:
        assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 2")]


def test_parent_keys_named_like_the_loops_with_the_default_mode_receive_the_loops_values():
    """The documented reason for the option: full_state writes every key a parent has."""
    loop = create_loop_agent(numbered(), until(2))

    class Parent(TypedDict, total=False):
        messages: Annotated[list[AnyMessage], add_messages]
        feedback: Any

    result = single_node_parent(Parent, loop).invoke(
        {"messages": [REQUEST], "feedback": "the editor's note"}
    )
    assert result["feedback"] == ["fb 1", "fb 2"]


# -- output modes, standalone --------------------------------------------------------


def test_full_history_returns_the_transcript_only():
    full = create_loop_agent(numbered(), until(3)).invoke({"messages": [REQUEST]})
    history = create_loop_agent(numbered(), until(3), output_mode="full_history").invoke(
        {"messages": [REQUEST]}
    )
    assert set(history) == {"messages"}
    assert texts(history["messages"]) == texts(full["messages"])


def test_last_message_keeps_the_request_and_the_final_answer():
    loop = create_loop_agent(numbered(), until(3), output_mode="last_message")
    result = loop.invoke({"messages": [REQUEST]})
    assert set(result) == {"messages"}
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 3")]
    assert not any(is_feedback(m) for m in result["messages"])


def test_last_message_keeps_the_records_of_every_attempt():
    loop = create_loop_agent(numbered(), until(3), output_mode="last_message")
    updates = list(loop.stream({"messages": [REQUEST]}, stream_mode="updates"))
    records = [r for u in updates if "evaluate" in u for r in u["evaluate"]["records"]]
    # the attempts leave messages when the loop ends, so these records keep their answers
    assert [r["answer"].text for r in records] == ["answer 1", "answer 2", "answer 3"]
    assert [record_answer(r, {"messages": []}).text for r in records][-1] == "answer 3"
    assert [r["answer_id"] for r in records] == [r["answer"].id for r in records]
    assert [r["feedback"] for r in records] == ["fb 1", "fb 2", "fb 3"]


@pytest.mark.parametrize("seed_form", [False, True])
def test_last_message_drops_tool_traffic_and_keeps_earlier_conversation(seed_form):
    @tool
    def word_count(text: str) -> int:
        """Count the words in a text."""
        return len(text.split())

    chat = FakeChat.of(
        AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b"}, "id": "c1"}]),
        "two words",
        "final answer",
    )
    agent = create_agent(chat, [word_count])
    loop = create_loop_agent(agent, until(2), output_mode="last_message")
    history = [HumanMessage("Hello."), AIMessage("Hi.")]
    payload: dict[str, Any] = {"messages": [*history, REQUEST]}
    if seed_form:
        payload["init_messages"] = [REQUEST]
    result = loop.invoke(payload)
    assert texts(result["messages"]) == [
        *texts(history),
        ("human", REQUEST.text),
        ("ai", "final answer"),
    ]


def test_last_message_with_best_of_selection_keeps_the_chosen_answer():
    def judge(context: LoopContext) -> LoopEvaluation:
        score = {1: 40.0, 2: 90.0, 3: 60.0}[context["iteration"]]
        return {"stop": False, "feedback": f"scored {score}", "score": score}

    loop = create_loop_agent(
        numbered(), judge, 3, controls=[AnswerSelection("best")], output_mode="last_message"
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 2")]


def test_last_message_with_the_seed_input_form():
    loop = create_loop_agent(numbered(), until(2), output_mode="last_message")
    result = loop.invoke({"init_messages": [REQUEST], "messages": [REQUEST]})
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 2")]


def test_last_message_when_the_request_is_not_in_the_conversation():
    history = [HumanMessage("Earlier question."), AIMessage("Earlier answer.")]
    loop = create_loop_agent(numbered(), until(2), output_mode="last_message")
    result = loop.invoke({"init_messages": [REQUEST], "messages": history})
    assert texts(result["messages"]) == [*texts(history), ("ai", "answer 2")]


def test_last_message_on_a_thread_keeps_one_answer_per_request():
    chat = numbered()
    loop = create_loop_agent(
        chat, until(2), output_mode="last_message", checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [REQUEST]}, config)
    follow_up = HumanMessage("Now one about snow.")
    result = loop.invoke({"messages": [follow_up]}, config)
    assert texts(result["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "answer 2"),
        ("human", follow_up.text),
        ("ai", "answer 4"),
    ]
    # the second loop started fresh and its agent saw the kept conversation
    assert texts(chat.calls[2]) == texts(result["messages"][:3])
    state = loop.get_state(config).values
    assert state["iteration"] == 2
    assert state["stop_reason"] == "accepted"


async def test_output_modes_async():
    loop = create_loop_agent(numbered(), until(2), output_mode="last_message")
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 2")]


@pytest.mark.parametrize("mode", ["last", "messages", None, 3])
def test_unknown_output_mode_is_a_value_error(mode):
    with pytest.raises(
        ValueError,
        match=r"output_mode must be one of 'full_state', 'full_history', 'last_message'; got",
    ):
        create_loop_agent(numbered(), until(1), output_mode=mode)


# -- two loops in sequence -----------------------------------------------------------


def two_loop_pipeline(outline_chat: FakeChat, draft_chat: FakeChat):
    outline_judge = until(2, "outline feedback")
    draft_judge = until(3, "draft feedback")
    outline = create_loop_agent(
        outline_chat, outline_judge, name="outline", output_mode="last_message"
    )
    draft = create_loop_agent(draft_chat, draft_judge, name="draft", output_mode="full_history")
    parent = (
        StateGraph(Conversation)
        .add_node("outline", outline)
        .add_node("draft", draft)
        .add_edge(START, "outline")
        .add_edge("outline", "draft")
        .compile()
    )
    return parent, outline_judge, draft_judge


def test_two_loops_in_sequence_each_with_its_own_evaluator():
    draft_chat = numbered("draft")
    parent, outline_judge, draft_judge = two_loop_pipeline(numbered("outline"), draft_chat)
    result = parent.invoke({"messages": [REQUEST]})

    assert [c["last_response"].text for c in outline_judge.seen] == ["outline 1", "outline 2"]
    assert [c["last_response"].text for c in draft_judge.seen] == ["draft 1", "draft 2", "draft 3"]
    # the drafting loop started from the outline loop's final answer
    assert texts(draft_chat.calls[0]) == [("human", REQUEST.text), ("ai", "outline 2")]
    assert texts(draft_judge.seen[0]["init_messages"]) == texts(draft_chat.calls[0])
    assert texts(result["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "outline 2"),
        ("ai", "draft 1"),
        ("human", review("draft feedback 1", 1)),
        ("ai", "draft 2"),
        ("human", review("draft feedback 2", 2)),
        ("ai", "draft 3"),
    ]


def check_two_loop_stream(chunks: list[tuple[tuple[str, ...], str, Any]]) -> None:
    tokens: dict[str, str] = {}
    for ns, mode, data in chunks:
        if mode == "messages" and data[1]["langgraph_node"] == "invoke_agent":
            assert len(ns) == 1
            node = ns[0].split(":")[0]
            tokens[node] = tokens.get(node, "") + data[0].text
    assert tokens == {"outline": "outline 1outline 2", "draft": "draft 1draft 2draft 3"}

    events = loop_events(chunks)
    # each loop's events come under its own namespace and carry its name
    assert {(node, e["loop"]) for node, e in events} == {("outline", "outline"), ("draft", "draft")}
    finished = [
        (e["loop"], e["stop_reason"], e["iterations"])
        for _, e in events
        if e["type"] == "loop_finished"
    ]
    assert finished == [("outline", "accepted", 2), ("draft", "accepted", 3)]
    judged = [(e["loop"], e["iteration"]) for _, e in events if e["type"] == "evaluation_finished"]
    assert judged == [("outline", 1), ("outline", 2), ("draft", 1), ("draft", 2), ("draft", 3)]


def test_two_loops_in_sequence_stream_tokens_and_events_with_namespaces():
    parent, _, _ = two_loop_pipeline(numbered("outline"), numbered("draft"))
    chunks = list(
        parent.stream({"messages": [REQUEST]}, stream_mode=["messages", "custom"], subgraphs=True)
    )
    check_two_loop_stream(chunks)


async def test_two_loops_in_sequence_astream_tokens_and_events_with_namespaces():
    parent, _, _ = two_loop_pipeline(numbered("outline"), numbered("draft"))
    chunks = [
        chunk
        async for chunk in parent.astream(
            {"messages": [REQUEST]}, stream_mode=["messages", "custom"], subgraphs=True
        )
    ]
    check_two_loop_stream(chunks)


def test_without_subgraphs_the_parent_stream_has_no_loop_internals():
    parent, _, _ = two_loop_pipeline(numbered("outline"), numbered("draft"))
    chunks = list(parent.stream({"messages": [REQUEST]}, stream_mode=["updates", "custom"]))
    assert [mode for mode, _ in chunks] == ["updates", "updates"]
    assert [next(iter(data)) for _, data in chunks] == ["outline", "draft"]


# -- a loop inside a loop ------------------------------------------------------------


def nested_loops(
    inner_max: int = 2,
    outer_max: int = 3,
    *,
    inner_accepts: int | None = 2,
    outer_accepts: int | None = 2,
):
    inner_chat = numbered("inner")
    inner_judge = (
        until(inner_accepts, "inner feedback") if inner_accepts else never("inner feedback")
    )
    outer_judge = (
        until(outer_accepts, "outer feedback") if outer_accepts else never("outer feedback")
    )
    # repairs: each retry sees the answer and its feedback, which the assertions follow
    inner = create_loop_agent(
        inner_chat,
        inner_judge,
        inner_max,
        name="inner",
        output_mode="last_message",
    )
    outer = create_loop_agent(inner, outer_judge, outer_max, name="outer")
    return inner_chat, inner_judge, outer_judge, outer


def test_loop_inside_a_loop():
    inner_chat, inner_judge, outer_judge, outer = nested_loops()
    result = single_node_parent(Reporting, outer).invoke({"messages": [REQUEST]})

    # each outer iteration ran a whole inner loop; the outer judge saw its final answers
    assert [c["last_response"].text for c in outer_judge.seen] == ["inner 2", "inner 4"]
    assert [c["iteration"] for c in inner_judge.seen] == [1, 2, 1, 2]
    # the second inner loop started from the outer conversation, outer feedback included
    assert texts(inner_chat.calls[2]) == [
        ("human", REQUEST.text),
        ("ai", "inner 2"),
        ("human", review("outer feedback 1", 1)),
    ]
    assert texts(result["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "inner 2"),
        ("human", review("outer feedback 1", 1)),
        ("ai", "inner 4"),
    ]
    assert (result["stop_reason"], result["iteration"]) == ("accepted", 2)


async def test_loop_inside_a_loop_streams_both_levels():
    _, _, _, outer = nested_loops()
    parent = single_node_parent(Conversation, outer)
    chunks = [
        chunk
        async for chunk in parent.astream(
            {"messages": [REQUEST]}, stream_mode=["messages", "custom"], subgraphs=True
        )
    ]
    inner_tokens = "".join(
        data[0].text
        for ns, mode, data in chunks
        if mode == "messages" and data[1]["langgraph_node"] == "invoke_agent" and len(ns) == 2
    )
    assert inner_tokens == "inner 1inner 2inner 3inner 4"
    by_depth = {
        (len(ns), data["loop"])
        for ns, mode, data in chunks
        if mode == "custom" and is_loop_event(data)
    }
    assert by_depth == {(1, "outer"), (2, "inner")}
    finished = [
        (data["loop"], data["stop_reason"])
        for _, mode, data in chunks
        if mode == "custom" and is_loop_event(data) and data["type"] == "loop_finished"
    ]
    assert finished == [("inner", "accepted"), ("inner", "accepted"), ("outer", "accepted")]


# -- a parent's recursion limit ------------------------------------------------------


def test_parent_limit_ends_the_loop_cleanly_and_the_parent_goes_on():
    loop = create_loop_agent(numbered(), never(), max_iterations=50)
    ran_after: list[bool] = []

    def after(state: Reporting) -> dict[str, Any]:
        ran_after.append(True)
        return {}

    parent = (
        StateGraph(Reporting)
        .add_node("refine", loop)
        .add_node("after", after)
        .add_edge(START, "refine")
        .add_edge("refine", "after")
        .compile()
    )
    result = parent.invoke({"messages": [REQUEST]}, {"recursion_limit": 12})
    assert result["stop_reason"] == "recursion_limit"
    assert 1 <= result["iteration"] < 50
    assert result["messages"][-1].type == "ai"
    assert ran_after == [True]


@pytest.mark.parametrize("output_mode", ["full_history", "last_message"])
def test_parent_limit_with_a_messages_only_loop_says_why_on_the_stream(output_mode):
    loop = create_loop_agent(numbered(), never(), max_iterations=50, output_mode=output_mode)
    parent = single_node_parent(Conversation, loop)
    chunks = list(
        parent.stream(
            {"messages": [REQUEST]},
            {"recursion_limit": 12},
            stream_mode=["custom", "values"],
            subgraphs=True,
        )
    )
    finished = [e for _, e in loop_events(chunks) if e["type"] == "loop_finished"]
    assert [(e["stop_reason"], e["loop"]) for e in finished] == [("recursion_limit", "loop_agent")]
    final = [data for ns, mode, data in chunks if mode == "values" and ns == ()][-1]
    assert final["messages"][-1].type == "ai"
    answers = [m for m in final["messages"] if m.type == "ai"]
    assert len(answers) == (finished[0]["iterations"] if output_mode == "full_history" else 1)


def test_parent_limit_with_two_loops_in_sequence():
    first = create_loop_agent(numbered("one"), never(), 50, name="first")
    second = create_loop_agent(numbered("two"), never(), 50, name="second")

    class Parent(TypedDict, total=False):
        messages: Annotated[list[AnyMessage], add_messages]
        stop_reason: StopReason | None
        reasons: Annotated[list[str], lambda a, b: a + b]

    def note(state: Parent) -> dict[str, Any]:
        return {"reasons": [str(state["stop_reason"])]}

    parent = (
        StateGraph(Parent)
        .add_node("first", first)
        .add_node("note_first", note)
        .add_node("second", second)
        .add_edge(START, "first")
        .add_edge("first", "note_first")
        .add_edge("note_first", "second")
        .compile()
    )
    result = parent.invoke({"messages": [REQUEST]}, {"recursion_limit": 10})
    assert result["reasons"] == ["recursion_limit"]
    assert result["stop_reason"] == "recursion_limit"
    assert any(m.text.startswith("two") for m in result["messages"])


def test_parent_limit_with_a_loop_inside_a_loop():
    _, _, _, outer = nested_loops(50, 50, inner_accepts=None, outer_accepts=None)
    parent = single_node_parent(Reporting, outer)
    chunks = list(
        parent.stream(
            {"messages": [REQUEST]},
            {"recursion_limit": 12},
            stream_mode=["custom", "values"],
            subgraphs=True,
        )
    )
    finished = [
        (e["loop"], e["stop_reason"])
        for _, e in loop_events(chunks)
        if e["type"] == "loop_finished"
    ]
    outer_iterations = [data for ns, mode, data in chunks if mode == "values" and ns == ()][-1]
    assert outer_iterations["stop_reason"] == "recursion_limit"
    assert 1 <= outer_iterations["iteration"] < 50
    # every inner loop also ended for the limit, then the outer one
    assert finished == [("inner", "recursion_limit")] * outer_iterations["iteration"] + [
        ("outer", "recursion_limit")
    ]


# -- many inputs in one process ------------------------------------------------------


async def test_abatch_runs_independent_loops_with_bounded_concurrency():
    running = peak = 0

    async def agent(messages: list[AnyMessage]) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        answers = sum(1 for m in messages if m.type == "ai")
        return f"{messages[0].text} / attempt {answers + 1}"

    loop = create_loop_agent(agent, until(2))
    requests = [f"request {i}" for i in range(6)]
    results = await loop.abatch(
        [{"messages": [HumanMessage(r)]} for r in requests], config={"max_concurrency": 2}
    )
    assert [r["last_response"].text for r in results] == [f"{r} / attempt 2" for r in requests]
    assert all(r["iteration"] == 2 and r["stop_reason"] == "accepted" for r in results)
    assert 1 <= peak <= 2


# -- a parent's agent_state is the parent's own ------------------------------------------


def merged_files(old: dict[str, str] | None, new: dict[str, str] | None) -> dict[str, str]:
    return {**(old or {}), **(new or {})}


class FileAgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    files: Annotated[dict[str, str], merged_files]


def file_writer(seen: list[dict[str, str]]) -> Any:
    """A graph agent that takes its files as input and adds one per call."""

    def write(state: FileAgentState) -> dict[str, Any]:
        files = dict(state.get("files") or {})
        seen.append(files)
        name = f"/draft{len(files) + 1}.md"
        return {"messages": [AIMessage(f"wrote {name}")], "files": {name: "text"}}

    graph = StateGraph(FileAgentState).add_node("write", write)
    return graph.add_edge(START, "write").add_edge("write", END).compile()


class ParentWithAgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    agent_state: dict[str, Any]  # the parent's own: its user and its files


PARENTS_OWN = {"user": "ann", "files": {"/parent.md": "the parent's file"}}


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("output_mode", ["full_state", "full_history"])
async def test_a_parents_agent_state_is_neither_read_nor_overwritten(call, output_mode):
    seen: list[dict[str, str]] = []
    loop = create_loop_agent(file_writer(seen), until(2), 3, output_mode=output_mode)
    parent = single_node_parent(ParentWithAgentState, loop)
    given = {"messages": [REQUEST], "agent_state": PARENTS_OWN}
    result = await parent.ainvoke(given) if call == "ainvoke" else parent.invoke(given)
    assert seen == [{}, {"/draft1.md": "text"}]  # the agent's own files, from none
    assert result["agent_state"] == PARENTS_OWN
    assert texts(result["messages"])[-1] == ("ai", "wrote /draft2.md")


def test_a_parents_agent_state_stays_its_own_on_a_checkpointed_parent_that_resumes():
    seen: list[dict[str, str]] = []
    failed: list[int] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        if context["iteration"] == 2 and not failed:
            failed.append(2)
            raise RuntimeError("the evaluator failed")
        return until(3)(context)

    loop = create_loop_agent(file_writer(seen), evaluate, 3)
    parent = (
        StateGraph(ParentWithAgentState)
        .add_node("refine", loop)
        .add_edge(START, "refine")
        .compile(checkpointer=InMemorySaver())
    )
    config = {"configurable": {"thread_id": "own-state"}}
    with pytest.raises(RuntimeError, match="the evaluator failed"):
        parent.invoke({"messages": [REQUEST], "agent_state": PARENTS_OWN}, config)
    result = parent.invoke(None, config)
    assert result["agent_state"] == PARENTS_OWN
    assert seen == [{}, {"/draft1.md": "text"}, {"/draft1.md": "text", "/draft2.md": "text"}]


def test_share_agent_state_takes_the_parents_and_gives_the_loops_back():
    seen: list[dict[str, str]] = []
    loop = create_loop_agent(file_writer(seen), until(2), 3, share_agent_state=True)
    result = single_node_parent(ParentWithAgentState, loop).invoke(
        {"messages": [REQUEST], "agent_state": PARENTS_OWN}
    )
    assert seen[0] == PARENTS_OWN["files"]  # the agent started from the parent's files
    assert result["agent_state"] == {
        "user": "ann",
        "files": {"/parent.md": "the parent's file", "/draft2.md": "text", "/draft3.md": "text"},
    }


def test_share_agent_state_must_be_a_bool():
    with pytest.raises(TypeError, match="share_agent_state must be True or False; got str"):
        create_loop_agent(numbered(), until(1), share_agent_state="yes")


def test_a_loop_as_the_agent_of_a_loop_still_carries_its_agents_state():
    seen: list[dict[str, str]] = []
    inner = create_loop_agent(file_writer(seen), until(1), 2, name="inner")
    outer_seen: list[LoopContext] = []

    def outer_judge(context: LoopContext) -> LoopEvaluation:
        outer_seen.append(context)
        return {"stop": context["iteration"] >= 2, "feedback": "one more file"}

    outer = create_loop_agent(inner, outer_judge, 3, name="outer")
    result = outer.invoke({"messages": [REQUEST]})
    assert seen == [{}, {"/draft1.md": "text"}]  # the second inner loop went on from the first
    files = [set(c["agent_state"]["agent_state"]["files"]) for c in outer_seen]
    assert files == [{"/draft1.md"}, {"/draft1.md", "/draft2.md"}]
    assert set(result["agent_state"]["agent_state"]["files"]) == {"/draft1.md", "/draft2.md"}
