"""Benchmarks 1 and 4: framework overhead per iteration, and how it grows with iterations.

Every contender runs the same loop with a chat model that answers at once and an async
evaluator that accepts the last allowed answer, so what is measured is the loop itself:
LangGraph's steps, the package's nodes, the model's callback machinery (common to all).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from langchain_core.messages import AnyMessage, HumanMessage

from benchmarks.contenders import (
    FakeChat,
    accept_at,
    minimal_langgraph_loop,
    plain_async_loop,
)
from benchmarks.measure import Samples, interleaved, paired_ratio, table
from loop_agents import create_loop_agent
from loop_agents.controls import Adaptive, History

OURS = "create_loop_agent"
MINIMAL = "minimal LangGraph loop"
PLAIN = "plain async loop"
OURS_LAST = 'create_loop_agent, History("last_attempt")'
OURS_ADAPTIVE = "create_loop_agent, Adaptive()"
"""The loop that learns which kind of retry pays (an opt-in control; the default repairs,
as the minimal loop does)."""


def contenders(
    iterations: int, *, with_history_policy: bool = False
) -> dict[str, Callable[[], Awaitable[object]]]:
    """One ``ainvoke`` of each loop, ``iterations`` iterations long."""
    model = FakeChat()
    evaluator = accept_at(iterations)
    ours = create_loop_agent(model, evaluator, iterations)
    minimal = minimal_langgraph_loop(model, evaluator, iterations)

    def request() -> list[AnyMessage]:
        return [HumanMessage("Write a haiku about rain.")]

    runs: dict[str, Callable[[], Awaitable[object]]] = {
        OURS: lambda: ours.ainvoke({"messages": request()}),
        MINIMAL: lambda: minimal.ainvoke({"messages": request()}),
        PLAIN: lambda: plain_async_loop(model, evaluator, iterations, request()),
    }
    if with_history_policy:
        last = create_loop_agent(model, evaluator, iterations, controls=[History("last_attempt")])
        runs[OURS_LAST] = lambda: last.ainvoke({"messages": request()})
        adaptive = create_loop_agent(model, evaluator, iterations, controls=[Adaptive(seed=0)])
        runs[OURS_ADAPTIVE] = lambda: adaptive.ainvoke({"messages": request()})
    return runs


@dataclass
class Overhead:
    """Per-iteration times of every contender at one loop length."""

    iterations: int
    samples: dict[str, Samples]
    ratio: float  # create_loop_agent / minimal LangGraph loop, CPU, median of paired rounds
    adaptive_ratio: float | None = None  # the same for the Adaptive() loop, when measured

    def best_ratio(self, name: str) -> float:
        """``name``'s fastest run over the minimal loop's fastest (contention only adds)."""
        return min(self.samples[name].cpu) / min(self.samples[MINIMAL].cpu)

    def per_iteration_us(self, name: str) -> float:
        return self.samples[name].median_cpu() / self.iterations * 1e6

    def wall_per_iteration_us(self, name: str) -> float:
        return self.samples[name].median_wall() / self.iterations * 1e6


async def measure(iterations: int, rounds: int, *, with_history_policy: bool = False) -> Overhead:
    """Time every contender over ``rounds`` interleaved rounds."""
    samples = await interleaved(
        contenders(iterations, with_history_policy=with_history_policy), rounds
    )
    adaptive = paired_ratio(samples, OURS_ADAPTIVE, MINIMAL) if OURS_ADAPTIVE in samples else None
    return Overhead(iterations, samples, paired_ratio(samples, OURS, MINIMAL), adaptive)


def overhead_table(results: list[Overhead]) -> str:
    """Benchmark 1's table: per-iteration CPU and wall time, ratio to the minimal loop."""
    rows = []
    for result in results:
        for name in result.samples:
            paired = {OURS: result.ratio, OURS_ADAPTIVE: result.adaptive_ratio}.get(name)
            ratio = (
                paired
                if paired is not None
                else result.samples[name].median_cpu() / result.samples[MINIMAL].median_cpu()
            )
            rows.append(
                [
                    result.iterations,
                    name,
                    f"{result.per_iteration_us(name):,.0f} µs",
                    f"{result.wall_per_iteration_us(name):,.0f} µs",
                    f"{ratio:.2f}x",
                    f"{result.best_ratio(name):.2f}x",
                    len(result.samples[name].cpu),
                ]
            )
    return table(
        [
            "iterations",
            "loop",
            "CPU / iteration",
            "wall / iteration",
            "vs minimal",
            "best vs best",
            "runs",
        ],
        rows,
    )


def scaling_table(results: list[Overhead]) -> str:
    """Benchmark 4's table: per-iteration CPU time by loop length, and its growth."""
    names = list(results[0].samples)
    first = results[0]
    rows = []
    for name in names:
        row: list[object] = [name]
        row += [f"{r.per_iteration_us(name):,.0f} µs" for r in results]
        growth = results[-1].per_iteration_us(name) / first.per_iteration_us(name)
        row.append(f"{growth:.2f}x")
        rows.append(row)
    ratio_row: list[object] = ["create_loop_agent / minimal"]
    ratio_row += [f"{r.ratio:.2f}x" for r in results]
    ratio_row.append("")
    rows.append(ratio_row)
    header = [
        "loop",
        *[f"{r.iterations} iterations" for r in results],
        f"growth {first.iterations} -> {results[-1].iterations}",
    ]
    return table(header, rows)
