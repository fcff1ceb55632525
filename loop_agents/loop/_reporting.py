"""What the loop's nodes report while they run: loop events and named, tagged calls.

`LoopReporter` writes the `loop_agents.loop.events` to LangGraph's ``custom`` stream and
wraps the agent and evaluator calls into runs named and tagged by `loop_agents.loop.tracing`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer

from loop_agents.loop.events import LoopEvent
from loop_agents.loop.state import AgentRun, IterationRecord, StopReason
from loop_agents.loop.tracing import LoopRole, iteration_config
from loop_agents.runtime._function_runnable import FunctionRunnable

In = TypeVar("In")
Out = TypeVar("Out")


def write_event(event: LoopEvent) -> None:
    """Write ``event`` to the ``custom`` stream of the graph run (outside one, nothing)."""
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError):
        return
    writer(event)


class LoopReporter:
    """Reports one loop's progress: events on the custom stream, names on its calls."""

    def __init__(self, loop: str, max_iterations: int) -> None:
        self.loop = loop
        self.max_iterations = max_iterations

    @staticmethod
    def traced(
        role: LoopRole,
        func: Callable[[In, RunnableConfig], Out],
        afunc: Callable[[In, RunnableConfig], Awaitable[Out]],
    ) -> FunctionRunnable[In, Out]:
        """A runnable that calls ``func``/``afunc`` as a run of its own (named by `config`)."""
        return FunctionRunnable(func, afunc, name=role)

    def config(self, config: RunnableConfig, iteration: int, role: LoopRole) -> RunnableConfig:
        """The config of the ``role`` call of ``iteration`` (see `iteration_config`)."""
        return iteration_config(config, loop=self.loop, iteration=iteration, role=role)

    def _write(self, kind: str, iteration: int, candidate: int | None, **fields: Any) -> None:
        event = {"type": kind, "loop": self.loop, "iteration": iteration, **fields}
        if candidate is not None:
            event["candidate"] = candidate
        write_event(cast(LoopEvent, event))

    def iteration_started(self, iteration: int) -> None:
        """Report that ``iteration`` starts (`IterationStarted`)."""
        self._write("iteration_started", iteration, None, max_iterations=self.max_iterations)

    def agent_finished(
        self, iteration: int, answer: AIMessage, run: AgentRun, *, candidate: int | None = None
    ) -> None:
        """Report the agent's answer in ``iteration`` and what it cost (`AgentFinished`)."""
        self._write(
            "agent_finished",
            iteration,
            candidate,
            answer=answer.text,
            seconds=run["seconds"],
            input_tokens=run["input_tokens"],
            output_tokens=run["output_tokens"],
        )

    def agent_failed(self, iteration: int, error: str, *, candidate: int | None = None) -> None:
        """Report that the agent call of ``iteration`` failed (`AgentFailed`)."""
        self._write("agent_failed", iteration, candidate, error=error)

    def candidates_judged(self, record: IterationRecord) -> None:
        """Report every candidate's verdict of the iteration in ``record`` (`CandidatesJudged`)."""
        candidates = [
            {
                "candidate": c["candidate"],
                "stop": c["stop"],
                "score": c["score"],
                "error": c["error"],
            }
            for c in record.get("candidates", [])
        ]
        selected = record.get("candidate", 1)
        self._write(
            "candidates_judged", record["iteration"], None, candidates=candidates, selected=selected
        )

    def evaluation_finished(self, record: IterationRecord) -> None:
        """Report the evaluation recorded in ``record`` (`EvaluationFinished`)."""
        optional: dict[str, Any] = {}
        if "error" in record:
            optional["error"] = record["error"]
        if "strategy" in record:
            optional["strategy"] = dict(record["strategy"])
        self._write(
            "evaluation_finished",
            record["iteration"],
            None,
            stop=record["stop"],
            score=record["score"],
            feedback=record["feedback"],
            evaluator=record["evaluator"],
            decided_by=list(record["decided_by"]),
            seconds=record["evaluation_seconds"],
            input_tokens=record["evaluator_input_tokens"],
            output_tokens=record["evaluator_output_tokens"],
            requests=record.get("requests", 0),
            cost=record.get("cost"),
            **optional,
        )

    def loop_finished(
        self,
        reason: StopReason,
        records: Sequence[IterationRecord],
        selected: int | None,
        answer: AIMessage | None,
    ) -> None:
        """Report that the loop ends for ``reason``; ``answer`` is iteration ``selected``'s."""
        scored = [r for r in records if r["score"] is not None]  # max: the later one on a tie
        best = max(reversed(scored), key=lambda r: r["score"] or 0.0) if scored else None
        event = {
            "type": "loop_finished",
            "loop": self.loop,
            "stop_reason": reason,
            "iterations": max(r["iteration"] for r in records),
            "best_score": best["score"] if best is not None else None,
            "best_iteration": best["iteration"] if best is not None else None,
            "selected_iteration": selected,
            "answer": answer.text if answer is not None else "",
        }
        write_event(cast(LoopEvent, event))
