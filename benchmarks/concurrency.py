"""Benchmark 2: many loops at once, with a model that takes 50 ms per call.

200 loops of 3 iterations each run concurrently, started with ``abatch`` or with
``asyncio.gather`` over ``ainvoke``. Measured for ``create_loop_agent`` and for the
minimal LangGraph loop under the same load:

- wall and CPU time of the whole batch (interleaved rounds, medians);
- the event loop's lag: a ticker task that should wake every 5 ms records how late it
  woke (a busy loop delays it: 200 loops waking at once keep it busy, as would a call
  that blocks);
- blocking: a separate run in asyncio debug mode, with the garbage collector paused,
  lists every callback that held the event loop for 20 ms or more (a blocking call in
  the async path would show up here, once per call; a normal step takes well under a
  millisecond, and an occasional one is delayed when another process has the CPU);
- peak memory: a separate run under ``tracemalloc``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable

from benchmarks.contenders import FakeChat, accept_at, minimal_langgraph_loop
from benchmarks.measure import LagTicker, table
from loop_agents import create_loop_agent
from loop_agents.runtime.thread_locking import athread_guard

OURS = "create_loop_agent"
MINIMAL = "minimal LangGraph loop"
SLOW_CALLBACK = 0.02


@dataclass
class Load:
    """What one contender did under one way of starting the loops."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    max_lag: list[float] = field(default_factory=list)
    slow_callbacks: list[float] = field(default_factory=list)
    peak_mib: float = 0.0


def _graphs(iterations: int, delay: float) -> dict[str, Runnable[Any, Any]]:
    model = FakeChat(delay=delay)
    evaluator = accept_at(iterations)
    return {
        OURS: create_loop_agent(model, evaluator, iterations),
        MINIMAL: minimal_langgraph_loop(model, evaluator, iterations),
    }


def _starter(graph: Runnable[Any, Any], how: str, loops: int) -> Callable[[], Awaitable[object]]:
    def inputs() -> list[dict[str, list[HumanMessage]]]:
        return [{"messages": [HumanMessage(f"Request {i}")]} for i in range(loops)]

    if how == "abatch":
        return lambda: graph.abatch(inputs())

    async def gathered() -> object:
        return await asyncio.gather(*(graph.ainvoke(i) for i in inputs()))

    return gathered


class _SlowCallbacks(logging.Handler):
    """Collects asyncio debug mode's "Executing <callback> took N seconds" warnings.

    The steps of the benchmark's own task (``ignore``: starting the loops, switching
    debug mode off) are not counted.
    """

    def __init__(self, ignore: str) -> None:
        super().__init__(logging.WARNING)
        self.ignore = f"name={ignore!r}"
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not (record.msg.startswith("Executing") and isinstance(record.args, tuple)):
            return
        if self.ignore not in str(record.args[0]):
            seconds = record.args[-1]
            if isinstance(seconds, float | int):
                self.seconds.append(float(seconds))


async def _debug_run(start: Callable[[], Awaitable[object]]) -> list[float]:
    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    handler = _SlowCallbacks(current.get_name() if current else "")
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    loop.slow_callback_duration = SLOW_CALLBACK
    gc.collect()
    gc.disable()
    loop.set_debug(True)
    try:
        await start()
    finally:
        loop.set_debug(False)
        gc.enable()
        await asyncio.sleep(0)  # the step that switched debug mode off is reported now
        logger.removeHandler(handler)
        logger.propagate = propagate
    return handler.seconds


async def _peak_mib(start: Callable[[], Awaitable[object]]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        await start()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


async def measure(
    *, loops: int = 200, iterations: int = 3, delay: float = 0.05, rounds: int = 5
) -> dict[tuple[str, str], Load]:
    """Run both contenders both ways; see the module docstring for what is measured."""
    graphs = _graphs(iterations, delay)
    results: dict[tuple[str, str], Load] = {}
    starters: dict[tuple[str, str], Callable[[], Awaitable[object]]] = {}
    for how in ("abatch", "gather"):
        for name, graph in graphs.items():
            starters[(how, name)] = _starter(graph, how, loops)
            results[(how, name)] = Load()
    for start in starters.values():  # warm up
        await start()
    for key in interleaved(list(starters), rounds):
        gc.collect()
        with LagTicker() as ticker:
            cpu, wall = time.process_time(), time.perf_counter()
            await starters[key]()
            results[key].wall.append(time.perf_counter() - wall)
            results[key].cpu.append(time.process_time() - cpu)
        results[key].max_lag.append(ticker.max_lag)
    for key, start in starters.items():
        results[key].slow_callbacks = await _debug_run(start)
        results[key].peak_mib = await _peak_mib(start)
    return results


def interleaved(keys: list[Any], rounds: int) -> Iterator[Any]:
    """Every key once per round, each round starting one key later (fair to all)."""
    for number in range(rounds):
        shift = number % len(keys)
        yield from keys[shift:] + keys[:shift]


def wall_ratio(results: dict[tuple[str, str], Load], how: str) -> float:
    """create_loop_agent's wall time over the minimal loop's (median of paired rounds)."""
    ours, minimal = results[(how, OURS)].wall, results[(how, MINIMAL)].wall
    return statistics.median(a / b for a, b in zip(ours, minimal, strict=True))


def concurrency_table(results: dict[tuple[str, str], Load], loops: int) -> str:
    """Benchmark 2's table."""
    rows = []
    for (how, name), load in results.items():
        ratio = wall_ratio(results, how) if name == OURS else 1.0
        slow = load.slow_callbacks
        rows.append(
            [
                f"{loops} x {how}",
                name,
                f"{statistics.median(load.wall) * 1e3:,.0f} ms",
                f"{ratio:.2f}x",
                f"{statistics.median(load.cpu) * 1e3:,.0f} ms",
                f"{statistics.median(load.max_lag) * 1e3:,.0f} ms",
                f"{len(slow)}, max {max(slow, default=0.0) * 1e3:,.0f} ms",
                f"{load.peak_mib:,.1f} MiB",
            ]
        )
    return table(
        [
            "load",
            "loop",
            "wall",
            "wall vs minimal",
            "CPU",
            "ticker max lag",
            f"callbacks >= {SLOW_CALLBACK * 1e3:.0f} ms",
            "peak memory",
        ],
        rows,
    )


# -- the same load on a checkpointer: the thread guard's cost ----------------------------

GUARDED = "minimal loop inside athread_guard"
SAVER_KINDS = ("memory", "sqlite", "postgres")
CAP = 80
"""Loops allowed at once in the capped runs (an ``asyncio.Semaphore``)."""


@dataclass(frozen=True)
class SaverLoad:
    """One saver, one cap (``None``: every loop at once), one contender."""

    saver: str
    cap: int | None
    loop: str


@asynccontextmanager
async def _saver(kind: str, folder: Path, server: str) -> AsyncIterator[Any]:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(folder / "loops.sqlite")) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(f"{server}/postgres") as saver:
            await saver.setup()
            yield saver


def _saver_starter(
    graph: Runnable[Any, Any],
    saver: Any,
    guarded: bool,
    loops: int,
    cap: int | None,
    *,
    tag: str,
) -> Callable[[], Awaitable[object]]:
    """Start ``loops`` loops, each on a new thread: ``tag`` (one per starter) keeps the
    starters on one saver from resuming each other's threads."""
    runs = itertools.count()

    async def start() -> object:
        batch = next(runs)
        gate = asyncio.Semaphore(cap or loops)

        async def one(i: int) -> object:
            config: Any = {"configurable": {"thread_id": f"{tag}-{batch}-{i}"}}
            async with gate:
                if not guarded:
                    return await graph.ainvoke({"messages": [HumanMessage(f"R{i}")]}, config)
                async with athread_guard(saver, config):
                    return await graph.ainvoke({"messages": [HumanMessage(f"R{i}")]}, config)

        done = await asyncio.gather(*(one(i) for i in range(loops)))
        if len(done) != loops:
            raise RuntimeError(f"{len(done)} of {loops} loops ended")
        return done

    return start


async def measure_savers(
    *,
    loops: int = 1000,
    iterations: int = 3,
    delay: float = 0.05,
    rounds: int = 3,
    kinds: tuple[str, ...] = SAVER_KINDS,
    server: str = "",
) -> dict[SaverLoad, list[float]]:
    """Wall times of the three contenders on each saver, every loop at once and capped.

    Each loop has a thread of its own; the contenders take turns in every round, on one
    saver (one database) per kind. ``server``: a PostgreSQL server's URL (its
    ``postgres`` database is used), needed for ``"postgres"``.
    """
    results: dict[SaverLoad, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-", dir=_fast_folder()) as folder:
        for kind in kinds:
            async with _saver(kind, Path(folder), server) as saver:
                model, evaluator = FakeChat(delay=delay), accept_at(iterations)
                ours = create_loop_agent(model, evaluator, iterations, checkpointer=saver)
                minimal = minimal_langgraph_loop(model, evaluator, iterations, checkpointer=saver)
                starters: dict[SaverLoad, Callable[[], Awaitable[object]]] = {}
                for cap in (None, CAP):
                    for name, graph, guarded in (
                        (MINIMAL, minimal, False),
                        (GUARDED, minimal, True),
                        (OURS, ours, False),
                    ):
                        starters[SaverLoad(kind, cap, name)] = _saver_starter(
                            graph, saver, guarded, loops, cap, tag=f"{name}, cap {cap}"
                        )
                for start in starters.values():  # warm up
                    await start()
                for key in interleaved(list(starters), rounds):
                    gc.collect()
                    wall = time.perf_counter()
                    await starters[key]()
                    results.setdefault(key, []).append(time.perf_counter() - wall)
    return results


def _fast_folder() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def saver_ratio(results: dict[SaverLoad, list[float]], key: SaverLoad) -> float:
    """A contender's wall time over the minimal loop's on the same saver and cap (median
    of the rounds' ratios)."""
    minimal = results[SaverLoad(key.saver, key.cap, MINIMAL)]
    return statistics.median(a / b for a, b in zip(results[key], minimal, strict=True))


def savers_table(results: dict[SaverLoad, list[float]], loops: int) -> str:
    """Benchmark 2's table on checkpointers."""
    rows = [
        [
            key.saver,
            f"{loops}, {'all at once' if key.cap is None else f'{key.cap} at a time'}",
            key.loop,
            f"{statistics.median(walls) * 1e3:,.0f} ms",
            f"{saver_ratio(results, key):.2f}x",
        ]
        for key, walls in results.items()
    ]
    return table(["saver", "loops", "loop", "wall", "wall vs minimal"], rows)
