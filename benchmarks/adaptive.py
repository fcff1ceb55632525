"""What the default `Adaptive` costs and gains on noisy scripted models (effectiveness).

Each model answers a retry right with a fixed chance that depends only on the kind of retry
it was sent (read from the request, as `tests/test_eval_adaptive.py` does): a repair (an
earlier answer in view), an informed fresh sample (the points that must hold) or a fresh
sample (the task alone again). Every first answer is wrong, so each task's outcome is
decided by its two retries (K = 3). Two models:

- ``noisy feedback``: repair 0.5, fresh 0.2, informed 0.3 (repairing pays);
- ``noisy anchoring``: repair 0.1, fresh 0.5, informed 0.3 (sampling again pays).

The eval runs ``single``, ``loop`` (every retry a repair), ``resample`` and ``adaptive`` on
the same tasks; a seeded random generator per model makes a run reproducible. What the
table shows is the price of learning: how far ``adaptive`` stays below the better fixed
arm, and how far above the worse. ``python -m benchmarks.adaptive [--tasks N] [--seeds
1,2,3]``; the figures are in BENCHMARKS.md ("Learning which retry pays").
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loop_agents.controls.restart import REQUIREMENTS_HEADER
from loop_agents_evals import EvalSettings, arun_eval
from tests.eval_models import ReactiveOpenAI, ok_tasks

ARMS = ("single", "loop", "resample", "adaptive")
MODELS: dict[str, tuple[float, float, float]] = {
    "noisy feedback": (0.5, 0.2, 0.3),
    "noisy anchoring": (0.1, 0.5, 0.3),
}
"""Model name -> the chance that a repair, a fresh sample and an informed one is right."""


def noisy_model(chances: tuple[float, float, float], seed: int) -> Callable[[dict[str, Any]], str]:
    """A responder right ('OK') with the chance of the kind of retry it was sent."""
    repair, fresh, informed = chances
    rng = random.Random(seed)
    asked: Counter[str] = Counter()

    def respond(body: dict[str, Any]) -> str:
        messages = body["messages"]
        if any(m["role"] == "assistant" for m in messages):
            chance = repair
        elif any(REQUIREMENTS_HEADER in str(m["content"]) for m in messages):
            chance = informed
        else:
            asked[messages[1]["content"]] += 1
            chance = 0.0 if asked[messages[1]["content"]] == 1 else fresh
        return "OK" if rng.random() < chance else "ok"

    return respond


@dataclass(frozen=True)
class Row:
    """One eval of one model: tasks passed per arm, and the kinds ``adaptive`` chose."""

    model: str
    seed: int
    tasks: int
    passed: dict[str, int]
    chosen: dict[str, int]

    @property
    def best_fixed(self) -> int:
        """The better of ``loop`` and ``resample``."""
        return max(self.passed["loop"], self.passed["resample"])

    @property
    def worst_fixed(self) -> int:
        """The worse of ``loop`` and ``resample``."""
        return min(self.passed["loop"], self.passed["resample"])


async def measure(count: int = 200, seeds: Sequence[int] = (1, 2, 3)) -> list[Row]:
    """One eval per model and seed, ``count`` tasks each."""
    rows = []
    for seed in seeds:
        for name, chances in MODELS.items():
            server = ReactiveOpenAI(noisy_model(chances, seed))
            report = await arun_eval(
                ok_tasks(count),
                server.chat_model(),
                settings=EvalSettings(same_first_answer=True),
                arms=list(ARMS),
                iterations=3,
                concurrency=1,
            )
            kinds = report.retry_kinds["adaptive"]
            rows.append(
                Row(
                    name,
                    seed,
                    count,
                    {arm: report.arms[arm].passed for arm in ARMS},
                    dict(kinds.chosen),
                )
            )
    return rows


def adaptive_table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| model | seed | tasks | single | loop | resample | adaptive | adaptive / better fixed "
        "| adaptive's retries (repair/fresh/informed) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        passed = row.passed
        kinds = "/".join(str(row.chosen.get(k, 0)) for k in ("repair", "fresh", "informed"))
        lines.append(
            f"| {row.model} | {row.seed} | {row.tasks} | {passed['single']} | {passed['loop']} "
            f"| {passed['resample']} | {passed['adaptive']} "
            f"| {passed['adaptive'] / row.best_fixed:.2f} | {kinds} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adaptive", description=__doc__)
    parser.add_argument("--tasks", type=int, default=200, help="tasks per eval (default 200)")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(adaptive_table(asyncio.run(measure(args.tasks, seeds))))


if __name__ == "__main__":
    main()
