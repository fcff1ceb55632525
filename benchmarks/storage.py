"""Benchmark 6: what a loop's checkpoints store per iteration, and how long they take.

One loop per run, on a fresh database, with an instant fake model (answers of
`ANSWER_CHARS` characters of words drawn at random, so that they compress about as
prose does: PostgreSQL compresses large values) and an evaluator that gives the same
feedback until the last allowed iteration; ``ainvoke`` with the default durability, on
``AsyncSqliteSaver`` (a file) and ``AsyncPostgresSaver`` (a private PostgreSQL
cluster, as the tests start one). Contenders:

- ``before``: loop_agents at commit `BEFORE`, the layout before delta storage (every
  checkpoint stores the whole ``messages``, ``feedback`` and ``records``, and each record
  a copy of its answer), extracted with ``git archive`` and imported in place of the
  tree's package.
- ``delta``: ``create_loop_agent`` as it is in the tree (``storage="auto"``: delta
  channels on both savers).
- ``full``: the same with ``storage="full"`` (the fallback for savers without delta
  support; records still name their answers instead of copying them).
- ``minimal``: the minimal hand-written LangGraph loop of `benchmarks.contenders`
  (``add_messages`` and ``operator.add`` reducers, plain channels).
- ``deep``: ``create_loop_agent`` around a ``deepagents`` deep agent on a scripted model
  that rewrites its file ``/notes.md`` (`ANSWER_CHARS` characters) with ``write_file`` at
  every attempt, then answers: the loop keeps the agent's ``files`` between attempts
  (left out when ``deepagents``, the ``deep`` extra, is not installed).

Every contender runs in a process of its own. The SQLite files are in ``/dev/shm`` where
there is one, so that neither saver waits for the disk (the PostgreSQL cluster runs with
``fsync=off``, as in the tests): the figures are the loops' and the savers' work, not
the disk's latency. Measured per run: the bytes stored (the saver's payload columns:
SQLite ``LENGTH`` of the checkpoint, metadata and write blobs, PostgreSQL
``pg_column_size`` of the checkpoint, metadata, blob and write columns), the database's
size on disk (the SQLite file; PostgreSQL's relations with their TOAST and indexes), the
wall time of the run and the CPU time of the loop's process (PostgreSQL's own work is in
the server's), and the time a new process's loop takes to read the thread's state back
(``aget_state``: what resuming or a next run on the thread pays).

```
python -m benchmarks.storage                # 50 and 400 iterations, 5 runs, both savers
python -m benchmarks.storage --quick        # 5 and 20 iterations, one run each
python -m benchmarks --only storage --write BENCHMARKS.md
```
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "d9bc38b"
"""The commit whose loop_agents is the ``before`` contender (the layout before delta storage)."""

CONTENDERS = ("before", "delta", "full", "minimal", "deep")
LABELS = {
    "before": f"before ({BEFORE}, full values, records copy answers)",
    "delta": "create_loop_agent (delta channels)",
    "full": 'create_loop_agent, storage="full"',
    "minimal": "minimal LangGraph loop (plain channels)",
    "deep": "create_loop_agent, a deep agent rewriting its file",
}
SAVERS = ("sqlite", "postgres")
ANSWER_CHARS = 200
FEEDBACK = "Shorter, please, and mention the rain in the second line as well."
REQUEST = "Write a haiku about rain."
TARGET_BYTES_GROWTH = 1.5
TARGET_MS_GROWTH = 1.25


@dataclass
class Runs:
    """One contender's runs at one loop length on one saver."""

    contender: str
    saver: str
    iterations: int
    stored_bytes: int = 0
    disk_bytes: int = 0
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    read_seconds: list[float] = field(default_factory=list)
    storage: str = ""

    def per_iteration(self, value: float) -> float:
        return value / self.iterations

    @property
    def ms_per_iteration(self) -> float:
        return statistics.median(self.seconds) / self.iterations * 1e3

    @property
    def cpu_ms_per_iteration(self) -> float:
        return statistics.median(self.cpu_seconds) / self.iterations * 1e3

    @property
    def read_ms(self) -> float:
        return statistics.median(self.read_seconds) * 1e3


# -- one run, in the worker process -------------------------------------------------------


PROSE = (
    "rain falls soft on the old roof while grey clouds drift over quiet hills and "
    "a cold wind moves through pine needles as small birds wait under wet leaves for "
    "morning light to break across the river where stones shine like silver coins"
)
WORDS = PROSE.split()


def _model() -> Any:
    import random

    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from benchmarks.contenders import FakeChat

    class WordyChat(FakeChat):
        """`FakeChat` whose answers are words drawn at random (seeded by the call)."""

        def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
            number = next(self.counter)
            draw = random.Random(number)
            text = f"answer {number}:"
            while len(text) < ANSWER_CHARS:
                text += " " + draw.choice(WORDS)
            usage = {"input_tokens": 0, "output_tokens": 50, "total_tokens": 50}
            message = AIMessage(content=text[:ANSWER_CHARS], usage_metadata=usage)
            return ChatResult(generations=[ChatGeneration(message=message)])

    return WordyChat()


def _deep_agent() -> Any:
    """A deep agent whose scripted model rewrites /notes.md at every attempt."""
    from deepagents import create_deep_agent
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    from tests.fakes import FakeChat

    attempts = iter(range(1, 1_000_000))

    def script(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("The notes are written.")
        number = next(attempts)
        content = (f"notes {number}: " + PROSE * 2)[:ANSWER_CHARS]
        call = {"name": "write_file", "args": {"file_path": "/notes.md", "content": content}}
        return AIMessage("", tool_calls=[{**call, "id": f"write-{number}"}])

    return create_deep_agent(model=FakeChat.of(script), tools=[])


def _build(contender: str, iterations: int, checkpointer: Any) -> Any:
    from benchmarks.contenders import accept_at, minimal_langgraph_loop
    from loop_agents import create_loop_agent

    if TYPE_CHECKING:  # not at run time: the "before" package has no Storage
        from loop_agents.loop.storage import Storage

    model = _model()
    evaluator = accept_at(iterations, FEEDBACK)
    if contender == "minimal":
        return minimal_langgraph_loop(model, evaluator, iterations, checkpointer=checkpointer)
    if contender == "before":
        return create_loop_agent(model, evaluator, iterations, checkpointer=checkpointer)
    if contender == "deep":
        return create_loop_agent(_deep_agent(), evaluator, iterations, checkpointer=checkpointer)
    storage: Storage = "auto" if contender == "delta" else "full"
    return create_loop_agent(
        model, evaluator, iterations, checkpointer=checkpointer, storage=storage
    )


@contextlib.asynccontextmanager
async def _saver(kind: str, db: str) -> AsyncIterator[Any]:
    if kind == "memory":  # one saver per database name, for the run and its reading back
        from langgraph.checkpoint.memory import InMemorySaver

        yield _MEMORY.setdefault(db, InMemorySaver())
        return
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(db) as sqlite:
            yield sqlite
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(db) as postgres:
        await postgres.setup()
        yield postgres


_MEMORY: dict[str, Any] = {}
"""The in-memory savers of this process, by the name `_fresh_database` gave them."""


@contextlib.contextmanager
def _fresh_database(kind: str, server: str, folder: Path) -> Iterator[str]:
    if kind == "memory":
        name = uuid.uuid4().hex
        try:
            yield name
        finally:
            _MEMORY.pop(name, None)
        return
    if kind == "sqlite":
        path = folder / f"{uuid.uuid4().hex}.sqlite"
        try:
            yield str(path)
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sizes(kind: str, db: str) -> tuple[int, int]:
    """(bytes stored in the payload columns, bytes on disk) of a closed database.

    In memory: the serialized values the saver keeps, twice (there is no disk).
    """
    if kind == "memory":
        from tests.savers import stored_bytes

        saver = _MEMORY[db]
        total = sum(stored_bytes(saver, thread) for thread in list(saver.storage))
        return total, total
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            stored = conn.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) "
                "FROM checkpoints) + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes)"
            ).fetchone()[0]
        return int(stored), os.path.getsize(db)
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("VACUUM")
        stored = conn.execute(
            "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)),"
            " 0) FROM checkpoints) + (SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM "
            "checkpoint_blobs) + (SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM "
            "checkpoint_writes)"
        ).fetchone()
        disk = conn.execute(
            "SELECT SUM(pg_total_relation_size(t)) FROM unnest(ARRAY['checkpoints', "
            "'checkpoint_blobs', 'checkpoint_writes']) AS t"
        ).fetchone()
    if stored is None or disk is None:
        raise RuntimeError("PostgreSQL returned no sizes")
    return int(stored[0]), int(disk[0])


async def _run_once(contender: str, kind: str, iterations: int, db: str) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    config: Any = {"configurable": {"thread_id": "bench"}}
    async with _saver(kind, db) as saver:
        loop = _build(contender, iterations, saver)
        started, cpu = time.perf_counter(), time.process_time()
        result = await loop.ainvoke({"messages": [HumanMessage(REQUEST)]}, config)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    answers = sum(1 for m in result["messages"] if m.type == "ai")
    if contender == "deep":
        answers //= 2  # each attempt: the tool call, then the answer
    if answers != iterations:
        raise RuntimeError(f"{contender}: {answers} answers, expected {iterations}")
    async with _saver(kind, db) as saver:  # a new connection, as a new process has
        loop = _build(contender, iterations, saver)
        started = time.perf_counter()
        state = await loop.aget_state(config)
        read_seconds = time.perf_counter() - started
    if len(state.values["messages"]) != len(result["messages"]):
        raise RuntimeError(f"{contender}: the state read back differs from the result")
    stored, disk = _sizes(kind, db)
    storage = ""
    if contender in ("delta", "full"):
        from loop_agents.loop.storage import storage_of

        storage = storage_of(loop)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "read_seconds": read_seconds,
        "stored": stored,
        "disk": disk,
        "storage": storage,
    }


def _scratch() -> str | None:
    """Where the SQLite files go: ``/dev/shm`` (memory: no fsync, as the PostgreSQL
    cluster runs with ``fsync=off``), else the default temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


async def _worker(
    contender: str, kind: str, sizes: Sequence[int], runs: int, server: str
) -> list[dict[str, Any]]:
    import loop_agents

    package = str(Path(loop_agents.__file__).resolve().parent.parent)
    out = []
    with tempfile.TemporaryDirectory(prefix="loop-agents-storage-", dir=_scratch()) as folder:
        with _fresh_database(kind, server, Path(folder)) as db:
            await _run_once(contender, kind, 3, db)  # warm up: imports, caches, the saver
        for _ in range(runs):  # the lengths interleaved, so that a change of load hits both
            for iterations in sizes:
                with _fresh_database(kind, server, Path(folder)) as db:
                    gc.collect()
                    run = await _run_once(contender, kind, iterations, db)
                out.append(run | {"iterations": iterations, "package": package})
    return out


# -- the orchestration --------------------------------------------------------------------


def _extract_before(folder: Path, commit: str = BEFORE) -> Path | None:
    """loop_agents at ``commit``, extracted into ``folder``; ``None`` if git cannot give it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "loop_agents"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _run_worker(
    contender: str, kind: str, sizes: Sequence[int], runs: int, server: str, before: Path | None
) -> list[dict[str, Any]]:
    paths = [str(ROOT)] if contender != "before" else [str(before), str(ROOT)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    args = [sys.executable, "-m", "benchmarks.storage", "worker", contender, kind]
    args += ["--sizes", ",".join(map(str, sizes)), "--runs", str(runs), "--server", server]
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
    sizes: Sequence[int] = (50, 400),
    runs: int = 3,
    savers: Sequence[str] = SAVERS,
    contenders: Sequence[str] = CONTENDERS,
) -> tuple[list[Runs], list[str]]:
    """Run every contender on every saver; return the runs and notes on what was left out."""
    notes: list[str] = []
    results: list[Runs] = []
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="before-")))
        before = _extract_before(folder) if "before" in contenders else None
        if "before" in contenders and before is None:
            notes.append(f"before: `git archive {BEFORE}` failed (not a git checkout?); left out")
        server = ""
        if "postgres" in savers:
            from tests.savers import PostgresCluster

            cluster = PostgresCluster()
            stack.callback(cluster.stop)
            cluster.start()
            server = cluster.url
        if "deep" in contenders and importlib.util.find_spec("deepagents") is None:
            notes.append("deep: deepagents (the deep extra) is not installed; left out")
            contenders = [c for c in contenders if c != "deep"]
        for kind in savers:
            for contender in contenders:
                if contender == "before" and before is None:
                    continue
                rows = _run_worker(contender, kind, sizes, runs, server, before)
                for iterations in sizes:
                    mine = [r for r in rows if r["iterations"] == iterations]
                    results.append(
                        Runs(
                            contender,
                            kind,
                            iterations,
                            stored_bytes=mine[0]["stored"],
                            disk_bytes=mine[0]["disk"],
                            seconds=[r["seconds"] for r in mine],
                            cpu_seconds=[r["cpu_seconds"] for r in mine],
                            read_seconds=[r["read_seconds"] for r in mine],
                            storage=mine[0]["storage"],
                        )
                    )
                print(f"  storage: {kind} {contender} done", file=sys.stderr, flush=True)
    return results, notes


def postgres_version() -> str:
    """The version of the PostgreSQL server programs the benchmark starts (or "?")."""
    from tests.savers import postgres_bin

    try:
        done = subprocess.run(
            [postgres_bin("postgres"), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    found = re.search(r"\d+(\.\d+)+", done.stdout)  # "postgres (PostgreSQL) 15.18 (Debian ...)"
    return found.group(0) if found else "?"


def _find(results: Sequence[Runs], contender: str, kind: str, iterations: int) -> Runs | None:
    return next(
        (
            r
            for r in results
            if (r.contender, r.saver, r.iterations) == (contender, kind, iterations)
        ),
        None,
    )


def storage_table(results: Sequence[Runs]) -> str:
    """Bytes and ms per iteration at each loop length, and their growth, per saver."""
    from benchmarks.measure import table

    sizes = sorted({r.iterations for r in results})
    short, long = sizes[0], sizes[-1]
    rows: list[list[object]] = []
    for kind in SAVERS:
        for contender in CONTENDERS:
            first = _find(results, contender, kind, short)
            last = _find(results, contender, kind, long)
            if first is None or last is None:
                continue
            rows.append(
                [
                    "SQLite" if kind == "sqlite" else "PostgreSQL",
                    LABELS[contender],
                    f"{first.per_iteration(first.stored_bytes):,.0f}",
                    f"{last.per_iteration(last.stored_bytes):,.0f}",
                    f"{_ratio(last.stored_bytes / long, first.stored_bytes / short)}",
                    f"{last.per_iteration(last.disk_bytes) / 1024:,.1f}",
                    f"{first.ms_per_iteration:.2f}",
                    f"{last.ms_per_iteration:.2f}",
                    f"{_ratio(last.ms_per_iteration, first.ms_per_iteration)}",
                    f"{_ratio(last.cpu_ms_per_iteration, first.cpu_ms_per_iteration)}",
                    f"{last.read_ms:,.0f}",
                ]
            )
    return table(
        [
            "saver",
            "loop",
            f"B/it. at {short}",
            f"B/it. at {long}",
            "growth",
            f"disk KiB/it. at {long}",
            f"ms/it. at {short}",
            f"ms/it. at {long}",
            "growth",
            "CPU growth",
            f"read ms at {long}",
        ],
        rows,
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def targets(results: Sequence[Runs]) -> list[str]:
    """The issue's targets for the delta loop, met or missed, per saver."""
    sizes = sorted({r.iterations for r in results})
    short, long = sizes[0], sizes[-1]
    lines = []
    for kind in SAVERS:
        first, last = _find(results, "delta", kind, short), _find(results, "delta", kind, long)
        if first is None or last is None:
            continue
        growth = (last.stored_bytes / long) / (first.stored_bytes / short)
        ms_growth = last.ms_per_iteration / first.ms_per_iteration
        ok, ms_ok = growth <= TARGET_BYTES_GROWTH, ms_growth <= TARGET_MS_GROWTH
        lines.append(
            f"6. {kind}: bytes per iteration at {long} are {growth:.2f}x those at {short} "
            f"(target <= {TARGET_BYTES_GROWTH}x): {'met' if ok else '**missed**'}; ms per "
            f"iteration {ms_growth:.2f}x (target: flat, <= {TARGET_MS_GROWTH}x): "
            f"{'met' if ms_ok else '**missed**'}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.storage", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="internal: one contender's runs, as JSON")
    worker.add_argument("contender", choices=CONTENDERS)
    worker.add_argument("saver", choices=SAVERS)
    worker.add_argument("--sizes", required=True)
    worker.add_argument("--runs", type=int, default=1)
    worker.add_argument("--server", default="")
    parser.add_argument("--quick", action="store_true", help="5 and 20 iterations, one run")
    parser.add_argument("--savers", default=",".join(SAVERS))
    args = parser.parse_args(argv)
    if args.command == "worker":
        sizes = [int(s) for s in args.sizes.split(",")]
        rows = asyncio.run(_worker(args.contender, args.saver, sizes, args.runs, args.server))
        print(json.dumps(rows))
        return
    sizes, runs = ([5, 20], 1) if args.quick else ([50, 400], 5)
    results, notes = measure(sizes, runs, [s for s in args.savers.split(",") if s])
    print(storage_table(results))
    for line in [*notes, *targets(results)]:
        print(f"- {line}")


if __name__ == "__main__":
    main()
