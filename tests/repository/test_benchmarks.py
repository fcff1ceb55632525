"""The benchmarks' deterministic parts: fair contenders and the context-economy numbers."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from benchmarks import agent_state_storage, context, storage
from benchmarks.contenders import FakeChat, accept_at, minimal_langgraph_loop, plain_async_loop
from benchmarks.measure import table
from loop_agents import create_loop_agent
from loop_agents.loop.feedback import feedback_text, is_feedback
from tests.fakes import review, texts


def test_the_three_loops_compared_produce_the_same_conversation():
    async def transcripts() -> list[list[tuple[str, str]]]:
        results = []
        for build in ("ours", "minimal", "plain"):
            model, evaluator = FakeChat(), accept_at(5, "Again.")
            request = [HumanMessage("Write a haiku.")]
            if build == "ours":
                out = await create_loop_agent(model, evaluator, 5).ainvoke({"messages": request})
                # the same conversation; the agent reads each feedback fenced
                fenced = [review("Again.", i) for i in range(1, 5)]
                assert [m.text for m in out["messages"] if is_feedback(m)] == fenced
                results.append([(m.type, feedback_text(m) or m.text) for m in out["messages"]])
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
    # an attempt with its feedback: the answer, the feedback and the fence around it
    attempt = 1500 + len(review("Review 1: ".ljust(300, "y"), 1))
    assert long_answers.sent["full"] == [400 + i * attempt for i in range(6)]
    assert long_answers.sent["last_attempt"] == [400] + [400 + attempt] * 5
    assert long_answers.sent["function: last two attempts"] == [
        400,
        400 + attempt,
        *[400 + 2 * attempt] * 4,
    ]
    log = long_answers.sent["feedback_log"]
    assert log[0] == 400
    # after the header, every iteration adds one entry of the same size
    assert all(b - a == log[2] - log[1] for a, b in itertools.pairwise(log[1:]))
    assert long_answers.share_of_full("last_attempt") <= 0.40
    song_attempt = 80 + len(review("Review 1: ".ljust(260, "y"), 1))
    assert song.sent["last_attempt"] == [364] + [364 + song_attempt] * 5
    assert song.share_of_full("last_attempt") > 0.40  # the request dominates short loops
    for economy in (long_answers, song):
        # compaction keeps every prompt within its budget (characters, here) and sends
        # less than full once the budget is reached
        compacted = economy.sent[context.COMPACTING]
        assert max(compacted) <= economy.shape.budget < max(economy.sent["full"])
        assert compacted[:2] == economy.sent["full"][:2]
        assert economy.summarizer_calls == 4  # iterations 3 to 6 summarize one attempt each
    rendered = context.context_table([long_answers, song])
    assert rendered.count("\n") == 1 + 2 * len(context.POLICIES)


def test_prompt_caching_numbers():
    results = context.measure_caching()
    by_key = {(c.shape.name, c.policy, c.feedback_format): c for c in results}
    assert len(by_key) == len(context.SHAPES) * len(context.POLICIES) * 2
    for shape in context.SHAPES:
        default = by_key[(shape.name, "full", "fenced (default)")]
        assert len(default.agent) == len(default.judge) == context.ITERATIONS
        # all that each role was sent before is in the cacheable prefix of its next prompt
        assert all(call.reuse == 1.0 for call in [*default.agent, *default.judge])
        assert default.agent[0].cached == default.judge[0].cached == 0
        for before, now in itertools.pairwise(default.agent):
            assert now.cached == before.prompt
        # the judge: the rubric and the request (and the attempts' common first characters)
        judge_cached = {call.cached for call in default.judge[1:]}
        assert len(judge_cached) == 1
        assert judge_cached.pop() > len(context.RUBRIC) + shape.request
        # caching makes every loop cheaper, and full's extra cost over last_attempt smaller
        last = by_key[(shape.name, "last_attempt", "fenced (default)")]
        assert default.cost() < default.cost(cached_pricing=False)
        uncached_gap = default.cost(cached_pricing=False) / last.cost(cached_pricing=False)
        assert 1 < default.cost() / last.cost() < uncached_gap
        # a sliding window moves the prompt's start: the earlier attempts are not cacheable
        window = by_key[(shape.name, "function: last two attempts", "fenced (default)")]
        assert min(call.reuse for call in window.agent) < 0.6
    rendered = context.caching_table(results)
    assert rendered.count("\n") == 1 + len(results)


def test_table_layout():
    assert table(["name", "time"], [["a", "1,000 µs"], ["bb", "2 µs"]]).splitlines() == [
        "| name |     time |",
        "|------|---------:|",
        "| a    | 1,000 µs |",
        "| bb   |     2 µs |",
    ]


@pytest.mark.slow  # runs the benchmark's loops (SQLite, hundreds of iterations)
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
    assert storage.targets(results)[0].startswith("6. sqlite: bytes per iteration at 4 are")


@pytest.mark.slow  # two processes of loops, one of them loop_agents at an older commit
def test_the_agent_state_benchmark_measures_before_and_after_on_the_same_run():
    results, notes = agent_state_storage.measure((2, 4), ("memory",))
    assert notes == [] or notes[0].startswith("before: `git archive")
    after = [r for r in results if r.contender == "after"]
    assert [r.select for r in after] == ["last", "best"]
    assert all(sorted(r.stored) == [2, 4] and min(r.stored.values()) > 0 for r in after)
    if not notes:  # the whole state in every checkpoint stores more
        before = [r for r in results if r.contender == "before"]
        assert all(b.stored[4] > a.stored[4] for a, b in zip(after, before, strict=True))
    rendered = agent_state_storage.files_table(results)
    assert "create_loop_agent (change sets)" in rendered
    assert "growth per doubling" in rendered
    assert agent_state_storage.targets(results)[0].startswith("6b. memory, select='last'")


def test_writing_the_report_keeps_the_effectiveness_section():
    from benchmarks.__main__ import with_kept_sections

    old = (
        "# Benchmarks\n\n## 1. Overhead\n\nold figures\n\n"
        "## Effectiveness\n\n| arm | rate |\n| single | 3% |\n\n## Targets\n\n- old\n"
    )
    new = with_kept_sections("# Benchmarks\n\n## 1. Overhead\n\nnew figures\n", old)
    assert "new figures" in new
    assert "old figures" not in new
    assert "- old" not in new
    assert new.endswith("## Effectiveness\n\n| arm | rate |\n| single | 3% |\n")
    assert with_kept_sections("# Benchmarks\n", "") == "# Benchmarks\n"


def _cache_result():
    from benchmarks import cache

    def run(arrangement, seconds, computed):
        loop = cache.LoopRun(arrangement, list(seconds))
        for iteration, (agent, judge) in enumerate(computed, start=1):
            first = iteration == 1
            loop.requests += [
                cache.Request(
                    "agent", iteration, 700 + 100 * iteration, agent, 790 if first else 110
                ),
                cache.Request("judge", iteration, 1600, judge, 1590 if first else 270),
            ]
        return loop

    runs = [
        run("shared", [30.0, 40.0, 44.0], [(800, 1600), (900, 1600), (1000, 1600)]),
        run("per role", [31.0, 10.0, 12.0], [(800, 1600), (120, 300), (130, 280)]),
        run("per role", [29.0, 14.0, 16.0], [(800, 1600), (120, 300), (130, 280)]),
        run("shared", [30.0, 50.0, 54.0], [(800, 1600), (900, 1600), (1000, 1600)]),
    ]
    speeds = [cache.ThreadSpeed(1, 250.0, 30.0), cache.ThreadSpeed(2, 300.0, 33.0)]
    return cache.CacheResult(runs, speeds, threads=1, load=[1.0, 2.0, 3.0, 4.0])


def test_the_cache_benchmark_counts_reused_tokens_and_compares_later_iterations():
    from benchmarks import cache

    result = _cache_result()
    per_role = result.runs[1]
    # 900 tokens, 780 from the cache, 110 new
    assert per_role.tokens(2, "agent") == (120, 780, 110, 900)
    assert per_role.tokens(3, "judge") == (280, 1320, 270, 1600)
    # iterations 2 and 3: per role 22 and 30 s (median 26), shared 84 and 104 s (median 94)
    assert cache.later_iterations(result, "per role") == 26.0
    assert cache.later_iterations(result, "shared") == 94.0
    assert cache.ratio(result) == 26.0 / 94.0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in
            cache.loop_table(result).splitlines()]  # fmt: skip
    assert len(rows) == 2 + 4 * 3
    assert rows[2] == ["shared", "1", "1", "30.0", "800", "0", "790", "1600", "0", "1590", "1.0"]
    assert rows[6] == [
        "per role", "1", "2", "10.0", "120", "780", "110", "300", "1300", "270", "2.0"
    ]  # fmt: skip
    # per role: 780 of 900 from the cache at iteration 2, at most 790 (all but 110 new)
    assert cache.shares(result, 2, "agent") == (780 / 900, 1 - 110 / 900)
    assert cache.shares(result, 3, "judge") == (1320 / 1600, 1 - 270 / 1600)
    assert cache.overhead(result) == 30  # the judge's 300 computed against 270 new
    shares = cache.share_table(result).splitlines()
    assert [cell.strip() for cell in shares[2].split("|")[1:-1]] == [
        "2", "86.7%", "87.8%", "81.2%", "83.1%"
    ]  # fmt: skip
    assert rows[-1][:3] == ["shared", "2", "3"]
    speeds = [[cell.strip() for cell in line.split("|")[1:-1]] for line in
              cache.threads_table(result).splitlines()[2:]]  # fmt: skip
    assert speeds == [["1", "250", "30.0", "1"], ["2", "300", "33.0", "1"]]


def test_the_cache_benchmark_counts_only_what_a_role_has_not_seen_as_new():
    from benchmarks.cache import _Exchange, new_text

    system = {"role": "system", "content": "Review the lyrics."}
    request = {"role": "user", "content": "Write a song."}

    def judge(attempt: str) -> _Exchange:
        sent = [system, request, {"role": "assistant", "content": attempt}]
        return _Exchange("judge", 0, "1", sent, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "Review", "arguments": '{"score": 40}'}}
        ]})  # fmt: skip

    assert new_text(judge("La la la."), None) == [
        "Review the lyrics.",
        "Write a song.",
        "La la la.",
    ]
    # the judge never read the new attempt; only where it departs from the old one is new
    assert new_text(judge("La la la, la."), judge("La la la.")) == [", la."]
    assert new_text(judge("Do re mi."), judge("La la la.")) == ["Do re mi."]
    assert new_text(judge("La la la."), judge("La la la.")) == []
    # the agent's own answer (the server's reply) is not new to it; the feedback is
    answer = {"role": "assistant", "content": "La la la."}
    first = _Exchange("agent", 0, "1", [request], answer)
    feedback = {"role": "user", "content": "More verses."}
    second = _Exchange("agent", 0, "1", [request, answer, feedback], answer)
    assert new_text(second, first) == ["More verses."]


def test_the_cache_benchmark_is_skipped_with_a_reason_without_the_local_extra(monkeypatch):
    from benchmarks import cache
    from benchmarks.__main__ import QUICK, run
    from loop_agents_cli.models import local_model

    monkeypatch.setattr(local_model, "missing_parts", lambda: ["llama-cpp-python"])
    assert "missing: llama-cpp-python" in (cache.skip_reason() or "")
    report = asyncio.run(run({"cache"}, QUICK))
    assert "## 7. Prompt caches on the bundled model" in report
    assert "skipped: the `local` extra is not installed (missing: llama-cpp-python)" in report


def test_the_cache_benchmark_reports_its_targets(monkeypatch):
    from benchmarks import cache
    from benchmarks.__main__ import QUICK, run

    async def measured(**_: object) -> object:
        return _cache_result()

    monkeypatch.setattr(cache, "skip_reason", lambda: None)
    monkeypatch.setattr(cache, "measure", measured)
    report = asyncio.run(run({"cache"}, QUICK))
    assert "| iteration | agent: prompt from cache |" in report
    assert "at least 81.2% of the judge's prompt served from the cache (target >= 90%; " in report
    assert "the most possible: 83.1%): **missed**" in report
    assert "at least 86.7% of the agent's prompt" in report
    assert "at most 30 tokens beyond the new messages' content" in report


def test_the_saver_benchmark_gives_every_loop_a_thread_of_its_own():
    from langgraph.checkpoint.memory import InMemorySaver

    from benchmarks.concurrency import _saver_starter

    saver = InMemorySaver()
    model, evaluator = FakeChat(), accept_at(2)
    ours = create_loop_agent(model, evaluator, 2, checkpointer=saver)
    minimal = minimal_langgraph_loop(model, evaluator, 2, checkpointer=saver)
    starters = [
        _saver_starter(ours, saver, False, 3, None, tag="ours"),
        _saver_starter(minimal, saver, False, 3, None, tag="minimal"),
        _saver_starter(minimal, saver, True, 3, 2, tag="guarded"),
    ]

    async def rounds() -> list[object]:
        return [await start() for _ in range(2) for start in starters]

    batches = asyncio.run(rounds())
    # 2 rounds x 3 starters x 3 loops, none resuming another's thread: each ran 2 iterations
    assert len(saver.storage) == 18
    for done in batches:
        assert [len(out["messages"]) for out in done] == [4, 4, 4]  # type: ignore[attr-defined]


def test_the_middleware_benchmark_compares_the_same_loop_both_ways():
    from benchmarks import middleware

    async def run() -> list[Any]:
        runs = middleware.contenders(4)
        return [await runs[middleware.INSIDE](), await runs[middleware.AROUND]()]

    inside, around = asyncio.run(run())
    assert texts(inside["messages"]) == texts(around["messages"])
    assert len(inside["messages"]) == 8
    assert [r["stop"] for r in inside["loop_records"]] == [r["stop"] for r in around["records"]]
    assert inside["loop_stop_reason"] == around["stop_reason"] == "accepted"
