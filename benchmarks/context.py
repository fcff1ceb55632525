"""Benchmark 3: how much the agent is sent over 6 iterations, per history policy.

A tokenizer-free measure: the characters of the messages' text sent on every agent call
(a provider's token count is roughly proportional). The evaluator never accepts, so every
loop makes exactly 6 attempts. Two shapes of loop:

- ``long answers``: a 400-character request, 1,500-character answers (a draft, a piece of
  code) and 300-character feedback;
- ``Song-lyrics demo``: the sizes of the seed demo, its 364-character prompt, a short
  poem of about 80 characters and a 260-character review.

With request R and an attempt plus its feedback A, over 6 iterations ``"full"`` sends
6R + 15A and ``"last_attempt"`` 6R + 5A: between a third of ``"full"`` (answers
dominate) and all of it (the request dominates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage

from benchmarks.contenders import FakeChat
from benchmarks.measure import table
from loop_agents import HistoryPolicy, LoopContext, LoopEvaluation, LoopHistory, create_loop_agent

ITERATIONS = 6


@dataclass(frozen=True)
class Shape:
    """The sizes of one kind of loop, in characters."""

    name: str
    request: int
    answer: int
    feedback: int


SHAPES = (
    Shape("long answers", request=400, answer=1500, feedback=300),
    Shape("Song-lyrics demo", request=364, answer=80, feedback=260),
)


def last_two_attempts(history: LoopHistory) -> Sequence[BaseMessage]:
    """A user-defined policy: the request and the two latest attempts with their feedback."""
    recent = history["attempts"][-2:]
    attempts = [m for a in recent for m in (*a["messages"], a["feedback"])]
    return [*history["request"], *attempts, *history["pending"]]


POLICIES: dict[str, HistoryPolicy] = {
    "full": "full",
    "last_attempt": "last_attempt",
    "feedback_log": "feedback_log",
    "function: last two attempts": last_two_attempts,
}


def sent_per_iteration(shape: Shape, history: HistoryPolicy) -> list[int]:
    """Run one loop of `ITERATIONS` attempts; return the characters sent on each call."""
    model = FakeChat(answer_chars=shape.answer, record=True)

    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {
            "stop": False,
            "feedback": f"Review {context['iteration']}: ".ljust(shape.feedback, "y"),
        }

    loop = create_loop_agent(model, evaluate, ITERATIONS, history=history)
    loop.invoke({"messages": [HumanMessage("Request: ".ljust(shape.request, "z"))]})
    return list(model.sent_chars)


@dataclass
class Economy:
    """Characters sent per iteration, per policy, for one shape."""

    shape: Shape
    sent: dict[str, list[int]]

    def share_of_full(self, policy: str) -> float:
        return sum(self.sent[policy]) / sum(self.sent["full"])


def measure() -> list[Economy]:
    """Every policy on every shape (deterministic: no timing involved)."""
    return [
        Economy(shape, {name: sent_per_iteration(shape, p) for name, p in POLICIES.items()})
        for shape in SHAPES
    ]


def context_table(results: list[Economy]) -> str:
    """Benchmark 3's table: characters sent at each iteration, total, share of full."""
    rows = []
    for result in results:
        for policy, sent in result.sent.items():
            rows.append(
                [
                    result.shape.name,
                    policy,
                    *[f"{chars:,}" for chars in sent],
                    f"{sum(sent):,}",
                    f"{result.share_of_full(policy):.0%}",
                ]
            )
    header = [
        "loop",
        "history",
        *[f"it. {i}" for i in range(1, ITERATIONS + 1)],
        "total",
        "of full",
    ]
    return table(header, rows)
