"""What held under the last round of hostile probes, kept as tests: one middleware instance
under 30 concurrent runs, and memory that stays flat over 2,000 loops."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, LoopMiddleware, create_loop_agent
from loop_agents.controls import AnswerSelection
from tests.fakes import FakeChat


def numbered(context: LoopContext) -> LoopEvaluation:
    """Accepts the second answer; scores each by its iteration."""
    iteration = context["iteration"]
    if iteration >= 2:
        return {"stop": True, "score": float(iteration)}
    return {"stop": False, "feedback": "Again.", "score": float(iteration)}


async def test_thirty_concurrent_runs_on_one_middleware_keep_their_own_loops():
    loop = LoopMiddleware(numbered, 3, controls=[AnswerSelection("best")])

    def writer(messages: list) -> AIMessage:
        request = messages[0].text
        attempt = sum(1 for m in messages if m.type == "ai") + 1
        return AIMessage(f"{request} / attempt {attempt}")

    agent = create_agent(FakeChat.of(*[writer] * 200), middleware=[loop])
    requests = [f"request {i}" for i in range(30)]
    results = await asyncio.gather(
        *(agent.ainvoke({"messages": [HumanMessage(r)]}) for r in requests)
    )
    for request, result in zip(requests, results, strict=True):
        assert result["loop_stop_reason"] == "accepted"
        assert [r["iteration"] for r in result["loop_records"]] == [1, 2]
        answers = [r["answer"].text for r in result["loop_records"]]
        assert answers == [f"{request} / attempt 1", f"{request} / attempt 2"]
        assert result["messages"][-1].text == f"{request} / attempt 2"


@pytest.mark.slow
def test_memory_stays_flat_over_two_thousand_loops():
    loop = create_loop_agent(lambda messages: "an answer", numbered, 3)  # a fake that keeps nothing

    def run(times: int) -> None:
        for _ in range(times):
            loop.invoke({"messages": [HumanMessage("Hi")]})

    run(200)  # warm: caches, imports, LangGraph's first-run work
    gc.collect()
    tracemalloc.start()
    run(500)
    gc.collect()
    after_500 = tracemalloc.get_traced_memory()[0]
    run(1_500)
    gc.collect()
    after_2000 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # 1,500 more loops may not hold on to more than a few hundred bytes each
    assert after_2000 - after_500 < 1_500 * 300, (after_500, after_2000)
