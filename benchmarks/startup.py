"""Benchmark 5: how long the ``loop-agents`` command takes to start.

Wall time of a fresh process (median of interleaved rounds) for ``--help``,
``--version``, ``run --help`` and three argument errors (``run x`` without a rubric,
``--threshold 150``, ``show`` of an id that is not saved: each must be reported as fast
as ``--help``), against two baselines measured in the same run:
an empty Python start (the floor) and importing what a run needs (langgraph, langchain,
langchain-openai: what ``--help`` would cost if it loaded them).

``python -m benchmarks.startup`` prints the table alone.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
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
    "loop-agents --help": [sys.executable, "-m", "loop_agents_cli", "--help"],
    "loop-agents --version": [sys.executable, "-m", "loop_agents_cli", "--version"],
    "loop-agents run --help": [sys.executable, "-m", "loop_agents_cli", "run", "--help"],
    "loop-agents run x (no rubric: exit 2)": [sys.executable, "-m", "loop_agents_cli", "run", "x"],
    "loop-agents run x --rubric r --threshold 150 (exit 2)": [
        sys.executable, "-m", "loop_agents_cli", "run", "x", "--rubric", "r", "--threshold", "150",
    ],
    "loop-agents show abcdef12 (not saved: exit 2)": [
        sys.executable, "-m", "loop_agents_cli", "show", "abcdef12",
    ],
}  # fmt: skip
COMMAND_ROWS = tuple(name for name in COMMANDS if name.startswith("loop-agents"))
ARGUMENT_ERRORS = tuple(name for name in COMMAND_ROWS if "(" in name)
"""The rows that must exit 2 (a bad argument), not 0."""


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
    with tempfile.TemporaryDirectory() as home:  # no saved runs, no developer's settings
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LOOP_"))}
        env |= {"LOOP_AGENTS_HOME": home, "LOOP_AGENTS_OLLAMA_URL": "off"}

        def start(name: str) -> None:
            done = subprocess.run(COMMANDS[name], capture_output=True, env=env, check=False)
            expected = 2 if name in ARGUMENT_ERRORS else 0
            if done.returncode != expected:
                raise RuntimeError(f"{name}: exit status {done.returncode}: {done.stderr!r:.300}")

        for name in names:  # warm up the file cache
            start(name)
        for number in range(rounds):
            shift = number % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                start(name)
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
    print(f"\n--help, --version and argument errors within {TARGET_SECONDS:g} s: {verdict}")


if __name__ == "__main__":
    main()
