"""Where a loop's time goes: cProfile of a loop next to its baseline, and instruction counts.

``python -m benchmarks.hotspots [overhead|middleware] [ITERATIONS]`` profiles, with the
instant fake model, `create_loop_agent` (the default repair loop) next to the minimal
LangGraph loop (``overhead``, the default) or ``LoopMiddleware`` next to the 15-line
``after_agent`` hook (``middleware``), and prints, per package (per module of ours), the
own CPU time per iteration of each (profiler overhead included, so compare the columns,
not the absolute numbers), then the functions of ours that cost the most.

``python -m benchmarks.hotspots count overhead|middleware CONTENDER ITERATIONS RUNS`` runs
one contender of benchmark 1 or 8 (its name in the table) twice to warm up, then ``RUNS``
times; under ``valgrind --tool=callgrind --instr-atstart=no`` only those runs are counted
(it switches the instrumentation on with ``callgrind_control``), so the instructions per
iteration are the reported total over ``ITERATIONS * RUNS``. Instruction counts do not
move with the machine's load::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \
        python -m benchmarks.hotspots count overhead "create_loop_agent" 5 10
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

from benchmarks import middleware, overhead


async def _profile(run: Callable[[], Awaitable[object]], repeats: int) -> pstats.Stats:
    await run()
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(repeats):
        await run()
    profiler.disable()
    return pstats.Stats(profiler)


def _where(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    if "/loop_agents/" in filename:
        return "loop_agents/" + filename.split("/loop_agents/")[1]
    return "python: " + filename.rsplit("/", 1)[-1]


def by_package(stats: pstats.Stats) -> defaultdict[str, float]:
    """Own time (seconds) per package, or per module of ours."""
    totals: defaultdict[str, float] = defaultdict(float)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, own, _, _) in raw.items():
        totals[_where(filename)] += own
    return totals


async def main(which: str = "overhead", iterations: int = 50, repeats: int = 10) -> None:
    if which == "middleware":
        runs = middleware.contenders(iterations)
        ours_name, base_name = middleware.INSIDE, middleware.HOOK
    else:
        runs = overhead.contenders(iterations)
        ours_name, base_name = overhead.OURS, overhead.MINIMAL
    ours = await _profile(runs[ours_name], repeats)
    base = await _profile(runs[base_name], repeats)
    a, b = by_package(ours), by_package(base)
    per_iteration = 1e6 / (iterations * repeats)
    print(f"own CPU time per iteration, µs (profiled; {iterations} iterations x {repeats})")
    print(f"{'where':44} {ours_name[:30]:>30} {base_name[:30]:>30}")
    for key in sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))[:25]:
        print(f"{key:44} {a[key] * per_iteration:30.1f} {b[key] * per_iteration:30.1f}")
    print(f"{'total':44} {sum(a.values()) * per_iteration:30.1f} ", end="")
    print(f"{sum(b.values()) * per_iteration:30.1f}\n")
    ours.sort_stats("tottime").print_stats(r"loop_agents", 15)


async def count(benchmark: str, name: str, iterations: int, runs: int) -> None:
    """Run one contender ``runs`` times, counted by callgrind when it runs under it."""
    if benchmark == "middleware":
        run = middleware.contenders(iterations)[name]
    else:
        run = overhead.contenders(iterations, with_history_policy=True)[name]
    await run()
    await run()
    _callgrind("on")
    for _ in range(runs):
        await run()
    _callgrind("off")


def _callgrind(switch: str) -> None:
    # under valgrind, switch its instrumentation (started off) for this process
    if "valgrind" in os.environ.get("LD_PRELOAD", "") or os.environ.get("VALGRIND_LIB"):
        command = ["callgrind_control", "-i", switch, str(os.getpid())]
        subprocess.run(command, check=True, capture_output=True)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments and arguments[0] == "count":
        benchmark, name, iterations, runs = arguments[1:5]
        asyncio.run(count(benchmark, name, int(iterations), int(runs)))
        sys.exit(0)
    kind = arguments.pop(0) if arguments and not arguments[0].isdigit() else "overhead"
    asyncio.run(main(kind, int(arguments[0]) if arguments else 50))
