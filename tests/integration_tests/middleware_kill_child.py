"""A create_agent agent with LoopMiddleware, run in a child process that a test SIGKILLs.

``python tests/integration_tests/middleware_kill_child.py start|resume [--saver sqlite|postgres] --db PATH_OR_URL
--log FILE [--kill POINT:ITERATION] [--async] [--storage delta|full]``

- ``start`` runs the agent on thread ``killed`` with ``durability="sync"``; at the kill
  point it prints ``KILL-POINT`` and waits to be killed. Points: ``after_model`` (the
  model call of that iteration finished and its step was reported), ``evaluator``
  (inside the evaluator), ``between`` (the evaluation finished and the next iteration
  was opened; its model call has not started).
- ``resume`` finishes the run with ``invoke(None, config)`` and prints the result as JSON.

Every model and evaluator call is appended to ``--log`` (``agent N`` / ``evaluator N``)
so that the test can count calls across both processes. The checkpointer is SQLite (a
file) or PostgreSQL (a URL), as in ``tests/integration_tests/kill_child.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, LoopMiddleware
from tests.fakes import FakeChat
from tests.integration_tests.kill_child import async_saver, sync_saver

ACCEPT_AT = 4
CONFIG: Any = {"configurable": {"thread_id": "killed"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["start", "resume"])
    parser.add_argument("--saver", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--kill", default="")
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--storage", default="delta", choices=["delta", "full"])
    args = parser.parse_args()
    point, _, at = args.kill.partition(":")
    kill_at = int(at) if at else 0

    def record(what: str) -> None:
        with open(args.log, "a") as log:
            log.write(f"{what}\n")

    def wait_for_kill() -> None:
        print("KILL-POINT", flush=True)
        time.sleep(600)
        raise SystemExit("was not killed")

    def answer(messages: list[AnyMessage]) -> str:
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
        values = values or {}
        model_done = node == "model" and values["messages"][-1].text == f"answer {kill_at}"
        records = values.get("loop_records") or []
        judged = node.endswith("after_agent") and records and records[-1]["iteration"] == kill_at
        if (point == "after_model" and model_done) or (point == "between" and judged):
            wait_for_kill()

    def build(saver: Any) -> Any:
        loop = LoopMiddleware(evaluate, 10, storage=args.storage)
        return create_agent(FakeChat.of(answer), middleware=[loop], checkpointer=saver)

    def finish(result: dict[str, Any]) -> None:
        print(
            json.dumps(
                {
                    "messages": [[m.type, m.text] for m in result["messages"]],
                    "iteration": result["loop_iteration"],
                    "stop_reason": result["loop_stop_reason"],
                    "records": [r["iteration"] for r in result["loop_records"]],
                    "answers": [r["answer"].text for r in result["loop_records"]],
                }
            ),
            flush=True,
        )

    request = {"messages": [HumanMessage("Write a haiku about rain.")]}
    if args.use_async:

        async def run() -> None:
            async with async_saver(args.saver, args.db) as saver:
                agent = build(saver)
                if args.mode == "start":
                    async for update in agent.astream(
                        request, CONFIG, stream_mode="updates", durability="sync"
                    ):
                        on_update(update)
                    raise SystemExit("the run finished without reaching the kill point")
                finish(await agent.ainvoke(None, CONFIG, durability="sync"))

        asyncio.run(run())
        return
    with sync_saver(args.saver, args.db) as saver:
        agent = build(saver)
        if args.mode == "start":
            for update in agent.stream(request, CONFIG, stream_mode="updates", durability="sync"):
                on_update(update)
            raise SystemExit("the run finished without reaching the kill point")
        finish(agent.invoke(None, CONFIG, durability="sync"))


if __name__ == "__main__":
    main()
