"""A thousand loops at once on one PostgreSQL saver, on a server of 100 connections.

Issue "Hardening, round 3", item 1: the thread guard opened a connection per running
loop, so 1,000 concurrent loops on one ``AsyncPostgresSaver`` against a server with
``max_connections=100`` failed 901 times with ``too many clients already``. The guard
now holds the locks of all of a process's runs on one shared connection (per event
loop). The test starts its own server with ``max_connections=100``, runs 1,000 loops of
3 iterations each, checks that every one completed and that every answer is in its
thread, and that the server never saw more than a few connections from this process.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from loop_agents import create_loop_agent
from tests.durable_helpers import thread
from tests.savers import PostgresCluster

pytestmark = pytest.mark.slow

LOOPS = 1000
ITERATIONS = 3


@pytest.fixture(scope="module")
def small_server() -> Iterator[str]:
    cluster = PostgresCluster({"max_connections": 100})
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.stop()


class SlowAgent:
    """Answers ``answer N for R`` after a short wait, so that the loops overlap."""

    __name__ = "agent"

    async def __call__(self, messages: list[Any]) -> str:
        await asyncio.sleep(0.05)
        request = messages[0].text
        number = sum(1 for m in messages if m.type == "ai") + 1
        return f"answer {number} for {request}"


def never_satisfied(context: Any) -> dict[str, Any]:
    return {"stop": False, "feedback": "again"}


async def _peak_connections(url: str, done: asyncio.Event) -> int:
    import psycopg

    peak = 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        while not done.is_set():
            cursor = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
            row = await cursor.fetchone()
            peak = max(peak, int(row[0]) if row else 0)
            await asyncio.sleep(0.05)
    return peak


async def test_a_thousand_loops_on_one_saver_of_a_small_server(small_server):
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    name = f"scale_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{small_server}/postgres", autocommit=True) as admin:
        assert admin.execute("SHOW max_connections").fetchone() == ("100",)
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{small_server}/{name}"
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()
        loop = create_loop_agent(SlowAgent(), never_satisfied, ITERATIONS, checkpointer=saver)
        done = asyncio.Event()
        watcher = asyncio.create_task(_peak_connections(url, done))
        try:
            results = await asyncio.gather(
                *(
                    loop.ainvoke({"messages": [HumanMessage(f"r{i}")]}, thread(f"t{i}"))
                    for i in range(LOOPS)
                ),
                return_exceptions=True,
            )
        finally:
            done.set()
            peak = await watcher
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == [], f"{len(errors)} loops failed, the first: {errors[0]!r}"
        assert {r["stop_reason"] for r in results} == {"max_iterations"}
        # nothing lost: every thread holds its request and its three answers
        for i in (0, 1, LOOPS // 2, LOOPS - 1):
            state = await loop.aget_state(thread(f"t{i}"))
            assert [m.text for m in state.values["messages"] if m.type == "ai"] == [
                f"answer {n} for r{i}" for n in range(1, ITERATIONS + 1)
            ]
        counted = await saver.conn.execute(
            "SELECT count(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''"
        )
        row = await counted.fetchone()
        assert row is not None
        assert next(iter(row.values())) == LOOPS
    # the saver's connection, the guard's one, the watcher's: not one per loop
    assert peak <= 5, peak
