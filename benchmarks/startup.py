"""Benchmark 5: how long the ``loop-agents`` command takes to start.

Wall time of a fresh process (median of interleaved rounds) for ``--help``,
``--version`` and ``run --help``, against two baselines measured in the same run:
an empty Python start (the floor) and importing what a run needs (langgraph, langchain,
langchain-openai: what ``--help`` would cost if it loaded them).

``python -m benchmarks.startup`` prints the table alone.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks.measure import table

TARGET_SECONDS = 0.5
"""``--help`` and ``--version`` must answer within this (issue 13)."""

COMMANDS: dict[str, list[str]] = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "import langgraph, langchain, langchain_openai": [
        sys.executable,
        "-c",
        "import langgraph.graph, langchain.agents, langchain_openai",
    ],
    "loop-agents --help": [sys.executable, "-m", "loop_agents.cli", "--help"],
    "loop-agents --version": [sys.executable, "-m", "loop_agents.cli", "--version"],
    "loop-agents run --help": [sys.executable, "-m", "loop_agents.cli", "run", "--help"],
}
COMMAND_ROWS = ("loop-agents --help", "loop-agents --version", "loop-agents run --help")


@dataclass(frozen=True)
class Startup:
    """Median and best wall seconds of each command."""

    median: dict[str, float]
    best: dict[str, float]

    def met(self) -> bool:
        """Whether every command row starts within `TARGET_SECONDS` (median)."""
        return all(self.median[name] <= TARGET_SECONDS for name in COMMAND_ROWS)


def measure(rounds: int = 7) -> Startup:
    """Start each command ``rounds`` times (interleaved, after one warm-up each)."""
    names = list(COMMANDS)
    walls: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm up the file cache
        subprocess.run(COMMANDS[name], capture_output=True, check=True)
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            subprocess.run(COMMANDS[name], capture_output=True, check=True)
            walls[name].append(time.perf_counter() - started)
    return Startup(
        {name: statistics.median(w) for name, w in walls.items()},
        {name: min(w) for name, w in walls.items()},
    )


def startup_table(result: Startup) -> str:
    """A Markdown table: each command's median and best start, and vs the floor."""
    floor = result.median["python -c pass (floor)"]
    rows = [
        (
            name,
            f"{result.median[name] * 1e3:.0f} ms",
            f"{result.best[name] * 1e3:.0f} ms",
            f"+{(result.median[name] - floor) * 1e3:.0f} ms",
            f"<= {TARGET_SECONDS * 1e3:.0f} ms" if name in COMMAND_ROWS else "",
        )
        for name in COMMANDS
    ]
    return table(("command", "median", "best", "over the floor", "target"), rows)


def main() -> None:
    result = measure()
    print(startup_table(result))
    verdict = "met" if result.met() else "missed"
    print(f"\n--help/--version within {TARGET_SECONDS:g} s: {verdict}")


if __name__ == "__main__":
    main()
