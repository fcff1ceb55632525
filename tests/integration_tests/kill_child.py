"""A loop run in a child process that the kill-and-resume test SIGKILLs.

``python tests/integration_tests/kill_child.py start|resume --saver sqlite|postgres --db PATH_OR_URL
--log FILE [--kill POINT:ITERATION] [--async] [--durability sync|async|exit]
[--storage auto|delta|full] [--snapshot-every N]``

- ``start`` runs a new loop on thread ``killed`` (``durability="sync"`` unless
  ``--durability`` says otherwise); at the kill point it prints ``KILL-POINT`` and
  waits to be killed. Points: ``after_agent`` (the agent call of that iteration
  finished and its step was reported), ``evaluator`` (inside the evaluator),
  ``between`` (the evaluation finished; the next iteration has not started).
- ``resume`` finishes the loop with ``invoke(None, config)`` and prints the result as
  JSON, with the storage the loop used (``storage_of``) and whether the thread's latest
  checkpoint holds ``messages`` in full. (With ``--durability exit`` nothing was saved
  before the kill and it fails.)

``--storage`` is passed to ``create_loop_agent`` (default ``auto``: delta channels on
both databases); ``--snapshot-every N`` makes the delta channels store a full snapshot
every N updates (instead of every 1000), so that the kill lands after snapshots.

Every agent and evaluator call is appended to ``--log`` (``agent N`` / ``evaluator N``)
so that the test can count calls across both processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_core.messages import AnyMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.loop import storage
from loop_agents.loop.storage import storage_of
from tests.durable_helpers import frequent_snapshot_keys

ACCEPT_AT = 4
CONFIG: Any = {"configurable": {"thread_id": "killed"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["start", "resume"])
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--kill", default="")
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--durability", default="sync", choices=["sync", "async", "exit"])
    parser.add_argument("--storage", default="auto", choices=["auto", "delta", "full"])
    parser.add_argument("--snapshot-every", type=int, default=0)
    args = parser.parse_args()
    if args.snapshot_every:
        storage.DELTA_KEYS = frequent_snapshot_keys(args.snapshot_every)
    point, _, at = args.kill.partition(":")
    kill_at = int(at) if at else 0

    def record(what: str) -> None:
        with open(args.log, "a") as log:
            log.write(f"{what}\n")

    def wait_for_kill() -> None:
        print("KILL-POINT", flush=True)
        time.sleep(600)
        raise SystemExit("was not killed")

    def agent(messages: list[AnyMessage]) -> str:
        iteration = sum(1 for m in messages if m.type == "ai") + 1
        record(f"agent {iteration}")
        return f"answer {iteration}"

    def evaluate(context: LoopContext) -> LoopEvaluation:
        iteration = context["iteration"]
        record(f"evaluator {iteration}")
        if point == "evaluator" and iteration == kill_at:
            wait_for_kill()
        if iteration >= ACCEPT_AT:
            return {"stop": True}
        return {"stop": False, "feedback": f"feedback {iteration}"}

    def on_update(update: dict[str, Any]) -> None:
        node, values = next(iter(update.items()))
        agent_done = node == "invoke_agent" and values["last_response"].text == f"answer {kill_at}"
        evaluation_done = node == "evaluate" and values["records"][-1]["iteration"] == kill_at
        if (point == "after_agent" and agent_done) or (point == "between" and evaluation_done):
            wait_for_kill()

    def finish(result: dict[str, Any], loop: Any, latest: Any) -> None:
        print(
            json.dumps(
                {
                    "messages": [[m.type, m.text] for m in result["messages"]],
                    "iteration": result["iteration"],
                    "stop_reason": result["stop_reason"],
                    "records": [r["iteration"] for r in result["records"]],
                    "storage": storage_of(loop),
                    "latest_holds_messages": "messages" in latest.checkpoint["channel_values"],
                }
            ),
            flush=True,
        )

    request = {"messages": [HumanMessage("Write a haiku about rain.")]}
    if args.use_async:

        async def run() -> None:
            async with async_saver(args.saver, args.db) as saver:
                loop = create_loop_agent(
                    agent,
                    evaluate,
                    10,
                    checkpointer=saver,
                    storage=args.storage,
                )
                if args.mode == "start":
                    async for update in loop.astream(
                        request, CONFIG, stream_mode="updates", durability=args.durability
                    ):
                        on_update(update)
                    raise SystemExit("the loop finished without reaching the kill point")
                result = await loop.ainvoke(None, CONFIG, durability=args.durability)
                finish(result, loop, await saver.aget_tuple(CONFIG))

        asyncio.run(run())
        return
    with sync_saver(args.saver, args.db) as saver:
        loop = create_loop_agent(agent, evaluate, 10, checkpointer=saver, storage=args.storage)
        if args.mode == "start":
            for update in loop.stream(
                request, CONFIG, stream_mode="updates", durability=args.durability
            ):
                on_update(update)
            raise SystemExit("the loop finished without reaching the kill point")
        finish(loop.invoke(None, CONFIG, durability=args.durability), loop, saver.get_tuple(CONFIG))


@contextmanager
def sync_saver(kind: str, db: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with sqlite3.connect(db, check_same_thread=False) as conn:
            yield SqliteSaver(conn)
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(db) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def async_saver(kind: str, db: str) -> AsyncIterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            yield saver
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(db) as saver:
        await saver.setup()
        yield saver


if __name__ == "__main__":
    main()
