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

The evaluator is `llm_judge` on a fake model that never accepts. ``measure_caching``
runs every policy with each of `FEEDBACK_FORMATS` and measures, from the messages the
fake models were sent, how much of each prompt a provider's prefix cache could serve
(the longest start it shares with an earlier prompt of the same model, `PromptCall`),
and what the loop costs at `PRICES` with and without the cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage, HumanMessage

from benchmarks.contenders import FakeChat, FakeJudgeChat, message_chars
from benchmarks.measure import table
from loop_agents import create_loop_agent, llm_judge
from loop_agents.controls import FeedbackStyle, History
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, PLAIN_FEEDBACK, FeedbackFormat
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


RUBRIC = "Rubric: ".ljust(600, "r")
"""The judge's instructions (600 characters)."""

FEEDBACK_FORMATS: dict[str, FeedbackFormat] = {
    "fenced (default)": DEFAULT_FEEDBACK_FORMAT,
    "plain": PLAIN_FEEDBACK,
}

PRICES = {"input": 0.25, "cached_input": 0.025, "output": 2.0}
"""Dollars per million tokens, OpenAI-style cached pricing (gpt-5-mini's list prices)."""

CHARS_PER_TOKEN = 4
"""Characters a token, to turn the table's characters into priced tokens."""


@dataclass
class Run:
    """One loop's models, which kept every prompt they were sent."""

    agent: FakeChat
    judge: FakeJudgeChat


def run_loop(
    shape: Shape,
    history: HistoryPolicy,
    *,
    feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT,
) -> Run:
    """Run one loop of `ITERATIONS` attempts judged by `llm_judge` (which never accepts).

    The judge (``method="function_calling"``, the template ``{feedback}``) is sent the
    rubric, the request and the attempt, and gives ``Review N: `` padded to the shape's
    feedback length.
    """
    agent = FakeChat(answer_chars=shape.answer, record=True)
    judge_model = FakeJudgeChat(answer_chars=shape.feedback, record=True)
    judge = llm_judge(
        judge_model, RUBRIC, threshold=100, method="function_calling", template="{feedback}"
    )
    loop = create_loop_agent(
        agent,
        judge,
        ITERATIONS,
        controls=[History(history), FeedbackStyle(feedback_format)],
    )
    loop.invoke({"messages": [HumanMessage("Request: ".ljust(shape.request, "z"))]})
    return Run(agent, judge_model)


def sent_per_iteration(shape: Shape, history: HistoryPolicy) -> list[int]:
    """Run one loop of `ITERATIONS` attempts; return the characters sent on each call."""
    return list(run_loop(shape, history).agent.sent_chars)


def provider_text(messages: Sequence[BaseMessage]) -> list[str]:
    """Each message as a provider receives it: its role, its text, its tool calls.

    Message ids and other metadata are not sent to a provider, so they are left out.
    """
    texts = []
    for message in messages:
        calls = getattr(message, "tool_calls", None) or []
        shown = json.dumps(calls, sort_keys=True) if calls else ""
        texts.append(f"{message.type}\n{message.text}\n{shown}\n")
    return texts


@dataclass(frozen=True)
class PromptCall:
    """One model call as a prefix cache sees it, in characters."""

    prompt: int
    cached: int
    """The longest prefix shared with an earlier prompt of the same model: cacheable."""
    repeated: int
    """The characters of the messages that were in an earlier prompt of the same model."""
    output: int

    @property
    def share(self) -> float:
        """The share of the prompt that is cacheable."""
        return self.cached / self.prompt if self.prompt else 0.0

    @property
    def reuse(self) -> float:
        """The share of the repeated messages that the cacheable prefix covers (at most 1)."""
        return min(1.0, self.cached / self.repeated) if self.repeated else 1.0

    def cost(self, *, cached_pricing: bool = True) -> float:
        """Dollars at `PRICES`, `CHARS_PER_TOKEN` characters a token."""
        cached = self.cached if cached_pricing else 0
        dollars = (
            (self.prompt - cached) * PRICES["input"]
            + cached * PRICES["cached_input"]
            + self.output * PRICES["output"]
        )
        return dollars / CHARS_PER_TOKEN / 1_000_000


def prompt_calls(model: FakeChat) -> list[PromptCall]:
    """What a provider's prefix cache would make of the prompts ``model`` was sent."""
    earlier: list[str] = []
    seen: set[str] = set()
    calls = []
    for prompt in model.prompts:
        pieces = provider_text(prompt)
        text = "".join(pieces)
        cached = max((len(os.path.commonprefix([text, old])) for old in earlier), default=0)  # noqa: RUF071 (characters)
        repeated = sum(len(piece) for piece in pieces if piece in seen)
        calls.append(PromptCall(len(text), cached, repeated, model.answer_chars))
        earlier.append(text)
        seen.update(pieces)
    return calls


@dataclass
class Caching:
    """How cacheable one loop's prompts are: the agent's, the judge's, the summarizer's."""

    shape: Shape
    policy: str
    feedback_format: str
    agent: list[PromptCall]
    judge: list[PromptCall]
    summarizer: list[PromptCall] = field(default_factory=list)

    def calls(self) -> list[PromptCall]:
        return [*self.agent, *self.judge, *self.summarizer]

    def cost(self, *, cached_pricing: bool = True) -> float:
        """Dollars per loop, all roles."""
        return sum(c.cost(cached_pricing=cached_pricing) for c in self.calls())


def whole_share(calls: Sequence[PromptCall]) -> float:
    """The cacheable share of all the prompts of ``calls`` together."""
    return sum(c.cached for c in calls) / sum(c.prompt for c in calls)


def measure_caching() -> list[Caching]:
    """Every policy and feedback format on every shape, with the judge (deterministic)."""
    results = []
    for shape in SHAPES:
        for format_name, feedback_format in FEEDBACK_FORMATS.items():
            for name, policy in POLICIES.items():
                summarizer = None
                if name == COMPACTING:
                    policy, summarizer = _compacting(shape)
                run = run_loop(shape, policy, feedback_format=feedback_format)
                results.append(
                    Caching(
                        shape,
                        name,
                        format_name,
                        prompt_calls(run.agent),
                        prompt_calls(run.judge),
                        prompt_calls(summarizer) if summarizer is not None else [],
                    )
                )
    return results


SHOWN_ITERATIONS = (2, 4, ITERATIONS)
"""The iterations whose cacheable share the caching table shows."""


def caching_table(results: list[Caching]) -> str:
    """The prompt-caching table: cacheable shares per role, cost per 1,000 loops."""
    rows = []
    for result in results:
        name = result.policy
        if name == COMPACTING:
            name = f"compacting(max_tokens={result.shape.budget:,})"
        rows.append(
            [
                result.shape.name,
                name,
                result.feedback_format,
                *[f"{result.agent[i - 1].share:.0%}" for i in SHOWN_ITERATIONS],
                f"{whole_share(result.agent):.0%}",
                f"{min(c.reuse for c in result.agent):.0%}",
                f"{whole_share(result.judge):.0%}",
                f"{min(c.reuse for c in result.judge):.0%}",
                f"{1000 * result.cost(cached_pricing=False):.3f}",
                f"{1000 * result.cost():.3f}",
            ]
        )
    header = [
        "loop",
        "history",
        "feedback",
        *[f"agent it. {i}" for i in SHOWN_ITERATIONS],
        "agent, whole loop",
        "agent: repeated part cached (min)",
        "judge, whole loop",
        "judge: repeated part cached (min)",
        "$ / 1,000 loops, no cache",
        "$ / 1,000 loops, cached",
    ]
    return table(header, rows)


@dataclass
class Economy:
    """Characters sent per iteration, per policy, for one shape."""

    shape: Shape
    sent: dict[str, list[int]]
    summarizer_calls: int = 0
    summarizer_chars: int = 0

    def share_of_full(self, policy: str) -> float:
        return sum(self.sent[policy]) / sum(self.sent["full"])


def _compacting(shape: Shape) -> tuple[HistoryPolicy, FakeChat]:
    summarizer = FakeChat(answer_chars=SUMMARY_CHARS, record=True)
    policy = compacting(
        summarizer, max_tokens=shape.budget, token_counter=lambda m: message_chars(list(m))
    )
    return policy, summarizer


def _compacted(shape: Shape) -> tuple[list[int], FakeChat]:
    policy, summarizer = _compacting(shape)
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
