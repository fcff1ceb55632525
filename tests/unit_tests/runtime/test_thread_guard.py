"""One run at a time on a thread, in one process: threads and asyncio tasks, every saver.

Issue 12, item 4: two concurrent runs on one ``thread_id`` used to save over each
other's checkpoints. The second run now fails at once with `ThreadBusyError` (before any
model call, the first run's work intact), or with ``concurrent_runs="wait"`` waits its
turn; the thread is let go however a run ends.
"""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from loop_agents import ThreadBusyError, create_loop_agent, human_review
from loop_agents.runtime.thread_locking import athread_guard, is_held, thread_guard
from tests.durable_helpers import (
    REQUEST,
    CountingEvaluator,
    iteration_of,
    thread,
    transcript,
)
from tests.fakes import FakeChat, texts

WAIT = 30  # seconds: only ever reached when something is broken


class GateAgent:
    """Answers ``answer N``; the first call waits until the test opens the gate."""

    def __init__(self) -> None:
        self.__name__ = "agent"
        self.calls: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        self.entered.set()
        assert self.gate.wait(WAIT), "the test never opened the gate"
        return f"answer {iteration}"


class AsyncGateAgent:
    """`GateAgent` for asyncio: waits on an ``asyncio.Event``."""

    def __init__(self) -> None:
        self.__name__ = "agent"
        self.calls: list[int] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        self.entered.set()
        await asyncio.wait_for(self.gate.wait(), WAIT)
        return f"answer {iteration}"


def counting_model() -> FakeChat:
    return FakeChat.of("intruder's answer")


def run_in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["result"] = target()
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    return worker, outcome


# -- reject -----------------------------------------------------------------------------


def test_a_second_run_on_a_busy_thread_fails_before_any_model_call(saver):
    agent = GateAgent()
    first = create_loop_agent(agent, CountingEvaluator(2), checkpointer=saver)
    config = thread("busy")
    worker, outcome = run_in_thread(lambda: first.invoke({"messages": [REQUEST]}, config))
    assert agent.entered.wait(WAIT)

    model = counting_model()
    second = create_loop_agent(model, CountingEvaluator(1), checkpointer=saver)
    for call in (
        lambda: second.invoke({"messages": [HumanMessage("Overwrite it.")]}, config),
        lambda: list(second.stream({"messages": [HumanMessage("Overwrite it.")]}, config)),
        lambda: first.invoke(None, config),  # a resume is a run too
    ):
        with pytest.raises(ThreadBusyError, match=r"thread 'busy' is busy") as caught:
            call()
        assert caught.value.thread_id == "busy"
        assert caught.value.holder == "this process"
    assert model.calls == []

    agent.gate.set()
    worker.join(WAIT)
    assert "error" not in outcome
    # the first run's work is whole, in its result and in the saver
    assert texts(outcome["result"]["messages"]) == transcript(2)
    assert texts(first.get_state(config).values["messages"]) == transcript(2)
    # and the thread is free again
    result = second.invoke({"messages": [HumanMessage("And now?")]}, config)
    assert result["last_response"].text == "intruder's answer"
    assert len(model.calls) == 1


async def test_a_second_task_on_a_busy_thread_fails_before_any_model_call(async_saver):
    agent = AsyncGateAgent()
    first = create_loop_agent(agent, CountingEvaluator(2), checkpointer=async_saver)
    config = thread("busy-async")
    running = asyncio.create_task(first.ainvoke({"messages": [REQUEST]}, config))
    await asyncio.wait_for(agent.entered.wait(), WAIT)

    model = counting_model()
    second = create_loop_agent(model, CountingEvaluator(1), checkpointer=async_saver)
    with pytest.raises(ThreadBusyError, match=r"thread 'busy-async' is busy"):
        await second.ainvoke({"messages": [HumanMessage("Overwrite it.")]}, config)
    with pytest.raises(ThreadBusyError):
        [c async for c in second.astream({"messages": [HumanMessage("Again.")]}, config)]
    with pytest.raises(ThreadBusyError):
        await first.ainvoke(None, config)
    assert model.calls == []

    agent.gate.set()
    result = await asyncio.wait_for(running, WAIT)
    assert texts(result["messages"]) == transcript(2)
    assert texts((await first.aget_state(config)).values["messages"]) == transcript(2)
    await second.ainvoke({"messages": [HumanMessage("And now?")]}, config)
    assert len(model.calls) == 1


def test_other_threads_and_namespaces_are_not_held(saver):
    agent = GateAgent()
    loop = create_loop_agent(agent, CountingEvaluator(1), checkpointer=saver)
    worker, _ = run_in_thread(lambda: loop.invoke({"messages": [REQUEST]}, thread("one")))
    assert agent.entered.wait(WAIT)
    other = create_loop_agent(counting_model(), CountingEvaluator(1), checkpointer=saver)
    assert other.invoke({"messages": [REQUEST]}, thread("two"))["stop_reason"] == "accepted"
    # the same thread_id in another checkpointer is another thread
    elsewhere = create_loop_agent(
        counting_model(), CountingEvaluator(1), checkpointer=InMemorySaver()
    )
    assert elsewhere.invoke({"messages": [REQUEST]}, thread("one"))["stop_reason"] == "accepted"
    agent.gate.set()
    worker.join(WAIT)


def test_a_loop_without_a_checkpointer_has_no_thread_to_guard():
    agent = GateAgent()
    loop = create_loop_agent(agent, CountingEvaluator(1))
    worker, _ = run_in_thread(lambda: loop.invoke({"messages": [REQUEST]}, thread("t")))
    assert agent.entered.wait(WAIT)
    other = create_loop_agent(counting_model(), CountingEvaluator(1))
    assert other.invoke({"messages": [REQUEST]}, thread("t"))["stop_reason"] == "accepted"
    agent.gate.set()
    worker.join(WAIT)


def test_resuming_a_review_while_another_resume_runs_is_rejected():
    saver = InMemorySaver()
    agent = GateAgent()
    agent.gate.set()  # the first answer comes at once
    loop = create_loop_agent(agent, human_review(), 3, checkpointer=saver)
    config = thread("review")
    loop.invoke({"messages": [REQUEST]}, config)
    agent.entered.clear()
    agent.gate.clear()  # the next attempt hangs
    worker, outcome = run_in_thread(lambda: loop.invoke(Command(resume="Shorter."), config))
    assert agent.entered.wait(WAIT)
    with pytest.raises(ThreadBusyError):
        loop.invoke(Command(resume=True), config)
    agent.gate.set()
    worker.join(WAIT)
    assert outcome["result"]["__interrupt__"][0].value["iteration"] == 2
    assert loop.invoke(Command(resume=True), config)["stop_reason"] == "accepted"


# -- wait -------------------------------------------------------------------------------


def test_wait_queues_the_second_run_after_the_first(saver):
    agent = GateAgent()
    first = create_loop_agent(agent, CountingEvaluator(2), checkpointer=saver)
    config = thread("queue")
    worker, outcome = run_in_thread(lambda: first.invoke({"messages": [REQUEST]}, config))
    assert agent.entered.wait(WAIT)
    model = counting_model()
    second = create_loop_agent(
        model, CountingEvaluator(1), checkpointer=saver, concurrent_runs="wait"
    )
    waiter, waited = run_in_thread(
        lambda: second.invoke({"messages": [HumanMessage("Next request.")]}, config)
    )
    time.sleep(0.3)
    assert model.calls == []  # still waiting
    assert waiter.is_alive()
    agent.gate.set()
    worker.join(WAIT)
    waiter.join(WAIT)
    assert "error" not in waited, waited.get("error")
    # the queued run came after the first one and kept its work
    assert texts(waited["result"]["messages"]) == [
        *transcript(2),
        ("human", "Next request."),
        ("ai", "intruder's answer"),
    ]
    assert texts(outcome["result"]["messages"]) == transcript(2)


async def test_wait_with_a_busy_timeout_gives_up(async_saver):
    agent = AsyncGateAgent()
    first = create_loop_agent(agent, CountingEvaluator(1), checkpointer=async_saver)
    config = thread("timeout")
    running = asyncio.create_task(first.ainvoke({"messages": [REQUEST]}, config))
    await asyncio.wait_for(agent.entered.wait(), WAIT)
    model = counting_model()
    patient = create_loop_agent(
        model, CountingEvaluator(1), checkpointer=async_saver, concurrent_runs="wait",
        busy_timeout=0.2,
    )  # fmt: skip
    started = time.monotonic()
    with pytest.raises(
        ThreadBusyError, match=r"stayed busy for [\d.]+s \(busy_timeout\)"
    ) as caught:
        await patient.ainvoke({"messages": [REQUEST]}, config)
    assert 0.2 <= time.monotonic() - started < WAIT
    assert caught.value.waited is not None
    assert model.calls == []
    # waiting did not block the event loop: the first run finishes normally
    agent.gate.set()
    assert (await asyncio.wait_for(running, WAIT))["stop_reason"] == "accepted"


async def test_async_waiters_run_one_after_another():
    saver = InMemorySaver()
    active: list[int] = []
    overlap: list[int] = []

    async def agent(messages: list[AnyMessage]) -> str:
        active.append(1)
        overlap.append(len(active))
        await asyncio.sleep(0.02)
        active.pop()
        return "answer"

    loop = create_loop_agent(
        agent, CountingEvaluator(1), checkpointer=saver, concurrent_runs="wait"
    )
    config = thread("many")
    results = await asyncio.gather(
        *(loop.ainvoke({"messages": [HumanMessage(f"request {i}")]}, config) for i in range(5))
    )
    assert max(overlap) == 1
    assert all(r["stop_reason"] == "accepted" for r in results)
    state = await loop.aget_state(config)
    assert len(state.values["messages"]) == 10  # every run's request and answer, none lost


# -- the thread is let go however the run ends ------------------------------------------


class Boom(Exception):
    """A failure injected by a test."""


def raising(error: BaseException) -> Any:
    def agent(messages: list[AnyMessage]) -> str:
        raise error

    return agent


def held(loop: Any, config: dict[str, Any]) -> bool:
    return is_held(loop.checkpointer, config)


@pytest.mark.parametrize("error", [Boom("agent failed"), KeyboardInterrupt()])
def test_an_error_lets_the_thread_go(saver, error):
    loop = create_loop_agent(raising(error), CountingEvaluator(1), checkpointer=saver)
    config = thread("error")
    with pytest.raises(type(error)):
        loop.invoke({"messages": [REQUEST]}, config)
    assert not held(loop, config)
    good = create_loop_agent(counting_model(), CountingEvaluator(1), checkpointer=saver)
    assert good.invoke({"messages": [REQUEST]}, config)["stop_reason"] == "accepted"


def test_a_stream_closed_early_lets_the_thread_go(saver):
    loop = create_loop_agent(counting_model(), CountingEvaluator(3), checkpointer=saver)
    config = thread("early")
    stream = loop.stream({"messages": [REQUEST]}, config, stream_mode="updates")
    next(stream)
    assert held(loop, config)
    stream.close()
    assert not held(loop, config)
    for _chunk in loop.stream({"messages": [REQUEST]}, config, stream_mode="updates"):
        break  # the consumer stops; the generator is closed when it is dropped
    assert not held(loop, config)
    assert loop.invoke(None, config)["stop_reason"] == "accepted"


async def test_an_async_stream_closed_early_lets_the_thread_go(async_saver):
    loop = create_loop_agent(counting_model(), CountingEvaluator(3), checkpointer=async_saver)
    config = thread("early-async")
    async with aclosing(loop.astream({"messages": [REQUEST]}, config)) as stream:
        async for _chunk in stream:
            assert held(loop, config)
            break
    assert not held(loop, config)
    assert (await loop.ainvoke(None, config))["stop_reason"] == "accepted"


async def test_a_cancelled_run_lets_the_thread_go(async_saver):
    agent = AsyncGateAgent()
    loop = create_loop_agent(agent, CountingEvaluator(1), checkpointer=async_saver)
    config = thread("cancelled")
    running = asyncio.create_task(loop.ainvoke({"messages": [REQUEST]}, config))
    await asyncio.wait_for(agent.entered.wait(), WAIT)
    assert held(loop, config)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not held(loop, config)
    agent.gate.set()
    assert (await loop.ainvoke(None, config))["stop_reason"] == "accepted"


# -- nested loops, and guarding a parent graph ------------------------------------------


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_a_nested_loop_leaves_the_thread_to_its_parent():
    saver = InMemorySaver()
    loop = create_loop_agent(counting_model(), CountingEvaluator(1))
    parent = StateGraph(Parent).add_node("loop", loop).add_edge(START, "loop")
    compiled = parent.compile(checkpointer=saver)
    config = thread("parent")
    with thread_guard(saver, config):
        result = compiled.invoke({"messages": [REQUEST]}, config)
        assert is_held(saver, config)
        with pytest.raises(ThreadBusyError):
            with thread_guard(saver, config):
                pass
    assert result["messages"][-1].text == "intruder's answer"
    assert not is_held(saver, config)


async def test_athread_guard_for_a_parent_graph():
    saver = InMemorySaver()
    config = thread("parent-async")
    async with athread_guard(saver, config):
        with pytest.raises(ThreadBusyError):
            async with athread_guard(saver, config):
                pass
        assert is_held(saver, config)
    assert not is_held(saver, config)
    async with athread_guard(None, config):  # no saver: nothing to hold
        pass
    async with athread_guard(saver, {"configurable": {}}):  # no thread: the same
        pass


# -- the error and the options ----------------------------------------------------------


def test_thread_busy_error_pickles_and_says_how_to_queue():
    error = ThreadBusyError("t1", checkpoint_ns="", holder="another process")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.thread_id, copy.holder, copy.waited, str(copy)) == (
        "t1",
        "another process",
        None,
        str(error),
    )
    assert "concurrent_runs='wait'" in str(error)
    assert "nothing was called" in str(error)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"concurrent_runs": "queue"}, ValueError, r"concurrent_runs must be 'reject' .*'queue'"),
        (
            {"busy_timeout": 5},
            ValueError,
            r"busy_timeout=5 only applies with concurrent_runs='wait'",
        ),
        ({"concurrent_runs": "wait", "busy_timeout": -1}, ValueError, r">= 0 .*got -1"),
        ({"concurrent_runs": "wait", "busy_timeout": float("inf")}, ValueError, r"finite"),
        ({"concurrent_runs": "wait", "busy_timeout": "5"}, TypeError, r"got str '5'"),
    ],
)
def test_bad_concurrency_options(options, error, message):
    with pytest.raises(error, match=message):
        create_loop_agent(counting_model(), CountingEvaluator(1), **options)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def two_savers(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    """Two checkpointer objects on one database (for PostgreSQL: a connection and a pool)."""
    if request.param == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = str(tmp_path / "shared.sqlite")
        with SqliteSaver.from_conn_string(path) as one, SqliteSaver.from_conn_string(path) as two:
            yield one, two
    else:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        url = request.getfixturevalue("postgres_url")
        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        with (
            PostgresSaver.from_conn_string(url) as one,
            ConnectionPool(url, kwargs=kwargs, min_size=1, max_size=2, open=True) as pool,
        ):
            one.setup()
            yield one, PostgresSaver(pool)  # type: ignore[arg-type]


def test_two_checkpointers_on_one_database_share_the_lock(two_savers):
    one, two = two_savers
    agent = GateAgent()
    first = create_loop_agent(agent, CountingEvaluator(1), checkpointer=one)
    config = thread("shared-db")
    worker, outcome = run_in_thread(lambda: first.invoke({"messages": [REQUEST]}, config))
    assert agent.entered.wait(WAIT)
    model = counting_model()
    second = create_loop_agent(model, CountingEvaluator(1), checkpointer=two)
    with pytest.raises(
        ThreadBusyError, match="another checkpointer on the same database"
    ) as caught:
        second.invoke({"messages": [REQUEST]}, config)
    assert caught.value.holder == "another process"
    assert model.calls == []
    agent.gate.set()
    worker.join(WAIT)
    assert outcome["result"]["stop_reason"] == "accepted"
    again = second.invoke({"messages": [HumanMessage("And now?")]}, config)
    assert again["stop_reason"] == "accepted"


@pytest.mark.parametrize("name", ["hard link", "symlink", "relative path"])
def test_every_name_of_an_sqlite_file_meets_the_same_lock(name, tmp_path, monkeypatch):
    """The lock is the file's (device and inode), not its path's.

    A hard link in another folder used to get a lock of its own, so a second process on
    the same file ran while the first held the thread. (Two loops on one file through
    two names cannot both write in one process: SQLite keeps a WAL index per name. The
    cross-process run is in tests/integration_tests/test_thread_guard_processes.py.)
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "shared.sqlite"
    sqlite3.connect(path).close()
    other = tmp_path / "elsewhere"
    other.mkdir()
    if name == "hard link":
        (other / "linked.sqlite").hardlink_to(path)
        second = str(other / "linked.sqlite")
    elif name == "symlink":
        (other / "pointer.sqlite").symlink_to(path)
        second = str(other / "pointer.sqlite")
    else:
        monkeypatch.chdir(other)
        second = "../shared.sqlite"
    config = thread("named")
    with SqliteSaver.from_conn_string(str(path)) as one, thread_guard(one, config):
        with (
            SqliteSaver.from_conn_string(second) as two,
            pytest.raises(ThreadBusyError, match="another checkpointer") as caught,
            thread_guard(two, config),
        ):
            pass
        assert caught.value.holder == "another process"
    with SqliteSaver.from_conn_string(second) as two, thread_guard(two, config):
        pass  # free again once the first let go
