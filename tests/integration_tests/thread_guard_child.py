"""A loop run in a child process, holding its thread while the test tries it from outside.

``python tests/integration_tests/thread_guard_child.py --saver sqlite|postgres --db PATH_OR_URL
--thread ID [--async] [--hold]``

With ``--hold`` the agent's first call prints ``IN-AGENT`` and waits for a line on
standard input before it answers (the test decides when the run ends, or kills the
process there). The loop accepts the second answer; at the end the child prints
``DONE`` and the transcript as JSON. When the thread is busy it prints ``BUSY`` and the
error's holder and exits with status 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_core.messages import AnyMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, ThreadBusyError, create_loop_agent

BUSY_EXIT = 3


@contextmanager
def sync_saver(kind: str, db: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(db) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(db) as saver:
            yield saver


@asynccontextmanager
async def async_saver(kind: str, db: str) -> AsyncIterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(db) as saver:
            yield saver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    held = [args.hold]

    def answer(messages: list[AnyMessage]) -> str:
        iteration = sum(1 for m in messages if m.type == "ai") + 1
        if held[0]:
            held[0] = False
            print("IN-AGENT", flush=True)
            sys.stdin.readline()
        return f"answer {iteration}"

    def evaluate(context: LoopContext) -> LoopEvaluation:
        done = context["iteration"] >= 2
        return {"stop": done, "feedback": f"feedback {context['iteration']}"}

    inputs = {"messages": [HumanMessage("Write a haiku about rain.")]}
    config: Any = {"configurable": {"thread_id": args.thread}}
    try:
        if args.use_async:

            async def run() -> dict[str, Any]:
                async with async_saver(args.saver, args.db) as saver:
                    loop = create_loop_agent(answer, evaluate, 3, checkpointer=saver)
                    return await loop.ainvoke(inputs, config, durability="sync")

            result = asyncio.run(run())
        else:
            with sync_saver(args.saver, args.db) as saver:
                loop = create_loop_agent(answer, evaluate, 3, checkpointer=saver)
                result = loop.invoke(inputs, config, durability="sync")
    except ThreadBusyError as error:
        print("BUSY", error.holder, flush=True)
        sys.exit(BUSY_EXIT)
    transcript = [(m.type, m.text) for m in result["messages"]]
    print("DONE", json.dumps(transcript), flush=True)


if __name__ == "__main__":
    main()
