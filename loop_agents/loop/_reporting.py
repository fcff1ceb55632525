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
    """Write ``event`` to the ``custom`` stream of the graph run this is called from.

    Outside a graph run (a node function called directly) nothing is written.
    """
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

    def iteration_started(self, iteration: int) -> None:
        """Report that ``iteration`` starts (`IterationStarted`)."""
        event: dict[str, Any] = {
            "type": "iteration_started",
            "loop": self.loop,
            "iteration": iteration,
        }
        event["max_iterations"] = self.max_iterations
        write_event(cast(LoopEvent, event))

    def agent_finished(
        self, iteration: int, answer: AIMessage, run: AgentRun, *, candidate: int | None = None
    ) -> None:
        """Report the agent's answer in ``iteration`` and what it cost (`AgentFinished`)."""
        event: dict[str, Any] = {
            "type": "agent_finished",
            "loop": self.loop,
            "iteration": iteration,
        }
        event["answer"] = answer.text
        event["seconds"] = run["seconds"]
        event["input_tokens"] = run["input_tokens"]
        event["output_tokens"] = run["output_tokens"]
        if candidate is not None:
            event["candidate"] = candidate
        write_event(cast(LoopEvent, event))

    def agent_failed(self, iteration: int, error: str, *, candidate: int | None = None) -> None:
        """Report that the agent call of ``iteration`` failed (`AgentFailed`)."""
        event: dict[str, Any] = {"type": "agent_failed", "loop": self.loop, "iteration": iteration}
        event["error"] = error
        if candidate is not None:
            event["candidate"] = candidate
        write_event(cast(LoopEvent, event))

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
        event: dict[str, Any] = {
            "type": "candidates_judged",
            "loop": self.loop,
            "iteration": record["iteration"],
        }
        event["candidates"] = candidates
        event["selected"] = record.get("candidate", 1)
        write_event(cast(LoopEvent, event))

    def evaluation_finished(self, record: IterationRecord) -> None:
        """Report the evaluation recorded in ``record`` (`EvaluationFinished`)."""
        event: dict[str, Any] = {
            "type": "evaluation_finished",
            "loop": self.loop,
            "iteration": record["iteration"],
        }
        event["stop"] = record["stop"]
        event["score"] = record["score"]
        event["feedback"] = record["feedback"]
        event["evaluator"] = record["evaluator"]
        event["decided_by"] = list(record["decided_by"])
        event["seconds"] = record["evaluation_seconds"]
        event["input_tokens"] = record["evaluator_input_tokens"]
        event["output_tokens"] = record["evaluator_output_tokens"]
        event["requests"] = record.get("requests", 0)
        event["cost"] = record.get("cost")
        if "error" in record:
            event["error"] = record["error"]
        if "strategy" in record:
            event["strategy"] = dict(record["strategy"])
        write_event(cast(LoopEvent, event))

    def loop_finished(
        self,
        reason: StopReason,
        records: Sequence[IterationRecord],
        selected: int | None,
        answer: AIMessage | None,
    ) -> None:
        """Report that the loop ends for ``reason``; ``answer`` is iteration ``selected``'s."""
        best: tuple[float | None, int | None] = (None, None)  # the later one on a tie
        for record in records:
            score = record["score"]
            if score is not None and (best[0] is None or score >= best[0]):
                best = (score, record["iteration"])
        event = {
            "type": "loop_finished",
            "loop": self.loop,
            "stop_reason": reason,
            "iterations": max(r["iteration"] for r in records),
            "best_score": best[0],
            "best_iteration": best[1],
            "selected_iteration": selected,
            "answer": answer.text if answer is not None else "",
        }
        write_event(cast(LoopEvent, event))
