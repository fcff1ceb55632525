"""Candidates, advice and compaction as LangGraph steps: a failure repeats no finished call.

With a checkpointer, a node that makes several paid calls makes each as a LangGraph task;
its result is saved with the checkpoint, so resuming after a failure runs again only what
failed. Counted by calls, sync and async, on the in-memory and the SQLite savers.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import RetryPolicy

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import Advice, Candidates, Retries
from loop_agents.runtime.steps import Call, arun, run
from tests.fakes import FakeChat

REQUEST = HumanMessage("Name the release.")


class Boom(Exception):
    """A failure injected by a test."""


class Candidate:
    """An agent whose k-th call of each iteration is candidate k; one call fails once."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: Counter[int] = Counter()
        self.fail_on = fail_on
        self.lock = threading.Lock()
        self.__name__ = "candidate"

    def __call__(self, messages: list[AnyMessage]) -> str:
        with self.lock:
            number = sum(self.calls.values()) + 1
            self.calls[number] += 1
            fail = self.fail_on == number
            if fail:
                self.fail_on = None
        if fail:
            raise Boom(f"call {number} failed")
        return f"answer {number} " + "x" * number


def longest(context: LoopContext) -> LoopEvaluation:
    text = context["last_response"].text
    return {"stop": True, "score": float(len(text)), "feedback": ""}


def config(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def test_a_failed_candidate_runs_again_alone_on_resume():
    agent = Candidate(fail_on=3)
    judged: list[str] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        judged.append(context["last_response"].text)
        return longest(context)

    loop = create_loop_agent(
        agent, evaluate, 1, controls=[Candidates(3)], checkpointer=InMemorySaver()
    )
    with pytest.raises(Boom):
        loop.invoke({"messages": [REQUEST]}, config("c"))
    assert sum(agent.calls.values()) == 3
    result = loop.invoke(None, config("c"))
    # 4 agent calls in all, not 6: the two answers already paid for were read back
    assert sum(agent.calls.values()) == 4
    assert len(result["records"][0]["candidates"]) == 3
    assert len(judged) == 3  # each candidate judged once


async def test_a_failed_candidate_runs_again_alone_on_resume_async():
    agent = Candidate(fail_on=2)
    loop = create_loop_agent(
        agent, longest, 1, controls=[Candidates(3)], checkpointer=InMemorySaver()
    )
    with pytest.raises(Boom):
        await loop.ainvoke({"messages": [REQUEST]}, config("a"))
    result = await loop.ainvoke(None, config("a"))
    assert sum(agent.calls.values()) == 4
    assert result["stop_reason"] == "accepted"


def test_a_retry_of_one_candidate_does_not_run_the_others_again():
    agent = Candidate(fail_on=2)
    retry = RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=False, retry_on=Boom)
    loop = create_loop_agent(
        agent, longest, 1, controls=[Candidates(3), Retries(agent_retry_policy=retry)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert sum(agent.calls.values()) == 4  # three calls and one retry
    assert result["records"][0]["candidate"] in (1, 2, 3)


def test_a_failed_candidate_judge_is_judged_again_alone():
    seen: list[str] = []
    failed = {"done": False}

    def flaky_judge(context: LoopContext) -> LoopEvaluation:
        seen.append(context["last_response"].text)
        if context.get("candidate") == 2 and not failed["done"]:
            failed["done"] = True
            raise Boom("judge failed")
        return longest(context)

    agent = Candidate()
    loop = create_loop_agent(
        agent, flaky_judge, 1, controls=[Candidates(3)], checkpointer=InMemorySaver()
    )
    with pytest.raises(Boom):
        loop.invoke({"messages": [REQUEST]}, config("j"))
    loop.invoke(None, config("j"))
    assert sum(agent.calls.values()) == 3  # no agent call again
    assert len(seen) == 4  # three judgements and the failed one again


def metric(context: LoopContext) -> float:
    return float(len(context["last_response"].text))


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_an_advisor_failure_does_not_repeat_the_judge(call):
    judged: list[int] = []

    def counted_metric(context: LoopContext) -> float:
        judged.append(context["iteration"])
        return metric(context)

    advice = {"calls": 0}

    def advise(messages: list[AnyMessage]) -> AIMessage:
        advice["calls"] += 1
        if advice["calls"] == 1:
            raise Boom("the advisor failed")
        return AIMessage("Write more.")

    advisor = FakeChat.of(advise)
    agent = FakeChat.of("abc", "abcdefghij")
    loop = create_loop_agent(
        agent, counted_metric, 3, controls=[Advice(8, model=advisor)], checkpointer=InMemorySaver()
    )
    if call == "ainvoke":
        with pytest.raises(Boom):
            await loop.ainvoke({"messages": [REQUEST]}, config(f"adv-{call}"))
    else:
        with pytest.raises(Boom):
            loop.invoke({"messages": [REQUEST]}, config(f"adv-{call}"))
    if call == "ainvoke":
        result = await loop.ainvoke(None, config(f"adv-{call}"))
    else:
        result = loop.invoke(None, config(f"adv-{call}"))
    assert result["stop_reason"] == "accepted"
    assert judged == [1, 2]  # iteration 1 judged once, though its advice failed first
    assert result["records"][0]["feedback"] == "Write more."
    assert len(agent.calls) == 2


def program() -> Any:
    first = yield Call("one", lambda x, c: x + 1, _async(lambda x: x + 1), 1, {})
    second = yield Call("two", lambda x, c: x * 10, _async(lambda x: x * 10), first.value, {})
    return second.value


def _async(func: Any) -> Any:
    async def call(value: Any, config: Any) -> Any:
        return func(value)

    return call


async def test_one_program_runs_under_both_drivers():
    assert run(program()) == 20
    assert await arun(program()) == 20


def test_an_error_is_thrown_into_the_program_where_it_can_be_handled():
    def failing(x: Any, config: Any) -> Any:
        raise Boom("no")

    def handles() -> Any:
        try:
            yield Call("fails", failing, _async(failing), 1, {})
        except Boom:
            return "handled"
        return "not reached"

    assert run(handles()) == "handled"
