"""Benchmark 7: prompt caches and threads on the bundled llama.cpp server (the ``local`` extra).

The Song-lyrics loop with its real prompts, 3 iterations, on SmolLM2-135M:

- **shared**: one server process for the composer and the reviewer (the arrangement before
  `loop_agents_cli.models.local_model.LocalModelPair`): each request follows the other role's,
  so llama.cpp finds almost no cached prefix and computes nearly the whole prompt;
- **per role**: `LocalModelPair`, one process per role on the same GGUF file.

The reviewer is wrapped so that it never accepts (its review still goes back to the
composer): every run has exactly 3 iterations. For every request the table counts the
prompt tokens the server reports (``usage.prompt_tokens`` of the answer, not streamed) and
the tokens llama.cpp computed for it (its ``prompt eval`` counter, logged per completion by
a server started with ``timings=True``); reused = prompt - computed: the prefix taken from
the KV cache. Seconds per iteration are the loop's own records (the composer's call plus
the review, retries included).

Then tokens/s of one server at 1 and at 2 threads: the composer's first prompt (nothing
cached: a fresh server per measurement), 64 tokens generated.

Run it alone with ``python -m benchmarks --only cache`` (a few minutes).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from benchmarks.measure import table
from loop_agents import create_loop_agent
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_cli.demos import song_lyrics
from loop_agents_cli.demos.prompts import composer_system_message, prompt
from loop_agents_cli.models import local_model
from loop_agents_cli.models.llama_cpp_http import LlamaCppTransport
from loop_agents_cli.models.local_model import LocalModelPair, LocalModelServer, Role

ITERATIONS = 3
THREADS = (1, 2)
GENERATED = 64
"""Tokens generated per thread measurement."""

Arrangement = Literal["shared", "per role"]


def skip_reason() -> str | None:
    """Why the benchmark cannot run here (the ``local`` extra is missing), else ``None``."""
    missing = local_model.missing_parts()
    if not missing:
        return None
    return (
        f"skipped: the `local` extra is not installed (missing: {', '.join(missing)}); "
        f"install it with `make local`"
    )


@dataclass(frozen=True)
class Request:
    """One chat request of the loop: who sent it, its prompt, what the server computed."""

    role: Role
    iteration: int
    prompt_tokens: int
    computed: int
    new: int
    """Tokens of the messages that role had neither sent nor received before (content only,
    without the chat template): what no cache can serve."""

    @property
    def reused(self) -> int:
        """Prompt tokens taken from the KV cache."""
        return self.prompt_tokens - self.computed


@dataclass
class LoopRun:
    """One 3-iteration loop in one arrangement."""

    arrangement: Arrangement
    seconds: list[float] = field(default_factory=list)
    """Per iteration: the composer's call plus the review."""
    requests: list[Request] = field(default_factory=list)

    def tokens(self, iteration: int, role: Role) -> tuple[int, int, int, int]:
        """(computed, reused, new, prompt) tokens of ``role``'s requests in ``iteration``."""
        mine = [r for r in self.requests if r.iteration == iteration and r.role == role]
        return (
            sum(r.computed for r in mine),
            sum(r.reused for r in mine),
            sum(r.new for r in mine),
            sum(r.prompt_tokens for r in mine),
        )


@dataclass(frozen=True)
class ThreadSpeed:
    """One server's speed at ``threads`` threads, on a prompt with nothing cached."""

    threads: int
    prompt_per_second: float
    generated_per_second: float


@dataclass
class CacheResult:
    """Everything the benchmark measured."""

    runs: list[LoopRun]
    speeds: list[ThreadSpeed]
    threads: int
    load: list[float]
    """The 1-minute load average before each loop run."""


@dataclass(frozen=True)
class _Exchange:
    """One chat request as sent, and the server's reply."""

    role: Role
    prompt_tokens: int
    port: str
    messages: list[dict[str, Any]]
    reply: dict[str, Any]


class _Sent:
    """The chat requests of one role, in order, with the prompt tokens the server reported."""

    def __init__(self, role: Role, log: list[_Exchange]) -> None:
        self.role = role
        self.log = log

    async def __call__(self, response: httpx.Response) -> None:
        if not response.request.url.path.endswith("/chat/completions"):
            return
        await response.aread()
        answer = response.json()
        usage = answer.get("usage") or {}
        self.log.append(
            _Exchange(
                self.role,
                int(usage["prompt_tokens"]),
                str(response.request.url.port),
                json.loads(response.request.content)["messages"],
                ((answer.get("choices") or [{}])[0].get("message")) or {},
            )
        )


def _text(message: dict[str, Any]) -> str:
    """What a message holds for the model: its text and its tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content)
    calls = [
        f"{call['function']['name']}({call['function']['arguments']})"
        for call in message.get("tool_calls") or []
    ]
    return "\n".join([str(content or ""), *calls]).strip()


def new_text(exchange: _Exchange, before: _Exchange | None) -> list[str]:
    """What ``exchange`` holds that its role neither sent nor received the time ``before``:
    the messages after the longest run it shares with those, the first of them only from
    where its text departs from the earlier message in its place."""
    seen = [*before.messages, before.reply] if before is not None else []
    for index, sent in enumerate(exchange.messages):
        known = seen[index] if index < len(seen) else None
        text = _text(sent)
        if known is None or sent.get("role") != known.get("role"):
            return [text, *(_text(m) for m in exchange.messages[index + 1 :])]
        if text != _text(known):
            common = next(
                (i for i, (a, b) in enumerate(zip(text, _text(known), strict=False)) if a != b),
                min(len(text), len(_text(known))),
            )
            return [text[common:], *(_text(m) for m in exchange.messages[index + 1 :])]
    return []


def _client(hook: _Sent) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=LlamaCppTransport(llama_cpp_server=True),
        trust_env=False,
        timeout=None,
        event_hooks={"response": [hook]},
    )


async def run_loop(arrangement: Arrangement, threads: int) -> LoopRun:
    """The Song-lyrics loop for `ITERATIONS` iterations on the bundled model."""
    log: list[_Exchange] = []
    servers: dict[Role, LocalModelServer]
    if arrangement == "shared":
        shared = LocalModelServer(n_threads=threads, timings=True)
        servers = {"agent": shared, "judge": shared}
        stop: Callable[[], None] = shared.stop
        shared.start()
    else:
        pair = LocalModelPair(n_threads=threads, timings=True).start()
        servers = {"agent": pair.agent, "judge": pair.judge}
        stop = pair.stop
    try:
        cap = song_lyrics.LOCAL_MAX_TOKENS
        agent_client = _client(_Sent("agent", log))
        judge_client = _client(_Sent("judge", log))
        review = song_lyrics.reviewer(
            servers["judge"].settings(max_tokens=cap), http_async_client=judge_client
        )

        async def never_accept(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
            evaluation: LoopEvaluation = await review.ainvoke(context, config)
            return {**evaluation, "stop": False}

        loop = create_loop_agent(
            song_lyrics.composer(
                servers["agent"].settings(max_tokens=cap), http_async_client=agent_client
            ),
            RunnableLambda(never_accept, name="review, never accepted"),
            ITERATIONS,  # a repair loop: every retry extends the conversation the cache holds
        )
        result: Any = await loop.ainvoke({"messages": [HumanMessage(prompt)]})
        await agent_client.aclose()
        await judge_client.aclose()
        timings = {
            str(server.port): server.completion_timings() for server in set(servers.values())
        }
        last: dict[Role, _Exchange] = {}
        new: list[int] = []
        for exchange in log:
            unseen = new_text(exchange, last.get(exchange.role))
            new.append(sum(servers[exchange.role].count_tokens(t) for t in unseen if t))
            last[exchange.role] = exchange
    finally:
        stop()
    run = LoopRun(arrangement)
    run.seconds = [r["agent_seconds"] + r["evaluation_seconds"] for r in result["records"]]
    agent_iteration = 0
    for exchange, new_tokens in zip(log, new, strict=True):
        agent_iteration += exchange.role == "agent"
        computed = timings[exchange.port].pop(0).prompt_tokens
        run.requests.append(
            Request(exchange.role, agent_iteration, exchange.prompt_tokens, computed, new_tokens)
        )
    if any(timings.values()):
        raise RuntimeError("the servers logged more completions than the loop sent requests")
    return run


async def thread_speed(threads: int) -> ThreadSpeed:
    """A fresh server's speed on the composer's first prompt at ``threads`` threads."""
    with LocalModelServer(n_threads=threads, timings=True) as server:
        model = server.chat_model(max_tokens=GENERATED, temperature=0)
        await model.ainvoke([composer_system_message, HumanMessage(prompt)])
        first = server.completion_timings()[0]
    return ThreadSpeed(
        threads,
        first.prompt_tokens / first.prompt_seconds,
        first.generated_tokens / first.generation_seconds,
    )


async def measure(*, rounds: int = 1, threads: int | None = None) -> CacheResult:
    """Run both arrangements ``rounds`` times (alternating), then the thread speeds."""
    threads = threads or local_model.default_threads()
    runs: list[LoopRun] = []
    load: list[float] = []
    order: list[Arrangement] = ["shared", "per role"]
    for number in range(rounds):
        for arrangement in order if number % 2 == 0 else order[::-1]:
            load.append(os.getloadavg()[0])
            runs.append(await run_loop(arrangement, threads))
    speeds: list[ThreadSpeed] = []
    for number in range(rounds):
        for count in THREADS if number % 2 == 0 else THREADS[::-1]:
            speeds.append(await thread_speed(count))
    return CacheResult(runs, speeds, threads, load)


def later_iterations(result: CacheResult, arrangement: Arrangement) -> float:
    """Median over runs of the seconds of iterations 2 and 3."""
    return statistics.median(
        sum(run.seconds[1:]) for run in result.runs if run.arrangement == arrangement
    )


def ratio(result: CacheResult) -> float:
    """Per role's iterations 2-3 over shared's (median seconds): the target is <= 0.5."""
    return later_iterations(result, "per role") / later_iterations(result, "shared")


def loop_table(result: CacheResult) -> str:
    """One row per run and iteration."""
    rows: list[list[object]] = []
    for number, run in enumerate(result.runs):
        for index, seconds in enumerate(run.seconds, start=1):
            agent = run.tokens(index, "agent")
            judge = run.tokens(index, "judge")
            rows.append(
                [
                    run.arrangement,
                    number // 2 + 1,
                    index,
                    f"{seconds:.1f}",
                    agent[0],
                    agent[1],
                    agent[2],
                    judge[0],
                    judge[1],
                    judge[2],
                    f"{result.load[number]:.1f}",
                ]
            )
    return table(
        [
            "arrangement",
            "round",
            "iteration",
            "seconds",
            "agent computed",
            "agent reused",
            "agent new",
            "judge computed",
            "judge reused",
            "judge new",
            "load",
        ],
        rows,
    )


def shares(result: CacheResult, iteration: int, role: Role) -> tuple[float, float]:
    """Per role (median over runs): the share of ``role``'s prompt in ``iteration`` taken
    from the cache, and the most any cache could serve (all but the new messages)."""
    runs = [run.tokens(iteration, role) for run in result.runs if run.arrangement == "per role"]
    reused = statistics.median(r[1] / r[3] for r in runs)
    ceiling = statistics.median(1 - r[2] / r[3] for r in runs)
    return reused, ceiling


def share_table(result: CacheResult) -> str:
    """Per role, iterations 2..: reused share against the most a cache could serve."""
    rows: list[list[object]] = []
    for iteration in range(2, ITERATIONS + 1):
        row: list[object] = [iteration]
        for role in ("agent", "judge"):
            reused, ceiling = shares(result, iteration, role)
            row += [f"{reused:.1%}", f"{ceiling:.1%}"]
        rows.append(row)
    return table(
        [
            "iteration",
            "agent: prompt from cache",
            "agent: at most (all but new)",
            "judge: prompt from cache",
            "judge: at most (all but new)",
        ],
        rows,
    )


def overhead(result: CacheResult) -> int:
    """The most tokens any per-role request of iteration 2.. computed beyond its new
    messages' content (chat-template tokens around them)."""
    return max(
        request.computed - request.new
        for run in result.runs
        if run.arrangement == "per role"
        for request in run.requests
        if request.iteration >= 2
    )


def threads_table(result: CacheResult) -> str:
    """Median tokens/s per thread count."""
    rows: list[list[object]] = []
    for count in THREADS:
        mine = [s for s in result.speeds if s.threads == count]
        rows.append(
            [
                count,
                f"{statistics.median(s.prompt_per_second for s in mine):.0f}",
                f"{statistics.median(s.generated_per_second for s in mine):.1f}",
                len(mine),
            ]
        )
    return table(["threads", "prompt tokens/s", "generated tokens/s", "runs"], rows)
