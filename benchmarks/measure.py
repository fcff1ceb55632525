"""Measuring on a shared machine: interleaved rounds, medians, paired ratios, tables."""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version


@dataclass
class Samples:
    """CPU and wall seconds of repeated runs of one contender."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    def median_wall(self) -> float:
        return statistics.median(self.wall)


async def interleaved(
    contenders: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, Samples]:
    """Run every contender once per round, in a rotating order; time each run.

    CPU time (``time.process_time``, all threads of this process) is the primary
    measure: other processes on the machine slow the wall clock but not our CPU time.
    """
    samples = {name: Samples() for name in contenders}
    names = list(contenders)
    for contender in contenders.values():  # warm up: imports, caches, compiled graphs
        await contender()
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            await contenders[name]()
            samples[name].cpu.append(time.process_time() - cpu)
            samples[name].wall.append(time.perf_counter() - wall)
    return samples


def paired_ratio(samples: dict[str, Samples], name: str, baseline: str) -> float:
    """The median over rounds of ``name``'s CPU time divided by ``baseline``'s."""
    return statistics.median(
        a / b for a, b in zip(samples[name].cpu, samples[baseline].cpu, strict=True)
    )


class LagTicker:
    """A task that wakes every ``interval`` seconds and records how late it woke.

    A late wake-up means the event loop was busy: either blocked by a call that does not
    yield, or saturated by many ready tasks.
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            expected = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - expected))

    def __enter__(self) -> LagTicker:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def max_lag(self) -> float:
        return max(self.lags, default=0.0)


def machine() -> list[str]:
    """Lines describing the machine and the software versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    packages = ", ".join(
        f"{name} {version(name)}" for name in ("langgraph", "langchain-core", "langchain")
    )
    return [
        f"- CPU: {cpu}, {os.cpu_count()} logical cores",
        f"- OS: {platform.platform()}",
        f"- Python {platform.python_version()}; {packages}",
        f"- load average when the run started (1, 5, 15 min): {load}",
    ]


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (numbers right-aligned)."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    numeric = [all(_is_number(row[i]) for row in cells[1:]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        parts = [
            c.rjust(w) if numeric[i] else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join(
        ("-" * (w + 1) + ":") if numeric[i] else ("-" * (w + 2)) for i, w in enumerate(widths)
    )
    return "\n".join([line(cells[0]), rule + "|", *[line(row) for row in cells[1:]]])


def _is_number(text: str) -> bool:
    cleaned = text.replace(",", "").replace("x", "").replace("%", "").replace(" ", "")
    cleaned = cleaned.replace("µs", "").replace("ms", "").replace("MiB", "").lstrip("+-")
    return cleaned.replace(".", "", 1).isdigit()
