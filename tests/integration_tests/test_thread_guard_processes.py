"""One run at a time on a thread across processes: SQLite on a file and PostgreSQL.

A child process (``tests/integration_tests/thread_guard_child.py``) runs a loop and stops inside its first
agent call; this process, and a second child, then try the same thread. They fail with
`ThreadBusyError` without calling their model and the first run's work is intact; a
waiting run goes after it; and when the holder is SIGKILLed the thread is free at once
and the loop resumes from the database.
"""

from __future__ import annotations

import asyncio
import json
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from loop_agents import ThreadBusyError, create_loop_agent
from tests.durable_helpers import REQUEST, CountingAgent, CountingEvaluator, thread, transcript
from tests.fakes import FakeChat, texts
from tests.integration_tests.thread_guard_child import BUSY_EXIT, async_saver, sync_saver

CHILD = Path(__file__).with_name("thread_guard_child.py")
ROOT = CHILD.parent.parent
WAIT = 60

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "loop.sqlite")
    url = request.getfixturevalue("postgres_url")
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
    return "postgres", url


def child_args(database: tuple[str, str], thread_id: str, *extra: str) -> list[str]:
    kind, db = database
    return [sys.executable, str(CHILD), "--saver", kind, "--db", db, "--thread", thread_id, *extra]


def read_line(child: subprocess.Popen[str], timeout: float = WAIT) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    if not ready:
        pytest.fail("the child printed nothing in time")
    line = child.stdout.readline()
    if not line:
        _, err = child.communicate(timeout=10)
        pytest.fail(f"the child ended early ({child.returncode}):\n{err}")
    return line.strip()


@contextmanager
def holding_child(database: tuple[str, str], thread_id: str, *extra: str) -> Iterator[Any]:
    """A child whose loop is inside its first agent call (it holds the thread)."""
    child = subprocess.Popen(
        child_args(database, thread_id, "--hold", *extra),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_line(child) == "IN-AGENT"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def finish(child: subprocess.Popen[str]) -> list[tuple[str, str]]:
    """Let the held agent answer; return the child's transcript."""
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    line = read_line(child)
    assert line.startswith("DONE "), line
    assert child.wait(timeout=WAIT) == 0
    return [tuple(pair) for pair in json.loads(line.removeprefix("DONE "))]


@pytest.mark.parametrize("child_async", [False, True], ids=["sync-child", "async-child"])
def test_a_run_in_another_process_holds_the_thread(database, child_async):
    kind, db = database
    extra = ["--async"] if child_async else []
    with holding_child(database, "shared", *extra) as child:
        # this process: rejected, its model never called
        model = FakeChat.of("intruder's answer")
        with sync_saver(kind, db) as saver:
            loop = create_loop_agent(model, CountingEvaluator(1), checkpointer=saver)
            with pytest.raises(ThreadBusyError, match="thread 'shared' is busy") as caught:
                loop.invoke({"messages": [HumanMessage("Overwrite it.")]}, thread("shared"))
            assert caught.value.holder == "another process"
        assert model.calls == []
        # a second process: rejected too
        other = subprocess.run(
            child_args(database, "shared"), cwd=ROOT, capture_output=True, text=True,
            timeout=WAIT, check=False,
        )  # fmt: skip
        assert other.returncode == BUSY_EXIT, other.stderr
        assert other.stdout.strip() == "BUSY another process"

        assert finish(child) == transcript(2)

    with sync_saver(kind, db) as saver:
        loop = create_loop_agent(model, CountingEvaluator(1), checkpointer=saver)
        # the first run's work is intact in the database, and the thread is free again
        assert texts(loop.get_state(thread("shared")).values["messages"]) == transcript(2)
        result = loop.invoke({"messages": [HumanMessage("And now?")]}, thread("shared"))
    assert texts(result["messages"])[:4] == transcript(2)
    assert len(model.calls) == 1


async def test_an_async_run_here_is_rejected_too(database):
    kind, db = database
    with holding_child(database, "shared-async") as child:
        model = FakeChat.of("intruder's answer")
        async with async_saver(kind, db) as saver:
            loop = create_loop_agent(model, CountingEvaluator(1), checkpointer=saver)
            with pytest.raises(ThreadBusyError) as caught:
                await loop.ainvoke({"messages": [REQUEST]}, thread("shared-async"))
            assert caught.value.holder == "another process"
            # another thread of the same database is free
            other = await loop.ainvoke({"messages": [REQUEST]}, thread("elsewhere"))
            assert other["stop_reason"] == "accepted"
        assert len(model.calls) == 1
        await asyncio.to_thread(finish, child)


def test_a_waiting_run_goes_after_the_other_process(database):
    kind, db = database
    with holding_child(database, "queued") as child, sync_saver(kind, db) as saver:
        model = FakeChat.of("queued answer")
        loop = create_loop_agent(
            model,
            CountingEvaluator(1),
            checkpointer=saver,
            concurrent_runs="wait",
        )
        outcome: dict[str, Any] = {}

        def wait_and_run() -> None:
            outcome["result"] = loop.invoke(
                {"messages": [HumanMessage("Next request.")]}, thread("queued")
            )

        waiter = threading.Thread(target=wait_and_run, daemon=True)
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive()
        assert model.calls == []
        assert finish(child) == transcript(2)
        waiter.join(WAIT)
        assert texts(outcome["result"]["messages"]) == [
            *transcript(2),
            ("human", "Next request."),
            ("ai", "queued answer"),
        ]


@pytest.mark.parametrize("child_async", [False, True], ids=["sync-child", "async-child"])
def test_a_killed_holder_leaves_the_thread_free_at_once(database, child_async):
    kind, db = database
    extra = ["--async"] if child_async else []
    with holding_child(database, "killed", *extra) as child:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    # at once: no waiting, the default concurrent_runs="reject"
    agent = CountingAgent()
    with sync_saver(kind, db) as saver:
        loop = create_loop_agent(agent, CountingEvaluator(2), checkpointer=saver)
        result = loop.invoke(None, thread("killed"))
    assert result["stop_reason"] == "accepted"
    assert agent.calls == [1, 2]  # the killed call is made again, then the next one
    assert texts(result["messages"]) == transcript(2)


def test_a_hard_link_to_the_database_meets_the_holders_lock(tmp_path):
    """The SQLite lock is the file's, not its path's: a hard link in another folder used
    to get a lock of its own, and the second process ran over the first one's run."""
    database = ("sqlite", str(tmp_path / "loop.sqlite"))
    with holding_child(database, "linked") as child:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "same.sqlite").hardlink_to(database[1])
        other = subprocess.run(
            child_args(("sqlite", str(elsewhere / "same.sqlite")), "linked"),
            cwd=ROOT, capture_output=True, text=True, timeout=WAIT, check=False,
        )  # fmt: skip
        assert other.returncode == BUSY_EXIT, other.stderr
        assert other.stdout.strip() == "BUSY another process"
        assert finish(child) == transcript(2)
    with sync_saver(*database) as saver:
        loop = create_loop_agent(FakeChat.of("later"), CountingEvaluator(1), checkpointer=saver)
        assert texts(loop.get_state(thread("linked")).values["messages"]) == transcript(2)
