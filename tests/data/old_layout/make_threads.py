"""Write ``threads.sqlite``: loop threads as loop_agents stored them before delta storage.

Run it with the loop_agents of commit d9bc38b (the layout before delta channels: every
checkpoint holds the whole ``messages``, ``feedback`` and ``records``, and each record a
copy of its answer)::

    mkdir -p /tmp/old && git archive d9bc38b loop_agents | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/data/old_layout/make_threads.py

It refuses to run with a loop_agents whose records name their answer by id. The
threads, all on the request "Write a haiku about rain.", with answers ``answer N`` and
feedback ``feedback N`` (score N):

- ``finished``: accepted at iteration 3.
- ``failed``: the agent raised in iteration 3 (its answers 1 and 2 and their
  evaluations are saved; resuming calls the agent for iteration 3).

``tests/test_storage_migration.py`` loads them with the current loop.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

import loop_agents
from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.state import IterationRecord

OUT = Path(__file__).with_name("threads.sqlite")
REQUEST = "Write a haiku about rain."


class Failure(Exception):
    """The agent's failure in the ``failed`` thread."""


def agent_failing_at(fail_at: int | None) -> Any:
    def agent(messages: list[AnyMessage]) -> str:
        iteration = sum(1 for m in messages if m.type == "ai") + 1
        if iteration == fail_at:
            raise Failure(f"agent failed at iteration {iteration}")
        return f"answer {iteration}"

    return agent


def evaluate(context: LoopContext) -> LoopEvaluation:
    iteration = context["iteration"]
    if iteration >= 3:
        return {"stop": True, "score": float(iteration)}
    return {"stop": False, "feedback": f"feedback {iteration}", "score": float(iteration)}


def main() -> None:
    if "answer_id" in IterationRecord.__annotations__:
        sys.exit(
            f"this loop_agents ({loop_agents.__file__}) already names answers by id; run "
            f"the script with the loop_agents of commit d9bc38b (see its docstring)"
        )
    OUT.unlink(missing_ok=True)
    conn = sqlite3.connect(OUT, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        request = {"messages": [HumanMessage(REQUEST)]}
        finished = create_loop_agent(agent_failing_at(None), evaluate, 5, checkpointer=saver)
        finished.invoke(request, {"configurable": {"thread_id": "finished"}}, durability="sync")
        failing = create_loop_agent(agent_failing_at(3), evaluate, 5, checkpointer=saver)
        try:
            failing.invoke(request, {"configurable": {"thread_id": "failed"}}, durability="sync")
        except Failure:
            pass
        else:
            sys.exit("the 'failed' thread did not fail")
        conn.commit()
        conn.execute("PRAGMA journal_mode=DELETE")  # everything in the one file
        conn.execute("VACUUM")
    finally:
        conn.close()
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
