"""Delta storage: the reducers, the choice of storage, and what a thread stores and reads."""

from __future__ import annotations

import operator
import random
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, RemoveMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from loop_agents import LoopState, create_loop_agent
from loop_agents.loop import storage as storage_module
from loop_agents.loop.output import LoopMessages
from loop_agents.loop.records import record_answer
from loop_agents.loop.state import LoopInput, LoopOutput
from loop_agents.loop.storage import (
    append_messages,
    check_storage,
    extend_list,
    resolve_storage,
    storage_of,
    supports_delta,
    with_storage,
)
from tests.durable_helpers import (
    REQUEST,
    Boom,
    CountingAgent,
    CountingEvaluator,
    answers,
    frequent_snapshot_keys,
    thread,
    transcript,
)
from tests.fakes import texts

# -- the messages reducer ----------------------------------------------------------------


def fold_add_messages(state: list[Any], writes: list[Any]) -> list[Any]:
    for write in writes:
        state = add_messages(state, write)
    return state


def random_writes(rng: random.Random, count: int) -> list[list[Any]]:
    """Writes of appends, replacements by id, removals and now and then a reset."""
    alive: list[str] = []
    writes: list[list[Any]] = []
    serial = 0
    for _ in range(count):
        write: list[Any] = []
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.5 or not alive:
                serial += 1
                kind = HumanMessage if rng.random() < 0.5 else AIMessage
                write.append(kind(f"m{serial}", id=f"id{serial}"))
                alive.append(f"id{serial}")
            elif roll < 0.75:
                target = rng.choice(alive)
                write.append(AIMessage(f"edited {target}", id=target))
            elif roll < 0.97:
                target = alive.pop(rng.randrange(len(alive)))
                write.append(RemoveMessage(id=target))
            else:
                write.append(RemoveMessage(id=REMOVE_ALL_MESSAGES))
                alive = []
        writes.append(write)
    return writes


@pytest.mark.parametrize("seed", range(40))
def test_append_messages_merges_a_batch_as_add_messages_merges_one_write_at_a_time(seed):
    rng = random.Random(seed)
    writes = random_writes(rng, 30)
    expected = fold_add_messages([], writes)
    assert append_messages([], writes) == expected
    # batching-invariant, as a DeltaChannel reducer must be: any split gives the same
    for cut in range(0, len(writes) + 1, 3):
        assert append_messages(append_messages([], writes[:cut]), writes[cut:]) == expected


def test_append_messages_with_two_messages_of_one_id_merges_as_add_messages():
    # a write that removes everything and then gives one id twice leaves both
    writes = [
        [HumanMessage("a", id="1")],
        [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("b", id="2"), AIMessage("c", id="2")],
        [RemoveMessage(id="2")],
    ]
    for cut in range(4):
        merged = append_messages(append_messages([], writes[:cut]), writes[cut:])
        assert merged == fold_add_messages([], writes) == []
    two = append_messages([], writes[:2])
    assert texts(two) == [("human", "b"), ("ai", "c")]
    edit = [AIMessage("d", id="2")]
    assert append_messages(two, [edit]) == add_messages(two, edit)  # replaces the last one


@pytest.mark.parametrize("seed", range(40))
def test_append_messages_step_by_step_as_running_loops_call_it(seed):
    """One write per call, each call given the previous result (the cached index is
    used), two conversations interleaved (each call replaces the other's cache)."""
    rng = random.Random(seed)
    first, second = random_writes(rng, 30), random_writes(rng, 30)
    states: list[list[Any]] = [[], []]
    for step in range(30):
        for which, writes in enumerate((first, second)):
            states[which] = append_messages(states[which], [writes[step]])
            assert states[which] == fold_add_messages([], writes[: step + 1])
    # a list equal to a previous result but not that list is indexed anew
    copy = list(states[1])
    assert append_messages(copy, [[HumanMessage("new", id="fresh")]])[-1].id == "fresh"


def test_append_messages_removing_an_unknown_id_is_the_error_add_messages_raises():
    with pytest.raises(ValueError, match="delete a message with an ID that doesn't exist"):
        append_messages([HumanMessage("a", id="1")], [[RemoveMessage(id="2")]])


def test_append_messages_gives_messages_without_ids_the_same_id_on_every_replay():
    writes = [["hello"], [("user", "hello"), {"role": "assistant", "content": "hi"}], "hello"]
    first = append_messages([], writes)
    again = append_messages([], writes)
    assert [m.id for m in first] == [m.id for m in again]
    assert all(m.id for m in first)
    assert len({m.id for m in first}) == 4  # the same text in other places: other ids
    assert texts(first) == [
        ("human", "hello"),
        ("human", "hello"),
        ("ai", "hi"),
        ("human", "hello"),
    ]


def test_append_messages_converts_chunks_and_keeps_the_input_unchanged():
    chunk = AIMessageChunk(content="streamed", id="c1")
    bare = HumanMessage("no id")
    result = append_messages([], [[chunk, bare]])
    assert type(result[0]) is AIMessage
    assert result[0].id == "c1"
    assert bare.id is None  # a copy got the id


def test_extend_list_appends_every_write_and_refuses_anything_but_a_list():
    assert extend_list(["a"], [["b"], [], ["c", "d"]]) == ["a", "b", "c", "d"]
    with pytest.raises(TypeError, match="updated with a list of items to append; got str"):
        extend_list([], ["text"])


# -- choosing the storage ----------------------------------------------------------------


class HistoryKeepingSaver(InMemorySaver):
    """A saver that does not read delta channels itself (uses LangGraph's generic walk)."""

    get_delta_channel_history = BaseCheckpointSaver.get_delta_channel_history  # type: ignore[assignment]
    aget_delta_channel_history = BaseCheckpointSaver.aget_delta_channel_history  # type: ignore[assignment]


def test_savers_with_their_own_delta_support_get_delta_channels(tmp_path):
    assert supports_delta(InMemorySaver())
    with SqliteSaver.from_conn_string(str(tmp_path / "x.sqlite")) as sqlite:
        assert supports_delta(sqlite)
    assert supports_delta(None)  # a parent's or LangGraph Server's checkpointer
    assert supports_delta(True)
    assert not supports_delta(HistoryKeepingSaver())
    assert not supports_delta(False)


def test_shallow_postgres_savers_fall_back_to_full_values():
    from langgraph.checkpoint.postgres.shallow import ShallowPostgresSaver

    assert not supports_delta(ShallowPostgresSaver.__new__(ShallowPostgresSaver))


@pytest.mark.parametrize(
    ("storage", "checkpointer", "layout"),
    [
        ("auto", "memory", "delta"),
        ("auto", None, "delta"),
        ("auto", "generic", "full"),
        ("delta", "generic", "delta"),
        ("full", "memory", "full"),
    ],
)
def test_the_storage_a_loop_uses(storage, checkpointer, layout):
    saver = {"memory": InMemorySaver(), "generic": HistoryKeepingSaver(), None: None}[checkpointer]
    assert resolve_storage(storage, saver) == layout
    loop = create_loop_agent(
        CountingAgent(), CountingEvaluator(2), checkpointer=saver, storage=storage
    )
    assert storage_of(loop) == layout
    channel = DeltaChannel if layout == "delta" else BinaryOperatorAggregate
    for key in ("messages", "feedback", "records"):
        assert isinstance(loop.channels[key], channel), key
    assert isinstance(loop.channels["iteration"], BinaryOperatorAggregate)


@pytest.mark.parametrize("bad", ["deltas", "", None, 1, "FULL"])
def test_an_unknown_storage_is_a_value_error_naming_the_choices(bad):
    with pytest.raises(ValueError, match=r"storage must be one of 'auto', 'delta', 'full'; got"):
        check_storage(bad)
    with pytest.raises(ValueError, match="storage must be one of"):
        create_loop_agent(CountingAgent(), CountingEvaluator(2), storage=bad)


@pytest.mark.parametrize("schema", [LoopState, LoopInput, LoopOutput, LoopMessages])
def test_the_delta_schemas_have_the_public_schemas_keys(schema):
    delta = with_storage(schema, "delta")
    assert delta.__name__ == schema.__name__
    assert delta.__required_keys__ == schema.__required_keys__
    assert delta.__optional_keys__ == schema.__optional_keys__
    assert with_storage(schema, "full") is schema


def test_a_generic_saver_with_forced_delta_storage_works():
    saver = HistoryKeepingSaver()
    loop = create_loop_agent(
        CountingAgent(), CountingEvaluator(3), checkpointer=saver, storage="delta"
    )
    result = loop.invoke({"messages": [REQUEST]}, thread("generic"))
    assert (
        texts(loop.get_state(thread("generic")).values["messages"])
        == texts(result["messages"])
        == transcript(3)
    )


# -- what a thread stores ------------------------------------------------------------------


def stored_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        checkpoints = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
        ).fetchone()[0]
        writes = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes").fetchone()[0]
    return int(checkpoints + writes)


def bytes_per_iteration(tmp_path: Path, storage: str, iterations: int) -> float:
    path = tmp_path / f"{storage}-{iterations}.sqlite"
    agent = CountingAgent()
    with SqliteSaver.from_conn_string(str(path)) as saver:
        loop = create_loop_agent(
            lambda messages: agent(messages) + " " + "rain " * 40,
            CountingEvaluator(accept_at=iterations),
            iterations,
            checkpointer=saver,
            storage=storage,
        )
        loop.invoke({"messages": [REQUEST]}, thread("t"), durability="sync")
    return stored_bytes(path) / iterations


def test_delta_storage_grows_linearly_with_the_iterations(tmp_path):
    short, long = (bytes_per_iteration(tmp_path, "delta", n) for n in (10, 60))
    assert long <= 1.15 * short
    # every checkpoint storing the whole conversation: the bytes per iteration grow
    full_short, full_long = (bytes_per_iteration(tmp_path, "full", n) for n in (10, 60))
    assert full_long >= 3 * full_short
    assert long < full_long / 3


def test_requests_given_without_ids_read_back_with_the_ids_the_loop_saw(tmp_path):
    path = str(tmp_path / "ids.sqlite")
    with SqliteSaver.from_conn_string(path) as saver:
        loop = create_loop_agent(CountingAgent(), CountingEvaluator(2), checkpointer=saver)
        result = loop.invoke({"messages": [("user", "Write a haiku about rain.")]}, thread("ids"))
    with SqliteSaver.from_conn_string(path) as saver:  # a new connection: replayed writes
        loop = create_loop_agent(CountingAgent(), CountingEvaluator(2), checkpointer=saver)
        values = loop.get_state(thread("ids")).values
        assert [m.id for m in values["messages"]] == [m.id for m in result["messages"]]
        assert values["loop_init_ids"] == [result["messages"][0].id]
        second = loop.invoke({"messages": "Now one about snow."}, thread("ids"))
    # the new run told the old request from the new one by their ids
    assert texts(second["init_messages"]) == [("human", "Now one about snow.")]
    assert texts(second["messages"])[:4] == texts(result["messages"]) == transcript(2)
    assert second["iteration"] == 2


def test_a_delta_thread_loads_and_goes_on_with_full_storage(saver):
    delta = create_loop_agent(CountingAgent(), CountingEvaluator(3), checkpointer=saver)
    delta.invoke({"messages": [REQUEST]}, thread("switch"))
    full = create_loop_agent(
        CountingAgent(), CountingEvaluator(2), checkpointer=saver, storage="full"
    )
    assert texts(full.get_state(thread("switch")).values["messages"]) == transcript(3)
    result = full.invoke({"messages": [HumanMessage("Again.")]}, thread("switch"))
    assert texts(result["messages"])[:7] == [*transcript(3), ("human", "Again.")]
    assert [record_answer(r, result).text for r in result["records"]] == answers(
        result["messages"]
    )[-2:]


@pytest.fixture
def frequent_snapshots(monkeypatch):
    """Delta channels that store a full snapshot every 2 updates (1000 by default)."""
    monkeypatch.setattr(storage_module, "DELTA_KEYS", frequent_snapshot_keys(2))


def test_snapshots_and_the_writes_after_them_read_back_exactly(saver, frequent_snapshots):
    agent = CountingAgent(fail_at=4)
    evaluator = CountingEvaluator(accept_at=6, fail_at=3)
    loop = create_loop_agent(agent, evaluator, 10, checkpointer=saver)
    assert storage_of(loop) == "delta"
    config = thread("snapshots")
    for _ in range(2):
        with pytest.raises(Boom):
            loop.invoke({"messages": [REQUEST]} if not agent.calls else None, config)
    result = loop.invoke(None, config)
    assert texts(result["messages"]) == transcript(6)
    assert agent.per_iteration() == {1: 1, 2: 1, 3: 1, 4: 2, 5: 1, 6: 1}
    assert [r["iteration"] for r in result["records"]] == [1, 2, 3, 4, 5, 6]
    # some checkpoints hold a snapshot of messages, the others only their step's writes
    stored = ["messages" in saved.checkpoint["channel_values"] for saved in saver.list(config)]
    assert any(stored)
    assert not all(stored)
    # every checkpoint reads back as a prefix of the conversation, its records and feedback
    for snapshot in loop.get_state_history(config):
        values = snapshot.values
        messages, records = texts(values.get("messages", [])), values.get("records", [])
        assert messages == transcript(6)[: len(messages)]
        assert [r["iteration"] for r in records] == list(range(1, len(records) + 1))
        assert len(values.get("feedback", [])) == len(records)


# -- a loop nested in a parent graph with a checkpointer ---------------------------------


class Parent(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    steps: Annotated[int, operator.add]


def test_a_nested_loop_resumes_from_the_parents_checkpointer(saver):
    agent = CountingAgent()
    evaluator = CountingEvaluator(accept_at=3, fail_at=2)
    loop = create_loop_agent(agent, evaluator, 5, name="inner", output_mode="full_history")
    assert storage_of(loop) == "delta"  # checkpointer=None: the parent's is used
    builder = StateGraph(Parent)
    builder.add_node("inner", loop)
    builder.add_node("after", lambda state: {"steps": 1})
    builder.add_edge(START, "inner")
    builder.add_edge("inner", "after")
    parent = builder.compile(checkpointer=saver)
    config = thread("nested")
    with pytest.raises(Boom):
        parent.invoke({"messages": [REQUEST]}, config)
    result = parent.invoke(None, config)
    assert texts(result["messages"]) == transcript(3)
    assert result["steps"] == 1
    assert agent.calls == [1, 2, 3]  # the answers saved before the failure were kept
    assert evaluator.calls == [1, 2, 2, 3]
