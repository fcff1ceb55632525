"""Where a loop's time goes: cProfile of a loop next to its baseline.

``python -m benchmarks.hotspots [overhead|middleware] [ITERATIONS]`` profiles, with the
instant fake model, `create_loop_agent` with ``controls=[Repair()]`` next to the minimal
LangGraph loop (``overhead``, the default) or ``LoopMiddleware`` next to the 15-line
``after_agent`` hook (``middleware``), and prints, per package (per module of ours), the
own CPU time per iteration of each (profiler overhead included, so compare the columns,
not the absolute numbers), then the functions of ours that cost the most.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
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
        runs = overhead.contenders(iterations, with_history_policy=True)
        ours_name, base_name = overhead.OURS_REPAIR, overhead.MINIMAL
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


if __name__ == "__main__":
    arguments = sys.argv[1:]
    kind = arguments.pop(0) if arguments and not arguments[0].isdigit() else "overhead"
    asyncio.run(main(kind, int(arguments[0]) if arguments else 50))
