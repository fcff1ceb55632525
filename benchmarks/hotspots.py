"""Where a loop's time goes: cProfile of create_loop_agent next to the minimal loop.

``python -m benchmarks.hotspots [ITERATIONS]`` profiles both loops with the instant fake
model and prints, per package, the CPU time per iteration (profiler overhead included,
so compare the columns, not the absolute numbers), then the functions of ours that cost
the most.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable

from benchmarks.overhead import MINIMAL, OURS, contenders


async def _profile(run: Callable[[], Awaitable[object]], repeats: int) -> pstats.Stats:
    await run()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeats):
        await run()
    profiler.disable()
    return pstats.Stats(profiler)


def _where(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    if "/loop_agents/" in filename:
        return "loop_agents/" + filename.rsplit("/", 1)[1]
    return "python: " + filename.rsplit("/", 1)[-1]


def by_package(stats: pstats.Stats) -> defaultdict[str, float]:
    """Own time (seconds) per package, or per module of ours."""
    totals: defaultdict[str, float] = defaultdict(float)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, own, _, _) in raw.items():
        totals[_where(filename)] += own
    return totals


async def main(iterations: int = 50, repeats: int = 10) -> None:
    runs = contenders(iterations)
    ours = await _profile(runs[OURS], repeats)
    minimal = await _profile(runs[MINIMAL], repeats)
    a, b = by_package(ours), by_package(minimal)
    per_iteration = 1e6 / (iterations * repeats)
    print(f"own CPU time per iteration, µs (profiled; {iterations} iterations x {repeats})")
    print(f"{'where':40} {OURS:>18} {MINIMAL:>24}")
    for key in sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))[:20]:
        print(f"{key:40} {a[key] * per_iteration:18.1f} {b[key] * per_iteration:24.1f}")
    print(f"{'total':40} {sum(a.values()) * per_iteration:18.1f} ", end="")
    print(f"{sum(b.values()) * per_iteration:24.1f}\n")
    ours.sort_stats("tottime").print_stats(r"loop_agents", 15)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
