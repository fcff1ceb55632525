"""Benchmark 6b: the checkpoint bytes of a graph agent's state, before and after change sets.

A graph agent (`tests.file_agents.file_agent`, built like a deep agent: its files in its
state, given back on every attempt) adds one file of 2-20 kB per attempt. Loops of 10, 20
and 40 iterations that the evaluator never accepts (iteration 2 scores best), with
``select="last"`` and ``select="best"``, each on a fresh database: ``AsyncSqliteSaver`` on
a file in ``/dev/shm``, ``AsyncPostgresSaver`` on a private PostgreSQL cluster (as the
tests start one), ``InMemorySaver``; ``ainvoke`` with the default durability. Contenders:

- ``before``: loop_agents at commit `BEFORE` (``agent_state`` a last-value channel that
  every checkpoint stores whole; each ``attempt_states`` entry the whole state of its
  iteration), extracted with ``git archive`` and imported in place of the tree's package.
- ``after``: ``create_loop_agent`` as it is in the tree (change sets in delta channels).

Each contender runs in a process of its own (`benchmarks.storage`'s workers). Measured per
run: the bytes stored (SQLite ``LENGTH``, PostgreSQL ``pg_column_size`` of the payload
columns, in memory the serialized values) and the agent's files at the end (their
bytes; the loop's ``agent_state`` is checked against the files it must hold). The target:
doubling the iterations at most 2.4 times the bytes.

```
python -m benchmarks.agent_state_storage                 # the three savers
python -m benchmarks.agent_state_storage --savers memory,sqlite
python -m benchmarks --only storage --write BENCHMARKS.md   # with section 6
```
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from benchmarks.storage import (
    ROOT,
    _extract_before,
    _fresh_database,
    _saver,
    _scratch,
    _sizes,
    postgres_version,
)

BEFORE = "511317c"
"""The commit whose loop_agents is the ``before`` contender (agent state stored whole)."""

CONTENDERS = ("before", "after")
LABELS = {
    "before": f"before ({BEFORE}: the whole agent state in every checkpoint)",
    "after": "create_loop_agent (change sets)",
}
SAVERS = ("sqlite", "postgres", "memory")
SAVER_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "memory": "in memory"}
SELECTS = ("last", "best")
SIZES = (10, 20, 40)
TARGET_GROWTH = 2.4
REQUEST = "Write the notes, one file per attempt."


@dataclass
class FileRuns:
    """One contender's loops on one saver with one ``select``: bytes by loop length."""

    contender: str
    saver: str
    select: str
    stored: dict[int, int]
    files: dict[int, int]

    def growth(self) -> list[float]:
        """The bytes at each loop length over those at the one before (a doubling)."""
        sizes = sorted(self.stored)
        return [self.stored[b] / self.stored[a] for a, b in itertools.pairwise(sizes)]


# -- one contender's loops, in the worker process -----------------------------------------


def _never(context: Any) -> Any:
    iteration = context["iteration"]
    score = 40.0 if iteration == 2 else float(iteration % 3)
    return {"stop": False, "feedback": f"Add the next file ({iteration}).", "score": score}


async def _run_once(kind: str, iterations: int, select: str, db: str) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from loop_agents import create_loop_agent
    from tests.file_agents import file_agent, files_after

    options: dict[str, Any]
    try:  # the tree's package: controls; it repairs, as the package at `BEFORE` did
        from loop_agents.controls import AnswerSelection
    except ImportError:  # the package at `BEFORE`: keyword options, which its factory took
        options = {"select": select}
    else:
        options = {"controls": [AnswerSelection(cast(Any, select))]}
    config: Any = {"configurable": {"thread_id": "bench"}}
    async with _saver(kind, db) as saver:
        loop = create_loop_agent(file_agent(), _never, iterations, checkpointer=saver, **options)
        result = await loop.ainvoke({"messages": [HumanMessage(REQUEST)]}, config)
    expected = files_after(iterations if select == "last" else 2)
    if result["agent_state"] != {"files": expected}:
        raise RuntimeError(f"{select}/{iterations}: the loop's files are not the expected ones")
    stored, _ = _sizes(kind, db)
    files = sum(len(text.encode()) for text in files_after(iterations).values())
    return {"stored": stored, "files": files}


async def _worker(kind: str, sizes: Sequence[int], server: str) -> list[dict[str, Any]]:
    import loop_agents

    package = str(Path(loop_agents.__file__).resolve().parent.parent)
    rows = []
    with tempfile.TemporaryDirectory(prefix="loop-agents-files-", dir=_scratch()) as folder:
        for select in SELECTS:
            for iterations in sizes:
                with _fresh_database(kind, server, Path(folder)) as db:
                    run = await _run_once(kind, iterations, select, db)
                rows.append(run | {"select": select, "iterations": iterations, "package": package})
    return rows


# -- the orchestration --------------------------------------------------------------------


def _run_worker(
    contender: str, kind: str, sizes: Sequence[int], server: str, before: Path | None
) -> list[dict[str, Any]]:
    paths = [str(ROOT)] if contender == "after" else [str(before), str(ROOT)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    args = [sys.executable, "-m", "benchmarks.agent_state_storage", "worker", kind]
    args += ["--sizes", ",".join(map(str, sizes)), "--server", server]
    with tempfile.TemporaryDirectory() as cwd:  # so that the tree's package is not on sys.path
        done = subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"the {contender}/{kind} worker failed:\n{done.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    expected = str(before) if contender == "before" else str(ROOT)
    if any(row["package"] != expected for row in rows):
        raise RuntimeError(f"the {contender} worker imported loop_agents from {rows[0]['package']}")
    return rows


def measure(
    sizes: Sequence[int] = SIZES,
    savers: Sequence[str] = SAVERS,
    contenders: Sequence[str] = CONTENDERS,
) -> tuple[list[FileRuns], list[str]]:
    """Run every contender on every saver; return the runs and notes on what was left out."""
    notes: list[str] = []
    results: list[FileRuns] = []
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="before-")))
        before = _extract_before(folder, BEFORE) if "before" in contenders else None
        if "before" in contenders and before is None:
            notes.append(f"before: `git archive {BEFORE}` failed (not a git checkout?); left out")
        server = ""
        if "postgres" in savers:
            from tests.savers import PostgresCluster

            cluster = PostgresCluster()
            stack.callback(cluster.stop)
            cluster.start()
            server = cluster.url
        for kind in savers:
            for contender in contenders:
                if contender == "before" and before is None:
                    continue
                rows = _run_worker(contender, kind, sizes, server, before)
                for select in SELECTS:
                    mine = [r for r in rows if r["select"] == select]
                    results.append(
                        FileRuns(
                            contender,
                            kind,
                            select,
                            stored={r["iterations"]: r["stored"] for r in mine},
                            files={r["iterations"]: r["files"] for r in mine},
                        )
                    )
                print(f"  agent state: {kind} {contender} done", file=sys.stderr, flush=True)
    return results, notes


def files_table(results: Sequence[FileRuns]) -> str:
    """Bytes stored at each loop length and their growth per doubling, per saver."""
    from benchmarks.measure import table

    sizes = sorted({n for r in results for n in r.stored})
    rows: list[list[object]] = []
    for kind in SAVERS:
        for select in SELECTS:
            for contender in CONTENDERS:
                found = next(
                    (
                        r
                        for r in results
                        if (r.contender, r.saver, r.select) == (contender, kind, select)
                    ),
                    None,
                )
                if found is None:
                    continue
                rows.append(
                    [
                        SAVER_NAMES[kind],
                        f'"{select}"',
                        LABELS[contender],
                        *(f"{found.stored[n]:,}" for n in sizes),
                        " / ".join(f"{g:.2f}x" for g in found.growth()),
                    ]
                )
    files = next(iter(results)).files if results else {}
    headers = ["saver", "select", "loop", *(f"bytes at {n}" for n in sizes)]
    headers.append("growth per doubling")
    note = "files the agent wrote: " + ", ".join(f"{files[n]:,} B at {n}" for n in sizes)
    return table(headers, rows) + f"\n\n({note})"


def targets(results: Sequence[FileRuns]) -> list[str]:
    """The issue's target for the tree's loop, met or missed, per saver and ``select``."""
    lines = []
    for run in results:
        if run.contender != "after":
            continue
        worst = max(run.growth(), default=0.0)
        lines.append(
            f"6b. {run.saver}, select={run.select!r}: a graph agent's state grows at most "
            f"{worst:.2f}x per doubling of the iterations (target <= {TARGET_GROWTH}x): "
            f"{'met' if worst <= TARGET_GROWTH else '**missed**'}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.agent_state_storage", description=__doc__
    )
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="internal: one contender's loops, as JSON")
    worker.add_argument("saver", choices=SAVERS)
    worker.add_argument("--sizes", required=True)
    worker.add_argument("--server", default="")
    parser.add_argument("--savers", default=",".join(SAVERS))
    args = parser.parse_args(argv)
    if args.command == "worker":
        sizes = [int(s) for s in args.sizes.split(",")]
        print(json.dumps(asyncio.run(_worker(args.saver, sizes, args.server))))
        return
    results, notes = measure(SIZES, [s for s in args.savers.split(",") if s])
    print(f"PostgreSQL {postgres_version()}")
    print(files_table(results))
    for line in [*notes, *targets(results)]:
        print(f"- {line}")


if __name__ == "__main__":
    main()
