"""What a loop accepts as input: clear errors before anything runs, and the graph stays a graph.

Issue 12, items 9-11: ``invoke(None)`` without a checkpointer, malformed ``messages`` /
``init_messages``, a bare list or an int, and ``Command(resume=None)`` each raise a
`LoopInputError` naming the field, what was given and what is expected, in the sync and
the async call styles, without calling the agent.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from loop_agents import (
    InvalidReviewError,
    LoopAgent,
    LoopContext,
    LoopEvaluation,
    LoopInputError,
    create_loop_agent,
    human_review,
)
from tests.durable_helpers import REQUEST, CountingAgent, thread
from tests.fakes import FakeChat, texts


def accept(context: LoopContext) -> LoopEvaluation:
    return {"stop": True}


BAD_INPUTS = [
    ({"messages": None}, r"'messages' is None; expected a list of messages"),
    ({"messages": [1, 2]}, r"'messages'\[0\] is int 1, not a message; a message is"),
    ({"messages": [REQUEST, None]}, r"'messages'\[1\] is NoneType None, not a message"),
    ({"messages": [{"text": "hi"}]}, r"'messages'\[0\] is a mapping with keys \['text'\]"),
    ({"messages": 7}, r"'messages' must be a list of messages; got int 7"),
    (
        {"messages": [REQUEST], "init_messages": "x"},
        r"'init_messages' must be a list of messages; got str 'x'",
    ),
    ({"messages": [REQUEST], "init_messages": [3]}, r"'init_messages'\[0\] is int 3"),
    ([REQUEST], r"a loop's input must be a mapping .*got list .*Put the list under 'messages'"),
    (5, r"a loop's input must be a mapping such as \{'messages': .*got int 5"),
    ("Write a haiku", r"got str 'Write a haiku'. Put it in a list under 'messages'"),
    ({"message": [REQUEST]}, r"got unknown keys \['message'\]"),
    ({"messages": [REQUEST], "iteration": 0}, r"got unknown keys \['iteration'\]"),
    ({"messages": []}, r"a loop needs a request to start from"),
]


@pytest.mark.parametrize(("payload", "message"), BAD_INPUTS)
def test_bad_input_is_a_clear_error_before_the_agent_is_called(payload, message):
    agent = CountingAgent()
    loop = create_loop_agent(agent, accept, 2)
    with pytest.raises(LoopInputError, match=message):
        loop.invoke(payload)
    with pytest.raises(LoopInputError, match=message):
        list(loop.stream(payload))
    assert agent.calls == []


@pytest.mark.parametrize(("payload", "message"), BAD_INPUTS)
async def test_bad_input_is_a_clear_error_async(payload, message):
    agent = CountingAgent()
    loop = create_loop_agent(agent, accept, 2)
    with pytest.raises(LoopInputError, match=message):
        await loop.ainvoke(payload)
    with pytest.raises(LoopInputError, match=message):
        [chunk async for chunk in loop.astream(payload)]
    assert agent.calls == []


def test_loop_input_error_is_a_type_and_a_value_error():
    loop = create_loop_agent(CountingAgent(), accept, 2)
    with pytest.raises(TypeError):
        loop.invoke(5)
    with pytest.raises(ValueError):
        loop.invoke({"messages": None})


def test_invoke_none_without_a_checkpointer_says_what_to_pass():
    agent = CountingAgent()
    loop = create_loop_agent(agent, accept, 2)
    message = (
        r"called with None, which resumes the run saved on a thread, and this loop has no "
        r"checkpointer.*Pass the request: loop.invoke\(\{'messages': \[HumanMessage"
    )
    with pytest.raises(LoopInputError, match=message):
        loop.invoke(None)
    with pytest.raises(LoopInputError, match=message):
        list(loop.stream(None))
    assert agent.calls == []


async def test_ainvoke_none_without_a_checkpointer_says_what_to_pass():
    loop = create_loop_agent(CountingAgent(), accept, 2)
    with pytest.raises(LoopInputError, match="this loop has no checkpointer"):
        await loop.ainvoke(None)


async def test_none_on_a_thread_with_nothing_saved_names_the_thread(async_saver):
    agent = CountingAgent()
    loop = create_loop_agent(agent, accept, 2, checkpointer=async_saver)
    with pytest.raises(LoopInputError, match=r"thread 'nothing-here' has no saved run"):
        await loop.ainvoke(None, thread("nothing-here"))
    assert agent.calls == []


def test_none_on_a_thread_with_nothing_saved_sync(saver):
    loop = create_loop_agent(CountingAgent(), accept, 2, checkpointer=saver)
    with pytest.raises(LoopInputError, match=r"thread 'empty' has no saved run"):
        loop.invoke(None, thread("empty"))


def test_accepted_message_forms_still_work():
    chat = FakeChat.of("answer")
    loop = create_loop_agent(chat, accept, 2)
    for payload in [
        {"messages": "Write a haiku about rain."},  # one message, as add_messages takes it
        {"messages": [("user", "Write a haiku about rain.")]},
        {"messages": [{"role": "user", "content": "Write a haiku about rain."}]},
        {"messages": ["Write a haiku about rain."]},
        {"init_messages": ["Write a haiku about rain."]},
    ]:
        result = loop.invoke(payload)
        assert texts(result["init_messages"]) == [("human", "Write a haiku about rain.")]
        assert result["last_response"].text == "answer"


def test_command_resume_none_lists_the_accepted_answers_and_the_thread_stays_paused():
    agent = CountingAgent()
    loop = create_loop_agent(agent, human_review(), 3, checkpointer=InMemorySaver())
    config = thread("review")
    loop.invoke({"messages": [REQUEST]}, config)
    for command in (Command(resume=None), Command()):
        with pytest.raises(
            LoopInputError,
            match=r"Command\(resume=None\) carries no answer.*Command\(resume=True\) to accept",
        ):
            loop.invoke(command, config)
    state = loop.get_state(config)
    assert state.next == ("evaluate",)
    assert state.interrupts[0].value["answer"] == "answer 1"
    assert loop.invoke(Command(resume=True), config)["stop_reason"] == "accepted"
    assert agent.calls == [1]


async def test_command_resume_none_async():
    loop = create_loop_agent(CountingAgent(), human_review(), 3, checkpointer=InMemorySaver())
    config = thread("review-async")
    await loop.ainvoke({"messages": [REQUEST]}, config)
    with pytest.raises(LoopInputError, match=r"Command\(resume=None\) carries no answer"):
        await loop.ainvoke(Command(resume=None), config)
    result = await loop.ainvoke(Command(resume="Shorter, please."), config)
    assert result["__interrupt__"][0].value["iteration"] == 2


# -- still a LangGraph graph ----------------------------------------------------------


def test_the_loop_is_a_compiled_state_graph_and_copies_keep_the_class():
    loop = create_loop_agent(CountingAgent(), accept, 2, concurrent_runs="wait", busy_timeout=3)
    assert isinstance(loop, LoopAgent)
    for copy in (loop.with_config(tags=["x"]), loop.copy(), loop.with_config(recursion_limit=9)):
        assert isinstance(copy, LoopAgent)
        assert (copy.concurrent_runs, copy.busy_timeout) == ("wait", 3.0)
    assert set(loop.get_graph().nodes) == {"__start__", "invoke_agent", "evaluate", "__end__"}
    with pytest.raises(LoopInputError):
        loop.with_config(tags=["x"]).invoke({"messages": None})


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str


@pytest.mark.parametrize("checkpointer", [None, InMemorySaver])
def test_nested_in_a_parent_graph_with_keys_of_its_own(checkpointer):
    loop = create_loop_agent(FakeChat.of("answer"), accept, 2)
    parent = (
        StateGraph(Parent)
        .add_node("loop", loop)
        .add_edge(START, "loop")
        .compile(checkpointer=checkpointer() if checkpointer else None)
    )
    config = thread("parent")
    result = parent.invoke({"messages": [REQUEST], "topic": "rain"}, config)
    assert result["topic"] == "rain"
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer")]
    if checkpointer:
        # the parent thread runs again, and its nested loop with it
        again = parent.invoke({"messages": [HumanMessage("And snow?")]}, config)
        assert [m.text for m in again["messages"] if isinstance(m, AIMessage)] == [
            "answer",
            "answer",
        ]


async def test_nested_loop_streams_with_subgraphs():
    loop = create_loop_agent(FakeChat.of("answer"), accept, 2, checkpointer=InMemorySaver())
    parent = StateGraph(Parent).add_node("loop", loop).add_edge(START, "loop").compile()
    namespaces: set[tuple[str, ...]] = set()
    async for namespace, _mode, _chunk in parent.astream(
        {"messages": [REQUEST], "topic": "t"},
        stream_mode=["updates", "messages"],
        subgraphs=True,
    ):
        namespaces.add(namespace)
    assert () in namespaces
    assert any(ns and ns[0].startswith("loop:") for ns in namespaces)


def test_a_bad_init_messages_in_a_parent_state_is_named():
    class WithInit(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        init_messages: Any

    loop = create_loop_agent(CountingAgent(), accept, 2)
    parent = StateGraph(WithInit).add_node("loop", loop).add_edge(START, "loop").compile()
    with pytest.raises(LoopInputError, match=r"'init_messages' must be a list of messages"):
        parent.invoke({"messages": [REQUEST], "init_messages": "x"})


def test_a_resume_with_a_wrong_value_is_still_the_reviews_clear_error():
    loop = create_loop_agent(CountingAgent(), human_review(), 3, checkpointer=InMemorySaver())
    config = thread("wrong")
    loop.invoke({"messages": [REQUEST]}, config)
    with pytest.raises(InvalidReviewError, match=r"the review answer is int 5; expected True"):
        loop.invoke(Command(resume=5), config)
    assert loop.get_state(config).next == ("evaluate",)
    assert loop.invoke(Command(resume=True), config)["stop_reason"] == "accepted"


async def test_every_way_of_running_checks_the_input():
    agent = CountingAgent()
    loop = create_loop_agent(agent, accept, 2)
    with pytest.raises(LoopInputError, match="got int 5"):
        [event async for event in loop.astream_events(5, version="v2")]
    with pytest.raises(LoopInputError, match="got int 5"):
        loop.batch([{"messages": [REQUEST]}, 5])
    with pytest.raises(LoopInputError, match="got int 5"):
        await loop.abatch([5])
    with pytest.raises(LoopInputError, match="got int 5"):
        loop.invoke(5, stream_mode="updates", version="v2")
    assert agent.calls == [1]  # only the batch's good input ran


# -- updates of the loop's keys are checked before LangGraph stores them -------------------

BAD_UPDATES = [
    ({"iteration": "zzz"}, "'iteration' takes an int"),
    ({"messages": None}, "'messages' is None"),
    ({"feedback": 5}, "'feedback' takes a list of strings"),
    ({"records": "x"}, "'records' takes a list of iteration records"),
    ({"stop": "yes"}, "'stop' takes True or False"),
    ({"agent_state": ["files"]}, "'agent_state' takes a mapping"),
    ([("feedback", "x")], "'feedback' takes a list of strings"),
]


@pytest.mark.parametrize(("update", "match"), BAD_UPDATES)
def test_a_wrongly_typed_update_is_refused_and_the_thread_stays_readable(update, match):
    saver = InMemorySaver()
    loop = create_loop_agent(FakeChat.of("draft"), human_review(), 3, checkpointer=saver)
    config = thread("paused")
    paused = loop.invoke({"messages": [REQUEST]}, config)
    assert "__interrupt__" in paused
    before = loop.get_state(config)
    with pytest.raises(LoopInputError, match=match):
        loop.invoke(Command(update=update, resume=True), config)
    with pytest.raises(LoopInputError, match=match):
        loop.update_state(config, update if isinstance(update, dict) else dict(update))
    after = loop.get_state(config)
    assert after.values == before.values
    assert after.next == before.next
    result = loop.invoke(Command(resume=True), config)  # resumable, exactly as before
    assert result["stop_reason"] == "accepted"
    later = loop.invoke({"messages": [HumanMessage("Again.")]}, config)  # and a new request
    assert "__interrupt__" in later


async def test_a_wrongly_typed_update_is_refused_under_ainvoke_too():
    loop = create_loop_agent(FakeChat.of("draft"), human_review(), 3, checkpointer=InMemorySaver())
    config = thread("paused-async")
    await loop.ainvoke({"messages": [REQUEST]}, config)
    with pytest.raises(LoopInputError, match="'iteration' takes an int"):
        await loop.ainvoke(Command(update={"iteration": "zzz"}, resume=True), config)
    with pytest.raises(LoopInputError, match="'iteration' takes an int"):
        await loop.aupdate_state(config, {"iteration": "zzz"})
    result = await loop.ainvoke(Command(resume=True), config)
    assert result["stop_reason"] == "accepted"
