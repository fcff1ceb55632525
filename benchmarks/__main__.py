"""Run the benchmarks, print their tables and (with ``--write``) save them as Markdown.

```
python -m benchmarks                       # all eight, about 75 minutes (savers: 45)
python -m benchmarks --quick               # fewer rounds and loops, for a smoke run
python -m benchmarks --write BENCHMARKS.md
python -m benchmarks --only overhead,context
python -m benchmarks --only savers         # needs PostgreSQL (tests/savers.py starts one)
python -m benchmarks --only storage        # needs git (the "before" loop) and PostgreSQL
python -m benchmarks --only cache          # needs the local extra (make local); minutes
python -m benchmarks --only middleware     # LoopMiddleware against create_loop_agent
```
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import (
    agent_state_storage,
    cache,
    concurrency,
    context,
    middleware,
    overhead,
    startup,
    storage,
)
from benchmarks.measure import machine

PARTS = (
    "overhead",
    "concurrency",
    "savers",
    "context",
    "scaling",
    "startup",
    "storage",
    "cache",
    "middleware",
)


@dataclass(frozen=True)
class Plan:
    """How much to run: rounds per loop length (benchmarks 1 and 4), loops at once,
    loop lengths and runs of benchmark 5."""

    overhead_rounds: dict[int, int]
    long_rounds: dict[int, int]
    loops: int
    concurrency_rounds: int
    storage_sizes: tuple[int, int] = (50, 400)
    storage_runs: int = 5
    file_sizes: tuple[int, ...] = agent_state_storage.SIZES
    saver_loops: int = 1000
    saver_rounds: int = 5
    cache_rounds: int = 2


FULL = Plan({5: 60, 50: 25}, {500: 3}, loops=200, concurrency_rounds=7)
QUICK = Plan(
    {5: 5, 50: 2},
    {500: 1},
    loops=50,
    concurrency_rounds=1,
    storage_sizes=(5, 20),
    storage_runs=1,
    file_sizes=(4, 8),
    saver_loops=100,
    saver_rounds=1,
    cache_rounds=1,
)


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


async def run(parts: set[str], plan: Plan) -> str:
    """Run the chosen benchmarks; return the report (Markdown)."""
    out: list[str] = []
    targets: list[str] = []
    started = time.perf_counter()

    def emit(*lines: str) -> None:
        for line in lines:
            print(line, flush=True)
            out.append(line)

    emit("# Benchmarks", "", "Measured with `make bench` (`python -m benchmarks`) on:", "")
    emit(*machine())
    results: list[overhead.Overhead] = []
    if parts & {"overhead", "scaling"}:
        results = [
            await overhead.measure(n, r, with_history_policy=True)
            for n, r in plan.overhead_rounds.items()
        ]
    if "overhead" in parts:
        emit(
            "",
            "## 1. Overhead per iteration",
            "",
            "An instant fake chat model; the evaluator accepts the last allowed answer. CPU",
            "time of this process per iteration (median of interleaved runs). vs minimal:",
            "for create_loop_agent (and with Adaptive()), the median over rounds of its time",
            "over the minimal loop's in the same round (for the others, the ratio of",
            "medians); best vs best:",
            "the fastest run over the minimal loop's fastest run. `create_loop_agent` is",
            "the default loop, every retry a repair as in the minimal loop; with `Adaptive()`",
            "it learns which kind of retry pays.",
            "",
            overhead.overhead_table(results),
        )
        for result in results:
            targets.append(
                f"1. overhead at {result.iterations} iterations: {result.ratio:.2f}x the "
                f"minimal LangGraph loop (target <= 1.03x): {_verdict(result.ratio <= 1.03)}"
            )
    if "concurrency" in parts:
        loads = await concurrency.measure(loops=plan.loops, rounds=plan.concurrency_rounds)
        emit(
            "",
            "## 2. Concurrency",
            "",
            f"{plan.loops} loops of 3 iterations at once; the fake model waits 50 ms per",
            "call (so a loop alone takes about 150 ms). Wall and CPU time of the whole batch",
            "(median of interleaved rounds); ticker max lag: how late a 5 ms ticker woke;",
            "callbacks: those that held the event loop >= 20 ms in an asyncio debug-mode",
            "run (garbage collector paused); peak memory: tracemalloc peak of a separate run.",
            "",
            concurrency.concurrency_table(loads, plan.loops),
        )
        for how in ("abatch", "gather"):
            ratio = concurrency.wall_ratio(loads, how)
            targets.append(
                f"2. {plan.loops} loops with {how}: {ratio:.2f}x the minimal loop's wall time "
                f"(target <= 1.15x): {_verdict(ratio <= 1.15)}"
            )
        slow = [s for load in loads.values() for s in load.slow_callbacks]
        targets.append(
            f"2. callbacks that held the event loop >= {concurrency.SLOW_CALLBACK * 1e3:.0f} "
            f"ms: {len(slow)} (target: none that blocks): {_verdict(not slow)}"
        )
    if "savers" in parts:
        from tests.savers import PostgresCluster

        cluster = PostgresCluster({"max_connections": 100})
        cluster.start()
        try:
            walls = await concurrency.measure_savers(
                loops=plan.saver_loops, rounds=plan.saver_rounds, server=cluster.url
            )
        finally:
            cluster.stop()
        emit(
            "",
            "## 2b. Concurrency on a checkpointer",
            "",
            f"{plan.saver_loops} loops of 3 iterations, each on a thread of its own, on one",
            "saver: InMemorySaver, AsyncSqliteSaver on a file in /dev/shm, AsyncPostgresSaver",
            "(one connection) on a private PostgreSQL cluster with max_connections=100 and",
            "fsync off; the fake model waits 50 ms per call. All at once (asyncio.gather), and",
            f"{concurrency.CAP} at a time (a semaphore). Wall time of the batch, median of",
            f"{plan.saver_rounds} interleaved rounds; vs minimal: the median of the rounds'",
            "ratios to the hand-written loop on the same saver. The middle row of each group",
            "is the hand-written loop run inside `athread_guard`: the guard's own cost. This",
            "section alone: `python -m benchmarks --only savers`.",
            "",
            concurrency.savers_table(walls, plan.saver_loops),
        )
        for key in walls:
            if key.loop != concurrency.MINIMAL:
                ratio = concurrency.saver_ratio(walls, key)
                cap = "all at once" if key.cap is None else f"{key.cap} at a time"
                targets.append(
                    f"2b. {key.saver}, {cap}, {key.loop}: {ratio:.2f}x the minimal loop's "
                    f"wall time (target <= 1.30x): {_verdict(ratio <= 1.30)}"
                )
    if "context" in parts:
        economies = context.measure()
        emit(
            "",
            "## 3. Context economy",
            "",
            f"Characters sent to the agent on each of {context.ITERATIONS} iterations, per",
            "history policy (deterministic). With a request of R characters and attempts",
            "with their feedback of A, full sends 6R + 15A over 6 iterations and last_attempt",
            "6R + 5A (the request is always sent): at most 40% when A >= 3.6R. The",
            "Song-lyrics demo's request is about as large as its poems and reviews, so there",
            "last_attempt saves less. Feedback is sent fenced (the default feedback_format:",
            "about 290 characters around the evaluator's text). compacting counts",
            "characters here (token_counter), so its budget is in the table's unit; its fake",
            f"summarizer writes {context.SUMMARY_CHARS}-character summaries, and what it is",
            "sent (the request, the previous summary, the attempt to add, its review) is in",
            "the last column.",
            "",
            context.context_table(economies),
        )
        for economy in economies:
            share = economy.share_of_full("last_attempt")
            targets.append(
                f"3. {economy.shape.name}: last_attempt sends {share:.0%} of full "
                f"(target <= 40%): {_verdict(share <= 0.40)}"
            )
        caching = context.measure_caching()
        prices = context.PRICES
        emit(
            "",
            "### Prompt caching",
            "",
            "How much of each prompt a provider's prefix cache can serve: the share of the",
            "prompt's characters that begin like a prompt the same model was sent before",
            "(measured on the messages the fake models were sent: role, text and tool calls,",
            "which is what a provider receives; ids are not sent). The judge is `llm_judge`",
            f"with a {len(context.RUBRIC)}-character rubric, sent the rubric, the request and",
            "the attempt. 'whole loop' is the share of all the role's prompt characters;",
            "'repeated part cached' is, for the worst iteration, the share of the messages",
            "the role had already been sent that lie in the cacheable prefix (100%: the",
            "layout loses nothing to the cache). Cost per 1,000 loops of 6 iterations, agent,",
            f"judge and summarizer, at {context.CHARS_PER_TOKEN} characters a token and",
            f"${prices['input']} input, ${prices['cached_input']} cached input, "
            f"${prices['output']} output per million",
            "tokens (OpenAI-style cached pricing, gpt-5-mini's list prices); the answers",
            "(1,500 or 80 characters) and reviews are the output. This section alone:",
            "`python -m benchmarks --only context`.",
            "",
            context.caching_table(caching),
        )
        for cached in caching:
            if cached.policy == "full" and cached.feedback_format == "fenced (default)":
                reuse = min(c.reuse for c in [*cached.agent, *cached.judge])
                targets.append(
                    f"3b. {cached.shape.name}, defaults: {reuse:.0%} of what the agent and the "
                    f"judge were sent before is cacheable (target >= 90%): "
                    f"{_verdict(reuse >= 0.90)}"
                )
    if "scaling" in parts:
        scaled = results + [
            await overhead.measure(n, r, with_history_policy=True)
            for n, r in plan.long_rounds.items()
        ]
        emit(
            "",
            "## 4. Scaling",
            "",
            "CPU time per iteration by loop length (median of interleaved runs; the first",
            "columns are benchmark 1's runs); growth is the per-iteration time at the",
            "longest loop over the shortest.",
            "",
            overhead.scaling_table(scaled),
        )
    if "startup" in parts:
        started_up = startup.measure(rounds=3 if plan is QUICK else 7)
        emit(
            "",
            "## 5. Start-up of the command",
            "",
            "Wall time of a fresh `loop-agents` process (median of interleaved rounds),",
            "against an empty Python start and against importing what a run needs.",
            "",
            startup.startup_table(started_up),
        )
        slowest = max(started_up.median[name] for name in startup.COMMAND_ROWS)
        targets.append(
            f"5. `loop-agents --help`/`--version`: {slowest * 1e3:.0f} ms (target <= "
            f"{startup.TARGET_SECONDS * 1e3:.0f} ms): {_verdict(started_up.met())}"
        )
    if "storage" in parts:
        short, long = plan.storage_sizes
        runs, notes = await asyncio.to_thread(
            storage.measure, plan.storage_sizes, plan.storage_runs
        )
        emit(
            "",
            "## 6. Checkpoint storage",
            "",
            f"A loop of {short} and one of {long} iterations per run, each on a fresh",
            "database: AsyncSqliteSaver on a file in /dev/shm, AsyncPostgresSaver on a",
            f"private PostgreSQL {storage.postgres_version()} cluster with fsync off (no",
            "disk latency in either); ainvoke with the default durability; answers of",
            f"{storage.ANSWER_CHARS} characters of words, the same feedback every time.",
            "B/it.: bytes stored per iteration (the savers' payload columns); disk: the",
            "database's size (SQLite file; PostgreSQL tables with TOAST and indexes);",
            f"ms/it.: wall time per iteration (median of {plan.storage_runs} runs); CPU",
            "growth: the same for this process's CPU time (PostgreSQL's work is in its",
            "server); read ms: a new connection's `aget_state` of the thread (what",
            f"resuming it costs). `before` is loop_agents at {storage.BEFORE}, imported in",
            "place of the tree's; each contender runs in a process of its own. This",
            "section alone: `python -m benchmarks --only storage`.",
            "",
            storage.storage_table(runs),
            *([""] + [f"- {note}" for note in notes] if notes else []),
        )
        targets.extend(storage.targets(runs))
        file_runs, file_notes = await asyncio.to_thread(
            agent_state_storage.measure, plan.file_sizes
        )
        emit(
            "",
            "### 6b. A graph agent's state",
            "",
            "A graph agent built like a deep agent (its files in its state, given back on",
            "every attempt) adds one file of 2-20 kB per attempt; loops of "
            + ", ".join(map(str, plan.file_sizes)),
            'iterations that the evaluator never accepts, with `select="last"` and',
            '`select="best"`, each on a fresh database: the two savers above and',
            "InMemorySaver. Bytes: as above (in memory: the serialized values the saver",
            "keeps). Growth per doubling: the bytes at each length over those at the one",
            f"before (target <= {agent_state_storage.TARGET_GROWTH}x). `before` is",
            f"loop_agents at {agent_state_storage.BEFORE} (the agent state stored whole in",
            "every checkpoint that changes it, and whole in every kept iteration), imported",
            "in place of the tree's, in the same run. This part alone:",
            "`python -m benchmarks.agent_state_storage`.",
            "",
            agent_state_storage.files_table(file_runs),
            *([""] + [f"- {note}" for note in file_notes] if file_notes else []),
        )
        targets.extend(agent_state_storage.targets(file_runs))
    if "cache" in parts:
        emit(
            "",
            "## 7. Prompt caches on the bundled model",
            "",
            "The Song-lyrics loop (its real prompts; the review never accepts, so 3",
            "iterations) on SmolLM2-135M: one llama.cpp server process for the composer and",
            "the reviewer (shared, as before) against one process per role (per role,",
            "`LocalModelPair`), alternating. Seconds: the loop's records (composer call plus",
            "review). Computed: prompt tokens llama.cpp evaluated (its per-completion",
            "`prompt eval` counter); reused: the prompt tokens the server reported minus",
            "those, i.e. the prefix taken from the KV cache; new: the tokens of the",
            "messages that role had neither sent nor received before (their content, by",
            "the server's tokenizer, without the chat template). Load: the 1-minute load",
            "average before the run (2 cores shared with other work). Then tokens/s of a",
            "fresh server at 1 and 2 threads on the composer's first prompt. This section",
            "alone: `python -m benchmarks --only cache`.",
            "",
        )
        reason = cache.skip_reason()
        if reason is not None:
            emit(reason)
        else:
            measured = await cache.measure(rounds=plan.cache_rounds)
            emit(
                f"Threads per server process: {measured.threads} (the default).",
                "",
                cache.loop_table(measured),
                "",
                "Per role, the share of each prompt served from the KV cache against the",
                "most any cache could serve: everything but the messages new to that role",
                "(the agent's new feedback; the judge's new attempt, which it has not read).",
                "",
                cache.share_table(measured),
                "",
                cache.threads_table(measured),
            )
            share = cache.ratio(measured)
            for role in ("agent", "judge"):
                served = [cache.shares(measured, n, role) for n in range(2, cache.ITERATIONS + 1)]
                low, most = min(s[0] for s in served), min(s[1] for s in served)
                targets.append(
                    f"7. per role, iterations 2-3: at least {low:.1%} of the {role}'s prompt "
                    f"served from the cache (target >= 90%; the most possible: {most:.1%}): "
                    f"{_verdict(low >= 0.9)}"
                )
            extra = cache.overhead(measured)
            targets.append(
                f"7. per role, iterations 2-3 compute only what is new to the role: at most "
                f"{extra} tokens beyond the new messages' content (chat-template tokens; "
                f"target <= 32): {_verdict(extra <= 32)}"
            )
            targets.append(
                f"7. iterations 2-3 per role: {share:.0%} of the shared server's time "
                f"(target <= 50%): {_verdict(share <= 0.5)}"
            )
    if "middleware" in parts:
        inside = [await middleware.measure(n, r) for n, r in plan.overhead_rounds.items()]
        emit(
            "",
            "## 8. The loop inside create_agent",
            "",
            "The same loop (every retry a repair, the default) on the same instant",
            "fake chat model and async evaluator (it accepts the last allowed answer):",
            "`create_agent(model, middleware=[LoopMiddleware(evaluator, n)])` against",
            "`create_loop_agent(create_agent(model), evaluator, n)`. CPU time of this process",
            "per iteration (median of interleaved runs); vs around: the median over rounds of",
            "the middleware's time over the wrapped loop's in the same round; vs hook: the same",
            "over a 15-line after_agent hook that asks the evaluator and jumps back to the",
            "model (the least loop inside create_agent: no records, budgets, events or",
            "resume), without and with a checkpointer (InMemorySaver, a thread per run), and",
            "beside a model-call hook that only passes the call on (what create_agent adds to",
            "an agent with one). This section alone: `python -m benchmarks --only middleware`.",
            "",
            middleware.middleware_table(inside),
        )
        for each in inside:
            targets.append(
                f"8. LoopMiddleware at {each.iterations} iterations: {each.ratio:.2f}x "
                f"the CPU time of create_loop_agent(create_agent(...)) (target < 1.0x): "
                f"{_verdict(each.ratio < 1.0)}"
            )
            for ratio, saver in ((each.hook_ratio, ""), (each.saved_hook_ratio, ", InMemorySaver")):
                targets.append(
                    f"8. LoopMiddleware at {each.iterations} iterations{saver}: {ratio:.2f}x "
                    f"the CPU time of a 15-line after_agent hook (target <= 1.3x): "
                    f"{_verdict(ratio <= 1.3)}"
                )
            targets.append(
                f"8. of that, at {each.iterations} iterations: a pass-through awrap_model_call "
                f"costs the hook {each.wrap_ratio:.2f}x (create_agent runs it as a LangSmith "
                f"traceable); LoopMiddleware is {each.wrapped_hook_ratio:.2f}x the hook beside one"
            )
    emit("", "## Targets", "", *[f"- {t}" for t in targets])
    emit("", f"Total time: {time.perf_counter() - started:.0f} s.")
    return "\n".join(out) + "\n"


KEPT_SECTIONS = ("## Effectiveness",)
"""Sections of the written file that these benchmarks do not measure: ``--write`` keeps them.

The effectiveness figures come from ``loop-agents eval`` runs that take hours on the bundled
model; they are written by hand from those runs' output and survive a new benchmark run.
"""


def with_kept_sections(report: str, previous: str) -> str:
    """``report`` followed by the `KEPT_SECTIONS` of ``previous`` (the file's old text).

    Example:
        ```python
        old = "# Benchmarks\n## 1. Overhead\nold\n## Effectiveness\nfigures\n"
        new = with_kept_sections("# Benchmarks\n## 1. Overhead\nnew\n", old)
        assert new.endswith("## Effectiveness\nfigures\n") and "old" not in new
        ```

    """
    sections: list[str] = []
    keeping = False
    for line in previous.splitlines(keepends=True):
        if line.startswith("## "):
            keeping = line.rstrip() in KEPT_SECTIONS
            if keeping:
                sections.append("")
        if keeping:
            sections[-1] += line
    if not sections:
        return report
    return report.rstrip("\n") + "\n\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and loops")
    parser.add_argument("--write", metavar="PATH", help="also write the report to PATH")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}"
    )
    args = parser.parse_args()
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    unknown = parts - set(PARTS)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
    report = asyncio.run(run(parts, QUICK if args.quick else FULL))
    if args.write:
        target = Path(args.write)
        previous = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(with_kept_sections(report, previous), encoding="utf-8")
        print(f"\nwritten to {args.write}")


if __name__ == "__main__":
    main()
