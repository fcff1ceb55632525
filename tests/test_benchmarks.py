"""The benchmarks' deterministic parts: fair contenders and the context-economy numbers."""

from __future__ import annotations

import asyncio
import itertools

from langchain_core.messages import HumanMessage

from benchmarks import context, storage
from benchmarks.contenders import FakeChat, accept_at, minimal_langgraph_loop, plain_async_loop
from benchmarks.measure import table
from loop_agents import create_loop_agent
from tests.fakes import texts


def test_the_three_loops_compared_produce_the_same_conversation():
    async def transcripts() -> list[list[tuple[str, str]]]:
        results = []
        for build in ("ours", "minimal", "plain"):
            model, evaluator = FakeChat(), accept_at(5, "Again.")
            request = [HumanMessage("Write a haiku.")]
            if build == "ours":
                out = await create_loop_agent(model, evaluator, 5).ainvoke({"messages": request})
                results.append(texts(out["messages"]))
            elif build == "minimal":
                graph = minimal_langgraph_loop(model, evaluator, 5)
                results.append(texts((await graph.ainvoke({"messages": request}))["messages"]))
            else:
                results.append(texts(await plain_async_loop(model, evaluator, 5, list(request))))
        return results

    ours, minimal, plain = asyncio.run(transcripts())
    assert ours == minimal == plain
    assert len(ours) == 10
    assert ours[-1] == ("ai", "an")  # answer_chars=2: every answer is "an" (answer N...)


def test_context_economy_numbers():
    long_answers, song = context.measure()
    assert long_answers.sent["full"] == [400, 2200, 4000, 5800, 7600, 9400]
    assert long_answers.sent["last_attempt"] == [400, 2200, 2200, 2200, 2200, 2200]
    assert long_answers.sent["function: last two attempts"] == [400, 2200, 4000, 4000, 4000, 4000]
    log = long_answers.sent["feedback_log"]
    assert log[0] == 400
    # after the header, every iteration adds one entry of the same size
    assert all(b - a == log[2] - log[1] for a, b in itertools.pairwise(log[1:]))
    assert long_answers.share_of_full("last_attempt") <= 0.40
    assert song.sent["last_attempt"] == [364, 704, 704, 704, 704, 704]
    assert song.share_of_full("last_attempt") > 0.40  # the request dominates short loops
    rendered = context.context_table([long_answers, song])
    assert rendered.count("\n") == 1 + 2 * len(context.POLICIES)


def test_table_layout():
    assert table(["name", "time"], [["a", "1,000 µs"], ["bb", "2 µs"]]).splitlines() == [
        "| name |     time |",
        "|------|---------:|",
        "| a    | 1,000 µs |",
        "| bb   |     2 µs |",
    ]


def test_the_storage_benchmark_measures_the_loops_before_and_after():
    results, notes = storage.measure((2, 4), 1, ("sqlite",), ("before", "delta"))
    assert notes == [] or notes[0].startswith("before: `git archive")
    delta = [r for r in results if r.contender == "delta"]
    assert [r.iterations for r in delta] == [2, 4]
    assert all(r.storage == "delta" and r.stored_bytes > 0 and r.disk_bytes > 0 for r in delta)
    before = [r for r in results if r.contender == "before"]
    if not notes:  # the layout before delta storage stores more per iteration
        assert before[1].stored_bytes / 4 > delta[1].stored_bytes / 4
    rendered = storage.storage_table(results)
    assert rendered.count("\n") == 1 + len(results) // 2
    assert "create_loop_agent (delta channels)" in rendered
    assert storage.targets(results)[0].startswith("5. sqlite: bytes per iteration at 4 are")
