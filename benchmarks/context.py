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
dominate) and all of it (the request dominates). The feedback is sent fenced (the
default ``feedback_format``), about 290 characters more than its text.

``compacting`` runs with a character budget (its token counter counts characters, so
the budget is in the same unit as the table) and a fake summarizer whose summaries are
`SUMMARY_CHARS` characters; the characters it is sent are reported separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage

from benchmarks.contenders import FakeChat, message_chars
from benchmarks.measure import table
from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.loop.history.compaction import compacting
from loop_agents.loop.history.policies import HistoryPolicy, LoopHistory

ITERATIONS = 6


@dataclass(frozen=True)
class Shape:
    """The sizes of one kind of loop, in characters."""

    name: str
    request: int
    answer: int
    feedback: int
    budget: int  # compacting's max_tokens (characters here)


SHAPES = (
    Shape("long answers", request=400, answer=1500, feedback=300, budget=4_000),
    Shape("Song-lyrics demo", request=364, answer=80, feedback=260, budget=1_500),
)

SUMMARY_CHARS = 150
"""The length of the fake summarizer's summaries."""

COMPACTING = "compacting"
"""The name of the compacting row; its budget is the shape's."""


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
    COMPACTING: "full",  # replaced by compacting(...) with the shape's budget
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
    summarizer_calls: int = 0
    summarizer_chars: int = 0

    def share_of_full(self, policy: str) -> float:
        return sum(self.sent[policy]) / sum(self.sent["full"])


def _compacted(shape: Shape) -> tuple[list[int], FakeChat]:
    summarizer = FakeChat(answer_chars=SUMMARY_CHARS, record=True)
    policy = compacting(
        summarizer, max_tokens=shape.budget, token_counter=lambda m: message_chars(list(m))
    )
    return sent_per_iteration(shape, policy), summarizer


def measure() -> list[Economy]:
    """Every policy on every shape (deterministic: no timing involved)."""
    economies = []
    for shape in SHAPES:
        sent = {
            name: sent_per_iteration(shape, p) for name, p in POLICIES.items() if name != COMPACTING
        }
        sent[COMPACTING], summarizer = _compacted(shape)
        economies.append(
            Economy(shape, sent, len(summarizer.sent_chars), sum(summarizer.sent_chars))
        )
    return economies


def context_table(results: list[Economy]) -> str:
    """Benchmark 3's table: characters sent at each iteration, total, share of full."""
    rows = []
    for result in results:
        for policy, sent in result.sent.items():
            name = policy
            summarizer = ""
            if policy == COMPACTING:
                name = f"compacting(max_tokens={result.shape.budget:,})"
                summarizer = f"{result.summarizer_chars:,} in {result.summarizer_calls} calls"
            rows.append(
                [
                    result.shape.name,
                    name,
                    *[f"{chars:,}" for chars in sent],
                    f"{sum(sent):,}",
                    f"{result.share_of_full(policy):.0%}",
                    summarizer,
                ]
            )
    header = [
        "loop",
        "history",
        *[f"it. {i}" for i in range(1, ITERATIONS + 1)],
        "total",
        "of full",
        "sent to the summarizer",
    ]
    return table(header, rows)
