"""Retry policies and time limits for the agent call and the evaluation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import threading
import time
from datetime import timedelta

import httpx
import openai
import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import NodeTimeoutError
from langgraph.types import RetryPolicy

from loop_agents import LoopContext, LoopEvaluation, LoopTimeoutError, create_loop_agent
from loop_agents.controls import Retries
from tests.durable_helpers import (
    REQUEST,
    CountingAgent,
    CountingEvaluator,
    answers,
    iteration_of,
    thread,
    transcript,
)
from tests.fakes import FakeChat, texts
from tests.scripted_openai import ScriptedOpenAI


class Transient(Exception):
    """A passing failure (a dropped connection, an overloaded server)."""


def quick(**kwargs: object) -> RetryPolicy:
    """A retry policy with no real waiting."""
    return RetryPolicy(initial_interval=0.001, max_interval=0.001, jitter=False, **kwargs)  # type: ignore[arg-type]


def rate_limit_error() -> openai.RateLimitError:
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx.Response(429, request=request, json={"error": {"message": "slow down"}})
    return openai.RateLimitError("Rate limit reached", response=response, body=None)


class FlakyAgent(CountingAgent):
    """Raises ``errors`` (in order) at ``fail_at`` before answering."""

    def __init__(self, fail_at: int, errors: list[Exception]) -> None:
        super().__init__()
        self.fail_on = fail_at
        self.errors = list(errors)

    def __call__(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        if iteration == self.fail_on and self.errors:
            raise self.errors.pop(0)
        return f"answer {iteration}"


# -- retries --------------------------------------------------------------------------

# The fakes here read their iteration from the answers they are sent (`iteration_of`), which
# a repair (the default retry) sends.


def test_transient_agent_error_is_retried():
    agent = FlakyAgent(2, [Transient("reset"), Transient("reset again")])
    loop = create_loop_agent(
        agent,
        CountingEvaluator(3),
        controls=[Retries(agent_retry_policy=quick(max_attempts=3, retry_on=Transient))],
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert agent.calls == [1, 2, 2, 2, 3]
    assert texts(result["messages"]) == transcript(3)


def test_hand_built_rate_limit_error_is_retried_by_the_default_policy():
    agent = FlakyAgent(1, [rate_limit_error()])
    loop = create_loop_agent(
        agent, CountingEvaluator(2), controls=[Retries(agent_retry_policy=quick())]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert agent.calls == [1, 1, 2]
    assert result["stop_reason"] == "accepted"


def test_errors_outside_retry_on_are_not_retried():
    agent = FlakyAgent(1, [ValueError("a bug, not a hiccup")])
    loop = create_loop_agent(
        agent,
        CountingEvaluator(2),
        controls=[Retries(agent_retry_policy=quick(retry_on=Transient))],
    )
    with pytest.raises(ValueError, match="a bug"):
        loop.invoke({"messages": [REQUEST]})
    assert agent.calls == [1]


def test_exhausted_retries_raise_and_the_loop_resumes(saver):
    agent = FlakyAgent(2, [Transient("1"), Transient("2"), Transient("3")])
    evaluator = CountingEvaluator(3)
    loop = create_loop_agent(
        agent,
        evaluator,
        checkpointer=saver,
        controls=[Retries(agent_retry_policy=quick(max_attempts=2, retry_on=Transient))],
    )
    config = thread("exhausted")
    with pytest.raises(Transient, match="2"):
        loop.invoke({"messages": [REQUEST]}, config)
    assert agent.calls == [1, 2, 2]
    result = loop.invoke(None, config)  # the third error is retried, then it answers
    assert agent.calls == [1, 2, 2, 2, 2, 3]
    assert evaluator.calls == [1, 2, 3]
    assert texts(result["messages"]) == transcript(3)


def test_evaluator_retry_policy():
    failures = [Transient("judge hiccup")]
    calls: list[int] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        calls.append(context["iteration"])
        if context["iteration"] == 2 and failures:
            raise failures.pop()
        return {"stop": context["iteration"] >= 3, "feedback": f"feedback {context['iteration']}"}

    agent = CountingAgent()
    loop = create_loop_agent(
        agent,
        evaluate,
        controls=[
            Retries(evaluator_retry_policy=[quick(retry_on=ValueError), quick(retry_on=Transient)])
        ],
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert calls == [1, 2, 2, 3]
    assert agent.calls == [1, 2, 3]  # the agent is not called again for a retried evaluation
    assert result["iteration"] == 3


def rate_limited_then(script: ScriptedOpenAI, limited: int) -> httpx.MockTransport:
    """The script's server, answering the first ``limited`` requests with HTTP 429."""
    inner = script.transport()
    seen = {"n": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        seen["n"] += 1
        if seen["n"] <= limited:
            return httpx.Response(
                429,
                headers={"retry-after-ms": "1"},
                json={"error": {"message": "Rate limit reached", "type": "requests"}},
            )
        return inner.handle_request(request)

    return httpx.MockTransport(handle)


def test_rate_limited_chat_openai_is_retried():
    script = ScriptedOpenAI(["first draft", "second draft"])
    model = ChatOpenAI(
        model="gpt-test",
        api_key="sk-test",
        base_url="https://scripted.invalid/v1",
        max_retries=0,  # the loop's retry policy decides
        http_client=httpx.Client(transport=rate_limited_then(script, 2)),
    )
    loop = create_loop_agent(
        model,
        CountingEvaluator(2),
        controls=[
            Retries(agent_retry_policy=quick(max_attempts=4, retry_on=openai.RateLimitError))
        ],
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert answers(result["messages"]) == ["first draft", "second draft"]
    assert len(script.requests) == 2  # the two 429s never reached the script


async def test_rate_limited_chat_openai_is_retried_async():
    script = ScriptedOpenAI(["only draft"])
    model = ChatOpenAI(
        model="gpt-test",
        api_key="sk-test",
        base_url="https://scripted.invalid/v1",
        max_retries=0,
        http_async_client=httpx.AsyncClient(transport=rate_limited_then(script, 1)),
    )
    loop = create_loop_agent(
        model,
        CountingEvaluator(1),
        controls=[Retries(agent_retry_policy=quick(retry_on=openai.RateLimitError))],
    )
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert answers(result["messages"]) == ["only draft"]


# -- time limits ----------------------------------------------------------------------


class HangingAgent:
    """Hangs (until cancelled) at the iterations in ``hang_at``; answers otherwise."""

    def __init__(self, *hang_at: int) -> None:
        self.hang_at = list(hang_at)
        self.calls: list[int] = []
        self.cancelled: list[int] = []
        self.__name__ = "agent"

    async def __call__(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        if iteration in self.hang_at:
            self.hang_at.remove(iteration)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(iteration)
                raise
        return f"answer {iteration}"


async def test_agent_timeout_names_node_iteration_and_limit_and_the_loop_resumes(async_saver):
    agent = HangingAgent(2)
    loop = create_loop_agent(
        agent,
        CountingEvaluator(3),
        checkpointer=async_saver,
        controls=[Retries(agent_timeout=0.05)],
    )
    config = thread("agent-timeout")

    with pytest.raises(LoopTimeoutError) as caught:
        await loop.ainvoke({"messages": [REQUEST]}, config)
    error = caught.value
    assert isinstance(error, NodeTimeoutError)
    assert (error.node, error.iteration, error.timeout) == ("invoke_agent", 2, 0.05)
    assert str(error).startswith(
        "node 'invoke_agent' timed out at iteration 2: the agent call ran longer than "
        "agent_timeout=0.05s and was cancelled"
    )
    assert "ainvoke(None, config)" in str(error)
    assert agent.cancelled == [2]
    assert (await loop.aget_state(config)).next == ("invoke_agent",)

    result = await loop.ainvoke(None, config)
    assert agent.calls == [1, 2, 2, 3]
    assert texts(result["messages"]) == transcript(3)


async def test_evaluator_timeout(async_saver):
    hang = {2}
    calls: list[int] = []

    async def evaluate(context: LoopContext) -> LoopEvaluation:
        calls.append(context["iteration"])
        if context["iteration"] in hang:
            hang.clear()
            await asyncio.Event().wait()
        return {"stop": context["iteration"] >= 3, "feedback": f"feedback {context['iteration']}"}

    agent = HangingAgent()
    loop = create_loop_agent(
        agent,
        evaluate,
        checkpointer=async_saver,
        controls=[Retries(evaluator_timeout=timedelta(milliseconds=50))],
    )
    config = thread("evaluator-timeout")
    with pytest.raises(
        LoopTimeoutError,
        match=r"node 'evaluate' timed out at iteration 2: the evaluation ran longer than evaluator_timeout=0.05s",
    ):
        await loop.ainvoke({"messages": [REQUEST]}, config)
    result = await loop.ainvoke(None, config)
    assert agent.calls == [1, 2, 3]
    assert calls == [1, 2, 2, 3]
    assert texts(result["messages"]) == transcript(3)


async def test_timeout_is_retried_by_the_default_retry_policy():
    agent = HangingAgent(1)
    loop = create_loop_agent(
        agent,
        CountingEvaluator(1),
        controls=[Retries(agent_retry_policy=quick(max_attempts=2), agent_timeout=0.05)],
    )
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert agent.calls == [1, 1]
    assert agent.cancelled == [1]
    assert answers(result["messages"]) == ["answer 1"]


async def test_timeout_of_the_first_iteration_of_a_later_loop_names_iteration_1():
    agent = HangingAgent(3)  # the second loop's first call has two answers before it
    loop = create_loop_agent(
        agent,
        CountingEvaluator(2),
        checkpointer=InMemorySaver(),
        controls=[Retries(agent_timeout=0.05)],
    )
    config = thread("later-loop")
    await loop.ainvoke({"messages": [REQUEST]}, config)
    with pytest.raises(LoopTimeoutError, match="at iteration 1:"):
        await loop.ainvoke({"messages": [HumanMessage("Now one about snow.")]}, config)


async def test_a_timeout_error_raised_by_the_agent_itself_is_not_a_loop_timeout():
    async def agent(messages: list[AnyMessage]) -> str:
        raise TimeoutError("the agent's own socket timed out")

    loop = create_loop_agent(agent, CountingEvaluator(1), controls=[Retries(agent_timeout=30)])
    with pytest.raises(TimeoutError, match="own socket") as caught:
        await loop.ainvoke({"messages": [REQUEST]})
    assert not isinstance(caught.value, LoopTimeoutError)


async def test_fast_calls_are_unaffected_by_the_limit():
    agent = HangingAgent()
    loop = create_loop_agent(
        agent, CountingEvaluator(3), controls=[Retries(agent_timeout=30, evaluator_timeout=30)]
    )
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == transcript(3)


# -- calls that do not stop when cancelled, and sync calls --------------------------------

GRACE = 10.0  # seconds over the limit that still count as "ended at the deadline"


class Stubborn:
    """Async calls that swallow cancellation (two ways) at the iterations in ``hang_at``.

    ``"sleeps-on"`` catches ``CancelledError`` and sleeps again; ``"loops"`` loops
    forever on ``await asyncio.sleep``, swallowing every cancellation. Both stop once
    ``released`` is set, so no task outlives the test.
    """

    def __init__(self, how: str, *hang_at: int) -> None:
        self.how = how
        self.hang_at = list(hang_at)
        self.calls: list[int] = []
        self.released = asyncio.Event()
        self.__name__ = "stubborn"

    async def hang(self) -> None:
        if self.how == "sleeps-on":
            try:
                await asyncio.wait_for(self.released.wait(), 60)
            except asyncio.CancelledError:
                await asyncio.wait_for(self.released.wait(), 60)
        else:
            while not self.released.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0.01)

    async def agent(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        if iteration in self.hang_at:
            self.hang_at.remove(iteration)
            await self.hang()
        return f"answer {iteration}"

    async def evaluator(self, context: LoopContext) -> LoopEvaluation:
        iteration = context["iteration"]
        self.calls.append(iteration)
        if iteration in self.hang_at:
            self.hang_at.remove(iteration)
            await self.hang()
        return {"stop": iteration >= 2, "feedback": f"feedback {iteration}"}

    async def let_go(self) -> None:
        self.released.set()
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["sleeps-on", "loops"])
async def test_an_evaluator_that_swallows_cancellation_is_abandoned_at_the_deadline(
    how, caplog, async_saver
):
    stubborn = Stubborn(how, 1)
    loop = create_loop_agent(
        CountingAgent(),
        stubborn.evaluator,
        checkpointer=async_saver,
        controls=[Retries(evaluator_timeout=0.1)],
    )
    config = thread(f"stubborn-evaluator-{how}")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="loop_agents"):
        with pytest.raises(
            LoopTimeoutError, match=r"node 'evaluate' timed out at iteration 1"
        ) as caught:
            await loop.ainvoke({"messages": [REQUEST]}, config)
    assert time.monotonic() - started < 0.1 + GRACE
    assert caught.value.abandoned
    assert "was abandoned" in str(caught.value)
    warning = [r for r in caplog.records if r.name == "loop_agents"]
    assert len(warning) == 1
    assert "'evaluate', iteration 1" in warning[0].getMessage()
    assert "abandoned" in warning[0].getMessage()
    # the checkpoint is kept: the loop resumes at the evaluation that timed out
    result = await loop.ainvoke(None, config)
    assert texts(result["messages"]) == transcript(2)
    await stubborn.let_go()


@pytest.mark.parametrize("how", ["sleeps-on", "loops"])
async def test_an_agent_that_swallows_cancellation_is_abandoned_and_retried(how, caplog):
    stubborn = Stubborn(how, 1)
    loop = create_loop_agent(
        stubborn.agent, CountingEvaluator(2), controls=[Retries(agent_retry_policy=quick(max_attempts=2), agent_timeout=0.1)],
    )  # fmt: skip
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="loop_agents"):
        result = await loop.ainvoke({"messages": [REQUEST]})
    assert time.monotonic() - started < 0.1 + GRACE
    assert stubborn.calls == [1, 1, 2]  # the retry policy still applies
    assert texts(result["messages"]) == transcript(2)
    assert any("'invoke_agent', iteration 1" in r.getMessage() for r in caplog.records)
    await stubborn.let_go()


async def test_a_cooperative_call_is_cancelled_not_abandoned(caplog):
    agent = HangingAgent(1)
    loop = create_loop_agent(agent, CountingEvaluator(1), controls=[Retries(agent_timeout=0.05)])
    with caplog.at_level(logging.WARNING, logger="loop_agents"):
        with pytest.raises(LoopTimeoutError, match="and was cancelled") as caught:
            await loop.ainvoke({"messages": [REQUEST]})
    assert not caught.value.abandoned
    assert agent.cancelled == [1]
    assert not [r for r in caplog.records if r.name == "loop_agents"]


class SlowSync:
    """Sync calls that block (until released) at the iterations in ``hang_at``."""

    def __init__(self, *hang_at: int) -> None:
        self.hang_at = list(hang_at)
        self.calls: list[int] = []
        self.released = threading.Event()
        self.__name__ = "slow"

    def agent(self, messages: list[AnyMessage]) -> str:
        iteration = iteration_of(messages)
        self.calls.append(iteration)
        if iteration in self.hang_at:
            self.hang_at.remove(iteration)
            self.released.wait(60)
        return f"answer {iteration}"

    def evaluator(self, context: LoopContext) -> LoopEvaluation:
        iteration = context["iteration"]
        self.calls.append(iteration)
        if iteration in self.hang_at:
            self.hang_at.remove(iteration)
            self.released.wait(60)
        return {"stop": iteration >= 2, "feedback": f"feedback {iteration}"}


def test_sync_invoke_honours_the_evaluator_timeout_and_resumes(saver, caplog):
    slow = SlowSync(2)
    loop = create_loop_agent(
        CountingAgent(),
        slow.evaluator,
        checkpointer=saver,
        controls=[Retries(evaluator_timeout=0.1)],
    )
    config = thread("sync-evaluator")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="loop_agents"):
        with pytest.raises(
            LoopTimeoutError, match=r"node 'evaluate' timed out at iteration 2: .*abandoned"
        ) as caught:
            loop.invoke({"messages": [REQUEST]}, config)
    assert time.monotonic() - started < 0.1 + GRACE
    assert caught.value.abandoned
    assert any("'evaluate', iteration 2" in r.getMessage() for r in caplog.records)
    assert loop.get_state(config).next == ("evaluate",)
    result = loop.invoke(None, config)
    assert texts(result["messages"]) == transcript(2)
    slow.released.set()


def test_sync_invoke_honours_the_agent_timeout_with_retries():
    slow = SlowSync(1)
    loop = create_loop_agent(
        slow.agent, CountingEvaluator(2), controls=[Retries(agent_retry_policy=quick(max_attempts=2), agent_timeout=0.1)],
    )  # fmt: skip
    result = loop.invoke({"messages": [REQUEST]})
    assert slow.calls == [1, 1, 2]
    assert texts(result["messages"]) == transcript(2)
    slow.released.set()


def test_sync_calls_under_a_limit_still_stream_tokens_and_events():
    loop = create_loop_agent(
        FakeChat.of("rain on the roof"), CountingEvaluator(1), controls=[Retries(agent_timeout=30, evaluator_timeout=30)],
    )  # fmt: skip
    modes: dict[str, int] = {}
    for mode, _chunk in loop.stream({"messages": [REQUEST]}, stream_mode=["messages", "custom"]):
        modes[mode] = modes.get(mode, 0) + 1
    assert modes.get("messages", 0) > 1  # the agent's tokens, from the call's own thread
    assert modes.get("custom", 0) >= 4  # iteration started, agent and evaluation done, end


def test_a_timeout_error_raised_by_a_sync_agent_itself_is_not_a_loop_timeout():
    def agent(messages: list[AnyMessage]) -> str:
        raise TimeoutError("the agent's own socket timed out")

    loop = create_loop_agent(agent, CountingEvaluator(1), controls=[Retries(agent_timeout=30)])
    with pytest.raises(TimeoutError, match="own socket") as caught:
        loop.invoke({"messages": [REQUEST]})
    assert not isinstance(caught.value, LoopTimeoutError)


def test_loop_timeout_error_pickles():
    for abandoned in (False, True):
        error = LoopTimeoutError("evaluate", 3, 1.5, 1.6, abandoned=abandoned)
        copy = pickle.loads(pickle.dumps(error))
        assert (copy.node, copy.iteration, copy.timeout, copy.abandoned, str(copy)) == (
            "evaluate",
            3,
            1.5,
            abandoned,
            str(error),
        )


# -- option checks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"agent_timeout": 0},
            ValueError,
            r"agent_timeout must be a positive, finite number of seconds; got 0",
        ),
        ({"evaluator_timeout": -1.0}, ValueError, r"evaluator_timeout must be a positive"),
        ({"agent_timeout": float("nan")}, ValueError, r"positive, finite"),
        ({"agent_timeout": timedelta(0)}, ValueError, r"positive, finite"),
        (
            {"agent_timeout": "30"},
            TypeError,
            r"agent_timeout must be a number of seconds, a datetime.timedelta or None; got str '30'",
        ),
        ({"agent_timeout": True}, TypeError, r"got bool True"),
        (
            {"agent_retry_policy": 3},
            TypeError,
            r"agent_retry_policy must be a langgraph.types.RetryPolicy, .*got int 3",
        ),
        (
            {"evaluator_retry_policy": []},
            TypeError,
            r"evaluator_retry_policy must be .*non-empty sequence",
        ),
        ({"agent_retry_policy": [quick(), "again"]}, TypeError, r"agent_retry_policy must be"),
    ],
)
def test_bad_options(options, error, message):
    with pytest.raises(error, match=message):
        Retries(**options)


@pytest.mark.parametrize("node", ["agent", "evaluator"])
async def test_a_sync_call_under_ainvoke_is_reported_abandoned_not_cancelled(node, caplog):
    # ainvoke runs a sync function in a worker thread; cancelling the wait does not stop
    # the thread (before: "was cancelled", abandoned=False and no warning)
    release = threading.Event()

    def slow_agent(messages: list[AnyMessage]) -> str:
        release.wait(30)
        return "late"

    def slow_evaluator(context: LoopContext) -> LoopEvaluation:
        release.wait(30)
        return {"stop": True}

    if node == "agent":
        loop = create_loop_agent(
            slow_agent, CountingEvaluator(1), controls=[Retries(agent_timeout=0.2)]
        )
    else:
        loop = create_loop_agent(
            CountingAgent(), slow_evaluator, controls=[Retries(evaluator_timeout=0.2)]
        )
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="loop_agents"):
            with pytest.raises(LoopTimeoutError) as caught:
                await loop.ainvoke({"messages": [REQUEST]})
    finally:
        release.set()
    assert time.monotonic() - started < 0.2 + GRACE
    assert caught.value.abandoned
    assert "was abandoned" in str(caught.value)
    (warning,) = [r for r in caplog.records if r.name == "loop_agents"]
    assert "worker thread" in warning.getMessage()


async def test_a_result_that_comes_after_the_deadline_is_dropped():
    # a coroutine that blocks the event loop cannot be interrupted, but its result comes
    # too late: the iteration still times out (before: accepted after 1.5 s of a 0.2 s limit)
    async def blocking(context: LoopContext) -> LoopEvaluation:
        time.sleep(1.5)  # holds the event loop
        return {"stop": True}

    loop = create_loop_agent(CountingAgent(), blocking, controls=[Retries(evaluator_timeout=0.2)])
    with pytest.raises(LoopTimeoutError, match="node 'evaluate' timed out") as caught:
        await loop.ainvoke({"messages": [REQUEST]})
    assert not caught.value.abandoned
    assert caught.value.elapsed >= 1.5
