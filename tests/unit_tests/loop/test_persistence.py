"""Checkpoint and resume on every saver: failures at iteration k, new loops, going back."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents import create_loop_agent
from loop_agents.controls import Adaptive
from loop_agents.loop.checkpoints import acheckpoint_before_iteration, checkpoint_before_iteration
from tests.durable_helpers import (
    REQUEST,
    AsyncCountingAgent,
    Boom,
    CountingAgent,
    CountingEvaluator,
    answers,
    thread,
    transcript,
)
from tests.fakes import review, texts

ACCEPT_AT = 4


# -- a failure at iteration k, then invoke(None, config) -----------------------------


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("k", [1, 3])
def test_agent_failure_resumes_without_repeating_earlier_iterations(saver, k, durability):
    agent = CountingAgent(fail_at=k)
    evaluator = CountingEvaluator(accept_at=ACCEPT_AT)
    loop = create_loop_agent(agent, evaluator, 10, checkpointer=saver)
    config = thread(f"agent-fails-{k}")

    with pytest.raises(Boom, match=f"agent failed at iteration {k}"):
        loop.invoke({"messages": [REQUEST]}, config, durability=durability)
    paused = loop.get_state(config)
    assert paused.next == ("invoke_agent",)
    assert paused.values.get("iteration", 0) == k - 1
    assert answers(paused.values["messages"]) == [f"answer {i}" for i in range(1, k)]

    result = loop.invoke(None, config, durability=durability)

    # iterations 1..k-1 ran once; k failed once and ran again; the rest ran once
    assert agent.calls == [*range(1, k + 1), *range(k, ACCEPT_AT + 1)]
    assert evaluator.calls == list(range(1, ACCEPT_AT + 1))
    assert texts(result["messages"]) == transcript(ACCEPT_AT)
    assert result["iteration"] == ACCEPT_AT
    assert [r["iteration"] for r in result["records"]] == list(range(1, ACCEPT_AT + 1))
    assert result["stop_reason"] == "accepted"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("k", [1, 3])
def test_evaluator_failure_resumes_without_calling_the_agent_again(saver, k, durability):
    agent = CountingAgent()
    evaluator = CountingEvaluator(accept_at=ACCEPT_AT, fail_at=k)
    loop = create_loop_agent(agent, evaluator, 10, checkpointer=saver)
    config = thread(f"evaluator-fails-{k}")

    with pytest.raises(Boom, match=f"evaluator failed at iteration {k}"):
        loop.invoke({"messages": [REQUEST]}, config, durability=durability)
    paused = loop.get_state(config)
    assert paused.next == ("evaluate",)
    assert paused.values["iteration"] == k
    assert agent.calls == list(range(1, k + 1))

    result = loop.invoke(None, config, durability=durability)

    # the agent ran once per iteration (1..k included); the evaluator ran again for k only
    assert agent.calls == list(range(1, ACCEPT_AT + 1))
    assert evaluator.calls == [*range(1, k + 1), *range(k, ACCEPT_AT + 1)]
    assert texts(result["messages"]) == transcript(ACCEPT_AT)
    assert result["feedback"] == [f"feedback {i}" for i in range(1, ACCEPT_AT)] + [""]


@pytest.mark.parametrize("k", [1, 3])
async def test_async_failures_resume(async_saver, k):
    agent = AsyncCountingAgent(fail_at=k)
    evaluator = CountingEvaluator(accept_at=ACCEPT_AT, fail_at=k + 1)
    loop = create_loop_agent(agent, evaluator, 10, checkpointer=async_saver)
    config = thread("async-failures")

    with pytest.raises(Boom, match="agent failed"):
        await loop.ainvoke({"messages": [REQUEST]}, config)
    assert (await loop.aget_state(config)).next == ("invoke_agent",)
    with pytest.raises(Boom, match="evaluator failed"):
        await loop.ainvoke(None, config)
    assert (await loop.aget_state(config)).next == ("evaluate",)
    result = await loop.ainvoke(None, config)

    assert agent.calls == [*range(1, k + 1), *range(k, ACCEPT_AT + 1)]
    assert evaluator.calls == [*range(1, k + 2), *range(k + 1, ACCEPT_AT + 1)]
    assert texts(result["messages"]) == transcript(ACCEPT_AT)


@pytest.mark.parametrize("fail_at", [3, 4])
def test_a_failure_in_a_later_loop_resumes_that_loop(saver, fail_at):
    """A second request on a thread starts a new loop; a failure in it resumes it."""
    agent = CountingAgent()
    loop = create_loop_agent(agent, CountingEvaluator(accept_at=2), 10, checkpointer=saver)
    config = thread("two-loops")
    loop.invoke({"messages": [REQUEST]}, config)
    agent.fail_at = fail_at  # the second loop's first (3) or second (4) agent call

    with pytest.raises(Boom):
        loop.invoke({"messages": [HumanMessage("Now one about snow.")]}, config)
    result = loop.invoke(None, config)

    assert agent.calls == [1, 2, *range(3, fail_at + 1), *range(fail_at, 5)]
    assert result["iteration"] == 2
    assert texts(result["init_messages"]) == [("human", "Now one about snow.")]
    assert answers(result["messages"]) == ["answer 1", "answer 2", "answer 3", "answer 4"]


def test_state_is_stored_in_the_saver(saver):
    """A new graph object on the same saver sees the loop's state (nothing kept in memory)."""
    config = thread("reopen")
    first = create_loop_agent(CountingAgent(fail_at=2), CountingEvaluator(3), checkpointer=saver)
    with pytest.raises(Boom):
        first.invoke({"messages": [REQUEST]}, config)

    agent = CountingAgent()
    again = create_loop_agent(agent, CountingEvaluator(3), checkpointer=saver)
    result = again.invoke(None, config)
    assert agent.calls == [2, 3]
    assert texts(result["messages"]) == transcript(3)


# -- going back to iteration k and forking from there --------------------------------


def test_fork_from_iteration(saver):
    agent = CountingAgent()
    loop = create_loop_agent(agent, CountingEvaluator(accept_at=3), 10, checkpointer=saver)
    config = thread("fork")
    original = loop.invoke({"messages": [REQUEST]}, config)
    head = loop.get_state(config)

    snapshot = checkpoint_before_iteration(loop, config, 2)
    assert snapshot.next == ("invoke_agent",)
    assert snapshot.values["iteration"] == 1
    assert texts(snapshot.values["messages"]) == transcript(3)[:3]

    hint = HumanMessage("Use the word 'umbrella'.")
    fork = loop.update_state(snapshot.config, {"messages": [hint]})
    forked = loop.invoke(None, fork)

    assert agent.calls == [1, 2, 3, 2, 3]  # the fork re-ran iterations 2 and 3 only
    assert texts(forked["messages"]) == [
        *transcript(3)[:3],
        ("human", hint.text),
        ("ai", "answer 2"),
        ("human", review("feedback 2", 2)),
        ("ai", "answer 3"),
    ]
    assert forked["iteration"] == 3
    assert [r["iteration"] for r in forked["records"]] == [1, 2, 3]
    # the original branch is kept
    before = loop.get_state(head.config)
    assert texts(before.values["messages"]) == texts(original["messages"]) == transcript(3)
    # the thread's current checkpoint is now the fork's, and searching from the original
    # head still finds the original branch's checkpoint
    assert checkpoint_before_iteration(loop, head.config, 2).config == snapshot.config
    assert hint.text in [
        m.text for m in checkpoint_before_iteration(loop, config, 3).values["messages"]
    ]


def test_fork_replays_from_a_checkpoint_without_changes(saver):
    agent = CountingAgent()
    loop = create_loop_agent(agent, CountingEvaluator(accept_at=3), 10, checkpointer=saver)
    config = thread("replay")
    loop.invoke({"messages": [REQUEST]}, config)
    first = checkpoint_before_iteration(loop, config, 1)
    assert first.values.get("iteration", 0) == 0

    result = loop.invoke(None, first.config)
    assert agent.calls == [1, 2, 3, 1, 2, 3]
    assert texts(result["messages"]) == transcript(3)


def test_checkpoint_before_iteration_looks_only_at_the_latest_loop(saver):
    loop = create_loop_agent(CountingAgent(), CountingEvaluator(accept_at=3), checkpointer=saver)
    config = thread("latest-loop")
    loop.invoke({"messages": [REQUEST]}, config)
    loop.invoke({"messages": [HumanMessage("Now one about snow.")]}, config)

    snapshot = checkpoint_before_iteration(loop, config, 1)
    assert texts(snapshot.values["messages"])[-1] == ("human", "Now one about snow.")
    second = checkpoint_before_iteration(loop, config, 3)
    assert answers(second.values["messages"])[-2:] == ["answer 4", "answer 5"]
    with pytest.raises(ValueError, match=r"no checkpoint before iteration 4 .*iterations: 1, 2, 3"):
        checkpoint_before_iteration(loop, config, 4)


@pytest.mark.parametrize("iteration", [0, -1, 1.5, True])
def test_checkpoint_before_iteration_rejects_bad_numbers(iteration):
    loop = create_loop_agent(CountingAgent(), CountingEvaluator(2), checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match="iteration must be an int >= 1"):
        checkpoint_before_iteration(loop, thread("x"), iteration)


def test_checkpoint_before_iteration_needs_a_thread():
    loop = create_loop_agent(CountingAgent(), CountingEvaluator(2), checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match="config has no thread_id"):
        checkpoint_before_iteration(loop, {}, 1)


async def test_async_fork_from_iteration(async_saver):
    agent = AsyncCountingAgent()
    loop = create_loop_agent(agent, CountingEvaluator(accept_at=3), 10, checkpointer=async_saver)
    config = thread("async-fork")
    await loop.ainvoke({"messages": [REQUEST]}, config)

    snapshot = await acheckpoint_before_iteration(loop, config, 3)
    assert snapshot.values["iteration"] == 2
    result = await loop.ainvoke(None, snapshot.config)
    assert agent.calls == [1, 2, 3, 3]
    assert texts(result["messages"]) == transcript(3)
    history = [s async for s in loop.aget_state_history(config)]
    assert len({s.config["configurable"]["checkpoint_id"] for s in history}) == len(history)


def test_an_adaptive_strategy_resumes_without_repeating_earlier_iterations(saver):
    """With `Adaptive` (each retry's kind chosen): a failure at iteration 2 resumes there,
    sends the agent the same kind of retry again, and the loop finishes."""
    evaluator = CountingEvaluator(accept_at=3)
    sent: list[tuple[int, list[tuple[str, str]]]] = []

    def agent(messages):
        iteration = len(evaluator.calls) + 1  # read from the verdicts, not from the input
        sent.append((iteration, texts(messages)))
        if iteration == 2 and len(sent) == 2:
            raise Boom("agent failed at iteration 2")
        return f"answer {iteration}"

    loop = create_loop_agent(agent, evaluator, 10, checkpointer=saver, controls=[Adaptive(seed=0)])
    config = thread("adaptive-strategy")
    with pytest.raises(Boom, match="agent failed at iteration 2"):
        loop.invoke({"messages": [REQUEST]}, config)
    result = loop.invoke(None, config)

    assert [iteration for iteration, _ in sent] == [1, 2, 2, 3]
    assert sent[1][1] == sent[2][1]  # the retry of iteration 2 was chosen once, then kept
    assert evaluator.calls == [1, 2, 3]
    assert texts(result["messages"]) == transcript(3)
    assert [r["iteration"] for r in result["records"]] == [1, 2, 3]
    first, second = result["records"][0]["strategy"], result["records"][1]["strategy"]
    assert first["kind"] == "first"
    assert second["kind"] == first["next"]["kind"]  # the kind chosen before the failure
    assert result["stop_reason"] == "accepted"
