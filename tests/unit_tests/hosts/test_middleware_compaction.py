"""`compacting` inside `LoopMiddleware`: the agent's model is sent what the policy chose,
the summary is kept in the agent's state (``loop_history_memory``) and read back after a
resume, exactly as in `create_loop_agent` (tests/unit_tests/loop/test_compaction.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from loop_agents import LoopMiddleware, create_loop_agent
from loop_agents.controls import History
from loop_agents.loop.history.compaction import compacting
from tests.fakes import FakeChat, texts
from tests.unit_tests.loop.test_compaction import (
    BUDGET,
    ITERATIONS,
    REQUEST,
    SUMMARY,
    attempts_summarized,
    never_satisfied,
    summarizer,
)


class Drafts:
    """Long drafts, numbered; raises once at call ``fail_at`` (a provider's outage)."""

    def __init__(self, fail_at: int = 0) -> None:
        self.numbers = itertools.count(1)
        self.fail_at = fail_at
        self.failed = False

    def __call__(self, messages: list[AnyMessage]) -> str:
        number = next(self.numbers)
        if number == self.fail_at and not self.failed:
            self.failed = True
            raise RuntimeError("the model failed")
        return f"Draft {number}: " + "words " * 200


def inside(model: Any, policy: Any, **options: Any) -> Any:
    middleware = [LoopMiddleware(never_satisfied, ITERATIONS, controls=[History(policy)])]
    return create_agent(model, middleware=middleware, **options)


def test_the_model_is_sent_what_compaction_chose_as_in_a_loop_around_the_agent():
    model, summaries = FakeChat.of(Drafts()), summarizer()
    result = inside(model, compacting(summaries, max_tokens=BUDGET)).invoke(
        {"messages": [HumanMessage(REQUEST)]}
    )
    around_model, around_summaries = FakeChat.of(Drafts()), summarizer()
    around = create_loop_agent(
        create_agent(around_model),
        never_satisfied,
        ITERATIONS,
        controls=[History(compacting(around_summaries, max_tokens=BUDGET))],
    )
    around.invoke({"messages": [HumanMessage(REQUEST)]})
    assert len(model.calls) == ITERATIONS
    assert max(count_tokens_approximately(call) for call in model.calls) <= BUDGET
    assert [texts(c) for c in model.calls] == [texts(c) for c in around_model.calls]
    assert [texts(c) for c in summaries.calls] == [texts(c) for c in around_summaries.calls]
    assert attempts_summarized(summaries) == list(range(1, ITERATIONS - 1))
    # the agent's state keeps the whole conversation; only what is sent is compacted
    assert len([m for m in result["messages"] if m.type == "ai"]) == ITERATIONS
    assert result["loop_stop_reason"] == "max_iterations"


def test_the_summary_survives_a_resume_with_a_new_policy_object(saver: Any):
    config = {"configurable": {"thread_id": "middleware-compaction"}}
    drafts = Drafts(fail_at=7)
    first = summarizer()
    agent = inside(FakeChat.of(drafts), compacting(first, max_tokens=BUDGET), checkpointer=saver)
    with pytest.raises(RuntimeError, match="the model failed"):
        agent.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    assert len(first.calls) == 4  # iterations 4-7 summarized, 7's before the model failed
    memory = agent.get_state(config).values["loop_history_memory"]
    assert memory["summary"] == SUMMARY.strip()
    # another process: a new policy and summarizer, the same storage
    second = summarizer()
    again = inside(FakeChat.of(drafts), compacting(second, max_tokens=BUDGET), checkpointer=saver)
    result = again.invoke(None, config)
    assert result["loop_iteration"] == ITERATIONS
    assert attempts_summarized(second) == [6, 7, 8]
    assert "The summary so far (attempts 1-5):" in second.calls[0][-1].text
