"""Threads saved by loop_agents 0.2 and by commit 6df4d16 resume, finish and take a new turn.

``tests/data/saved_threads_0_2/threads.sqlite`` was written by the 0.2 release with
``SqliteSaver`` (``make_threads.py`` next to it, whose agent, evaluators and loops are
used here too): for each form of the loop, ``create_loop_agent`` and ``LoopMiddleware``
inside ``create_agent``, a thread paused for a person at iteration 2 and a finished one
(``AnswerSelection("best")``, the first answer rejected with the higher score). Each test opens a
copy of the file and compares the public results (the conversation's texts, the loop's
iteration, stop reason, feedback, selection and records) with ``expected.json``, which
the same script wrote.

``tests/data/saved_threads_6df4d16/threads.sqlite`` was written at commit 6df4d16, whose
loops had a default ``Adaptive`` (its records carry ``strategy``): a paused and a finished
thread of each form with that default, and a paused one of each form whose ``Adaptive``
chose a fresh sample next. The current loop (which repairs by default) resumes them.

The state schemas of both forms are held here as literal data (`GRAPH_CHANNELS`,
`MIDDLEWARE_CHANNELS`): a checkpoint stores the values of these channels under these
names and is read back through their channel kinds and reducers, so changing any of
them changes how a saved thread loads.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.message import add_messages
from langgraph.managed.base import is_managed_value
from langgraph.types import Command

from loop_agents import LoopMiddleware, create_loop_agent
from tests.data.saved_threads_0_2 import make_threads as saved
from tests.data.saved_threads_6df4d16 import make_threads as saved_6df
from tests.durable_helpers import thread
from tests.fakes import FakeChat

FIXTURE = saved.FIXTURE
EXPECTED: dict[str, Any] = json.loads(saved.EXPECTED.read_text(encoding="utf-8"))
FINISHED = tuple(t for t in saved.THREADS if t not in saved.PAUSED)
NEW_TURN = {"messages": [HumanMessage(saved.NEW_TURN)]}


@pytest.fixture
def threads(tmp_path: Path) -> Iterator[SqliteSaver]:
    """A ``SqliteSaver`` on a copy of the saved threads."""
    path = tmp_path / "threads.sqlite"
    shutil.copy(FIXTURE, path)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


def result_of(thread_id: str, output: dict[str, Any]) -> dict[str, Any]:
    return saved.summary(output, saved.form_of(thread_id))


def finish(loop: Any, thread_id: str) -> dict[str, Any]:
    """The thread's finished result: a paused one is accepted, a finished one read."""
    if thread_id in saved.PAUSED:
        output = loop.invoke(Command(resume=True), thread(thread_id))
        assert "__interrupt__" not in output
        return result_of(thread_id, output)
    return result_of(thread_id, loop.get_state(thread(thread_id)).values)


# -- the fixture ------------------------------------------------------------------------


def test_the_fixture_holds_the_four_threads_and_is_small(threads):
    assert {c.config["configurable"]["thread_id"] for c in threads.list(None)} == set(saved.THREADS)
    assert set(EXPECTED) == set(saved.THREADS)
    assert FIXTURE.stat().st_size < 400_000


# -- paused threads: the person's answer finishes the loop -----------------------------


@pytest.mark.parametrize("thread_id", saved.PAUSED)
def test_a_paused_thread_still_shows_its_review_request(threads, thread_id):
    loop = saved.build(thread_id, threads)
    state = loop.get_state(thread(thread_id))
    assert saved.review_request({"__interrupt__": state.interrupts}) == {
        "kind": "loop_agents.human_review",
        "request": saved.REQUEST,
        "answer": f"draft 2 for: {saved.REQUEST}",
        "iteration": 2,
        "feedback": [saved.REVIEW_FEEDBACK],
    }
    assert result_of(thread_id, state.values) == EXPECTED[thread_id]["saved"]


@pytest.mark.parametrize("thread_id", saved.PAUSED)
def test_a_paused_thread_resumes_and_the_person_accepts(threads, thread_id):
    loop = saved.build(thread_id, threads)
    result = finish(loop, thread_id)

    expected = EXPECTED[thread_id]["result"]
    assert result == expected
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert result["answer"] == f"draft 2 for: {saved.REQUEST}"
    assert result["feedback"] == [saved.REVIEW_FEEDBACK, ""]
    assert [(r["iteration"], r["stop"]) for r in result["records"]] == [(1, False), (2, True)]
    # the finished state reads back the same
    assert result_of(thread_id, loop.get_state(thread(thread_id)).values) == expected


async def test_a_paused_graph_thread_resumes_and_takes_a_new_turn_under_ainvoke(tmp_path):
    path = tmp_path / "threads.sqlite"
    shutil.copy(FIXTURE, path)
    thread_id = saved.GRAPH_PAUSED
    expected = EXPECTED[thread_id]
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        loop = saved.build(thread_id, saver)
        state = await loop.aget_state(thread(thread_id))
        assert result_of(thread_id, state.values) == expected["saved"]

        output = await loop.ainvoke(Command(resume=True), thread(thread_id))
        assert result_of(thread_id, output) == expected["result"]

        paused = await loop.ainvoke(NEW_TURN, thread(thread_id))
        assert saved.review_request(paused) == expected["new_turn"]["review"]
        output = await loop.ainvoke(Command(resume=True), thread(thread_id))
        assert result_of(thread_id, output) == expected["new_turn"]["result"]


# -- finished threads: the saved state reads as it was ----------------------------------


@pytest.mark.parametrize("thread_id", FINISHED)
def test_a_finished_thread_reads_as_it_was_saved(threads, thread_id):
    loop = saved.build(thread_id, threads)
    state = loop.get_state(thread(thread_id))
    assert not state.next
    assert not state.interrupts
    result = result_of(thread_id, state.values)

    assert result == EXPECTED[thread_id]["result"]
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert result["selected_iteration"] == 1
    assert result["selected_score"] == 80.0
    assert result["answer"] == f"draft 1 for: {saved.REQUEST}"  # the best answer's copy
    assert result["feedback"] == [saved.JUDGE_FEEDBACK, ""]
    assert [(r["iteration"], r["stop"], r["score"]) for r in result["records"]] == [
        (1, False, 80.0),
        (2, True, 60.0),
    ]


# -- every thread: a new turn starts a new loop on the same conversation ---------------


@pytest.mark.parametrize("thread_id", saved.THREADS)
def test_a_new_turn_on_a_saved_thread_starts_a_new_loop(threads, thread_id):
    loop = saved.build(thread_id, threads)
    before = finish(loop, thread_id)
    expected = EXPECTED[thread_id]["new_turn"]

    output = loop.invoke(NEW_TURN, thread(thread_id))
    if thread_id in saved.PAUSED:
        review = saved.review_request(output)
        assert review == expected["review"]
        assert review["iteration"] == 1
        assert review["feedback"] == []
        output = loop.invoke(Command(resume=True), thread(thread_id))
    result = result_of(thread_id, output)

    assert result == expected["result"]
    assert result["stop_reason"] == "accepted"
    assert result["init_messages"] == [["human", saved.NEW_TURN]]
    assert result["records"][0]["iteration"] == 1  # the count restarts
    assert result["iteration"] == result["record_count"] == (1 if thread_id in saved.PAUSED else 2)
    # the old conversation is kept, then the new request and the new loop's messages
    old = len(before["messages"])
    assert result["messages"][:old] == before["messages"]
    assert result["messages"][old] == ["human", saved.NEW_TURN]
    assert result["answer"] == f"draft 1 for: {saved.NEW_TURN}"


# -- threads saved at 6df4d16 (a default Adaptive; records with strategy) ----------------

EXPECTED_6DF: dict[str, Any] = json.loads(saved_6df.EXPECTED.read_text(encoding="utf-8"))
FINISHED_6DF = tuple(t for t in saved_6df.THREADS if t not in saved_6df.PAUSED)


@pytest.fixture
def threads_6df(tmp_path: Path) -> Iterator[SqliteSaver]:
    """A ``SqliteSaver`` on a copy of the threads saved at 6df4d16."""
    path = tmp_path / "threads.sqlite"
    shutil.copy(saved_6df.FIXTURE, path)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


def test_the_6df4d16_fixture_holds_its_six_threads_with_their_strategies(threads_6df):
    found = {c.config["configurable"]["thread_id"] for c in threads_6df.list(None)}
    assert found == set(saved_6df.THREADS) == set(EXPECTED_6DF)
    assert saved_6df.FIXTURE.stat().st_size < 400_000
    for thread_id in saved_6df.THREADS:
        state = saved_6df.build(thread_id, threads_6df).get_state(thread(thread_id))
        form = saved_6df.form_of(thread_id)
        assert saved_6df.summary(state.values, form) == EXPECTED_6DF[thread_id]["saved"]
        assert saved_6df.strategies(state.values, form) == EXPECTED_6DF[thread_id]["strategies"]
        chosen = EXPECTED_6DF[thread_id]["strategies"][0][1]
        assert chosen == ("fresh" if thread_id in saved_6df.FRESH else "repair")


@pytest.mark.parametrize("thread_id", saved_6df.PAUSED)
def test_a_thread_paused_at_6df4d16_resumes_and_a_new_turn_starts_a_new_loop(
    threads_6df, thread_id
):
    loop = saved_6df.build(thread_id, threads_6df)
    form = saved_6df.form_of(thread_id)
    state = loop.get_state(thread(thread_id))
    review = saved_6df.review_request({"__interrupt__": state.interrupts})
    assert review == EXPECTED_6DF[thread_id]["saved_review"]
    assert review["iteration"] == 2

    output = loop.invoke(Command(resume=True), thread(thread_id))
    assert "__interrupt__" not in output
    result = saved_6df.summary(output, form)
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert result["feedback"] == [saved_6df.REVIEW_FEEDBACK, ""]
    saved_messages = EXPECTED_6DF[thread_id]["saved"]["messages"]
    assert result["messages"][: len(saved_messages)] == saved_messages
    kinds = saved_6df.strategies(output, form)
    if thread_id in saved_6df.FRESH:  # the kind chosen at 6df4d16 is what went, and says so
        assert kinds == [["first", "fresh"], ["fresh", None]]
        assert result["answer"] == f"draft 1 for: {saved_6df.REQUEST}"
        records = output["loop_records" if form == "middleware" else "records"]
        assert records[-1]["strategy"]["tallies"] == {"fresh": [1, 0]}
    else:  # rebuilt without a strategy control: the saved strategy is read, none is added
        assert kinds == [["first", "repair"], [None, None]]
        assert result["answer"] == f"draft 2 for: {saved_6df.REQUEST}"

    paused = loop.invoke({"messages": [HumanMessage(saved_6df.NEW_TURN)]}, thread(thread_id))
    assert saved_6df.review_request(paused)["iteration"] == 1
    output = loop.invoke(Command(resume=True), thread(thread_id))
    turn = saved_6df.summary(output, form)
    assert (turn["stop_reason"], turn["iteration"]) == ("accepted", 1)
    assert turn["answer"] == f"draft 1 for: {saved_6df.NEW_TURN}"
    assert turn["messages"][: len(result["messages"])] == result["messages"]


@pytest.mark.parametrize("thread_id", FINISHED_6DF)
def test_a_thread_finished_at_6df4d16_reads_as_saved_and_a_new_turn_repairs(threads_6df, thread_id):
    loop = saved_6df.build(thread_id, threads_6df)
    form = saved_6df.form_of(thread_id)
    before = saved_6df.summary(loop.get_state(thread(thread_id)).values, form)
    assert before == EXPECTED_6DF[thread_id]["saved"]
    assert (before["stop_reason"], before["selected_iteration"]) == ("accepted", 1)

    output = loop.invoke({"messages": [HumanMessage(saved_6df.NEW_TURN)]}, thread(thread_id))
    result = saved_6df.summary(output, form)
    assert result["stop_reason"] == "accepted"
    assert result["init_messages"] == [["human", saved_6df.NEW_TURN]]
    assert result["iteration"] == 2  # the retry repaired: it saw draft 1 and wrote draft 2
    assert [m for m in result["messages"] if m[0] == "ai"][-2:] == [
        ["ai", f"draft 2 for: {saved_6df.NEW_TURN}"],
        ["ai", f"draft 1 for: {saved_6df.NEW_TURN}"],  # the best answer's copy
    ]
    assert result["messages"][: len(before["messages"])] == before["messages"]
    assert saved_6df.strategies(output, form) == [[None, None], [None, None]]


async def test_a_fresh_thread_paused_at_6df4d16_resumes_under_ainvoke(tmp_path):
    path = tmp_path / "threads.sqlite"
    shutil.copy(saved_6df.FIXTURE, path)
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        for thread_id in ("graph-fresh-paused", "middleware-fresh-paused"):
            loop = saved_6df.build(thread_id, saver)
            output = await loop.ainvoke(Command(resume=True), thread(thread_id))
            form = saved_6df.form_of(thread_id)
            assert saved_6df.summary(output, form)["stop_reason"] == "accepted"
            assert saved_6df.strategies(output, form) == [["first", "fresh"], ["fresh", None]]


# -- the state schemas ------------------------------------------------------------------

GRAPH_CHANNELS: dict[str, dict[str, str]] = {
    "delta": {
        "agent_run": "LastValue",
        "agent_state": "AgentStateDeltaChannel(updated)",
        "attempt_states": "DeltaChannel(extend_list)",
        "candidate_runs": "LastValue",
        "feedback": "DeltaChannel(extend_list)",
        "history_memory": "LastValue",
        "init_messages": "LastValue",
        "iteration": "BinaryOperatorAggregate(add)",
        "last_response": "LastValue",
        "loop_init_ids": "LastValue",
        "messages": "DeltaChannel(append_messages)",
        "records": "DeltaChannel(extend_list)",
        "selected_iteration": "LastValue",
        "selected_score": "LastValue",
        "started_at": "LastValue",
        "stop": "LastValue",
        "stop_reason": "LastValue",
    },
    "full": {
        "agent_run": "LastValue",
        "agent_state": "AgentStateChannel(_updated_by_one)",
        "attempt_states": "BinaryOperatorAggregate(add)",
        "candidate_runs": "LastValue",
        "feedback": "BinaryOperatorAggregate(add)",
        "history_memory": "LastValue",
        "init_messages": "LastValue",
        "iteration": "BinaryOperatorAggregate(add)",
        "last_response": "LastValue",
        "loop_init_ids": "LastValue",
        "messages": "BinaryOperatorAggregate(add_messages)",
        "records": "BinaryOperatorAggregate(add)",
        "selected_iteration": "LastValue",
        "selected_score": "LastValue",
        "started_at": "LastValue",
        "stop": "LastValue",
        "stop_reason": "LastValue",
    },
}
"""``create_loop_agent``'s channels in 0.2, by ``storage=``: name -> kind(reducer)."""

MIDDLEWARE_CHANNELS: dict[str, dict[str, str]] = {
    "delta": {
        "loop_attempt": "LastValue",
        "loop_attempt_start": "AgentStateDeltaChannel(updated)",
        "loop_attempt_states": "DeltaChannel(extend_list)",
        "loop_feedback": "DeltaChannel(extend_list)",
        "loop_history_memory": "LastValue",
        "loop_init_ids": "LastValue",
        "loop_init_messages": "LastValue",
        "loop_iteration": "LastValue",
        "loop_model_calls": "BinaryOperatorAggregate(add_model_calls)",
        "loop_records": "DeltaChannel(extend_list)",
        "loop_selected_iteration": "LastValue",
        "loop_selected_score": "LastValue",
        "loop_started_at": "LastValue",
        "loop_stop_reason": "LastValue",
    },
    "full": {
        "loop_attempt": "LastValue",
        "loop_attempt_start": "AgentStateChannel(_updated_by_one)",
        "loop_attempt_states": "BinaryOperatorAggregate(add)",
        "loop_feedback": "BinaryOperatorAggregate(add)",
        "loop_history_memory": "LastValue",
        "loop_init_ids": "LastValue",
        "loop_init_messages": "LastValue",
        "loop_iteration": "LastValue",
        "loop_model_calls": "BinaryOperatorAggregate(add_model_calls)",
        "loop_records": "BinaryOperatorAggregate(add)",
        "loop_selected_iteration": "LastValue",
        "loop_selected_score": "LastValue",
        "loop_started_at": "LastValue",
        "loop_stop_reason": "LastValue",
    },
}
"""``LoopMiddleware``'s ``loop_*`` channels in a ``create_agent`` agent in 0.2, by
``storage=`` (``"delta"`` is its default)."""


def channel_kind(channel: Any) -> str:
    """``"ChannelClass"``, or ``"ChannelClass(reducer)"`` for a reducing channel.

    The reducer is named by its ``__qualname__``; LangGraph's ``add_messages`` (a
    wrapper whose qualname is ``_add_messages_wrapper.<locals>._add_messages``) by its
    public name.
    """
    kind = type(channel).__name__
    if isinstance(channel, BinaryOperatorAggregate):
        reducer = channel.operator
    elif isinstance(channel, DeltaChannel):
        reducer = channel.reducer
    else:
        return kind
    name = "add_messages" if reducer is add_messages else getattr(reducer, "__qualname__", None)
    return f"{kind}({name})" if name else kind


def channels_of(channels: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The stored channels: not LangGraph's own (``__start__``, ``branch:...``) nor
    managed values (``remaining_steps``: computed per run, never in a checkpoint)."""
    return {
        name: channel_kind(channel)
        for name, channel in sorted(channels.items())
        if name.startswith(prefix)
        and not name.startswith(("__", "branch:"))
        and not is_managed_value(channel)
    }


def never_called(_: Any) -> Any:
    raise AssertionError("the schema tests run nothing")


@pytest.mark.parametrize("storage", ["delta", "full"])
def test_the_graph_form_keeps_its_channels(storage):
    loop = create_loop_agent(
        never_called, never_called, 3, checkpointer=InMemorySaver(), storage=storage
    )
    assert channels_of(loop.graph.channels) == GRAPH_CHANNELS[storage]


@pytest.mark.parametrize("storage", ["delta", "full"])
def test_the_middleware_form_keeps_its_loop_channels(storage):
    options = {"storage": storage} if storage != "delta" else {}  # delta: the default
    agent = create_agent(
        FakeChat.of("unused"), middleware=[LoopMiddleware(never_called, 3, **options)]
    )
    assert channels_of(agent.channels, "loop_") == MIDDLEWARE_CHANNELS[storage]


def test_the_saved_threads_use_the_default_storage_of_both_forms(threads):
    """The fixture's loops are built as in 0.2: the graph form's ``"auto"`` storage is
    delta on ``SqliteSaver``, and the middleware's default is delta."""
    graph = saved.build(saved.GRAPH_FINISHED, threads)
    middleware = saved.build(saved.MIDDLEWARE_FINISHED, threads)
    assert channels_of(graph.graph.channels) == GRAPH_CHANNELS["delta"]
    assert channels_of(middleware.channels, "loop_") == MIDDLEWARE_CHANNELS["delta"]
