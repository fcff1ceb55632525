"""Write ``threads.sqlite``: threads of a graph agent as loop_agents stored them before change sets.

Run it with the loop_agents of commit 511317c (``agent_state`` a last-value channel that
stores the agent's whole state in every checkpoint that changes it, and each
``attempt_states`` entry the whole state of its iteration)::

    mkdir -p /tmp/old && git archive 511317c loop_agents | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/data/agent_state_layout/make_threads.py

It refuses to run with a loop_agents that stores change sets. The agent is
`tests.file_agents.file_agent` (one new file of 200-2,000 bytes per call); the evaluator never accepts and
scores iterations 1-4 with 10, 40, 20, 30, so ``select="best"`` picks iteration 2. With
``max_iterations=4``:

- ``finished``: four iterations; its ``agent_state`` is iteration 2's files.
- ``failed``: the evaluator raised in iteration 3 (the agent's third file is saved;
  resuming evaluates it and runs iteration 4).

``tests/test_agent_state_storage.py`` loads and resumes them with the current loop.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.append(str(ROOT))  # tests.file_agents; loop_agents comes from PYTHONPATH first

from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

import loop_agents  # noqa: E402
from loop_agents import LoopContext, LoopEvaluation, create_loop_agent  # noqa: E402
from loop_agents.loop import agent_state  # noqa: E402
from tests.file_agents import file_agent  # noqa: E402

OUT = Path(__file__).with_name("threads.sqlite")
REQUEST = "Write the notes."
SCORES = [10.0, 40.0, 20.0, 30.0]
SIZES = (200, 2_000)
"""The files' sizes in bytes (small: the old layout stores every file in every step)."""


class Failure(Exception):
    """The evaluator's failure in the ``failed`` thread."""


def evaluator(fail_at: int | None) -> Any:
    def evaluate(context: LoopContext) -> LoopEvaluation:
        iteration = context["iteration"]
        if iteration == fail_at:
            raise Failure(f"the evaluator failed at iteration {iteration}")
        return {"stop": False, "feedback": f"feedback {iteration}", "score": SCORES[iteration - 1]}

    return evaluate


def main() -> None:
    if hasattr(agent_state, "changes"):
        sys.exit(
            f"this loop_agents ({loop_agents.__file__}) stores change sets; run the script "
            f"with the loop_agents of commit 511317c (see its docstring)"
        )
    OUT.unlink(missing_ok=True)
    conn = sqlite3.connect(OUT, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        request = {"messages": [HumanMessage(REQUEST)]}
        for name, fail_at in (("finished", None), ("failed", 3)):
            loop = create_loop_agent(
                file_agent(sizes=SIZES), evaluator(fail_at), 4, checkpointer=saver, select="best"
            )
            try:
                loop.invoke(request, {"configurable": {"thread_id": name}}, durability="sync")
            except Failure:
                pass
        conn.commit()
        conn.execute("PRAGMA journal_mode=DELETE")  # everything in the one file
        conn.execute("VACUUM")
    finally:
        conn.close()
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
