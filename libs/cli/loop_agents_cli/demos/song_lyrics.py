"""The Song-lyrics demo: a composer writes a ci to the tune 相见欢, a reviewer scores it.

The composer is a ``create_agent`` agent, the reviewer an `llm_judge` scoring into
`Review`; the 相见欢 form check reads each draft first (unless ``LOOP_AGENTS_FORM_CHECK=0``).
Below `PASS_SCORE` the feedback goes back, at most `MAX_ITERATIONS` times; the best-scored
draft is the answer. Run it with ``loop-agents demo song-lyrics`` or
``python examples/song_lyrics.py``; docs/cli.md says what it shows.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

import httpx
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from loop_agents.controls.selection import AnswerSelection
from loop_agents.evaluators import all_of, llm_judge
from loop_agents.evaluators.judge import JudgeError
from loop_agents.hosts.graph import create_loop_agent
from loop_agents.hosts.loop_agent import LoopAgent
from loop_agents.loop.evaluation import Evaluator, LoopEvaluatorRunnable
from loop_agents.loop.records import choose, record_answer
from loop_agents.loop.state import LoopOutput
from loop_agents_cli.console.loop_console import LoopConsole, astream_to_console
from loop_agents_cli.console.output import section_header
from loop_agents_cli.demos.demo_settings import ReviewMethod, check_review_method
from loop_agents_cli.demos.demo_settings import (  # re-exported: the served graphs read it here
    form_check_from_env as form_check_from_env,
)
from loop_agents_cli.demos.prompts import composer_system_message, prompt, reviewer_system_message
from loop_agents_cli.demos.xiangjianhuan import xiangjianhuan_form
from loop_agents_cli.models import local_model
from loop_agents_cli.models.settings import ModelSettings, SettingsError

PASS_SCORE = 75
MAX_ITERATIONS = 3
REVIEW_RETRIES = 2
"""Times the reviewer is asked again when its review has no score from 0 to 100."""
REVIEW_TEMPLATE = "{feedback}\n\n综合得分：{score}"
"""The feedback the composer reads: the review's comments, then the score (the article's)."""
REVIEWER_NAME = "evaluate"
"""The reviewer's name in the records (the article's evaluator function is ``evaluate``)."""
LOCAL_MAX_TOKENS = 256
"""Token cap per answer on the offline model (``LOOP_AGENTS_MAX_TOKENS`` overrides it)."""


class Review(TypedDict):
    """评估结果"""  # noqa: D415 (the schema description sent to the model, as in the article)

    score: int
    """分数（百分制）"""
    feedback: str
    """评语"""


def build_loop(
    settings: ModelSettings,
    *,
    judge_settings: ModelSettings | None = None,
    http_async_client: httpx.AsyncClient | None = None,
    form_check: bool | None = None,
    checkpointer: Checkpointer = None,
) -> LoopAgent:
    """The composer/reviewer loop of the article, for the given model settings.

    ``judge_settings``: the reviewer's (default ``settings``; on the bundled server, the
    judge's own process); ``http_async_client``: for both models; ``form_check``: default
    `form_check_from_env`; ``checkpointer``: for `create_loop_agent`.

    Example:
        ```python
        result = await build_loop(ModelSettings.from_env()).ainvoke({"messages": [request]})
        ```
    """
    evaluator: Evaluator = reviewer(judge_settings or settings, http_async_client=http_async_client)
    if form_check_from_env() if form_check is None else form_check:
        evaluator = all_of(xiangjianhuan_form(), evaluator, name="form_then_review")
    return create_loop_agent(
        agent=composer(settings, http_async_client=http_async_client),
        evaluator=evaluator,
        max_iterations=MAX_ITERATIONS,
        # the article's loop: the reviewer's comments go back to the composer
        controls=[AnswerSelection("best")],
        checkpointer=checkpointer,
    )


def composer(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The article's composer: a ``create_agent`` agent with the composer's instructions.

    Example:
        ```python
        loop = create_loop_agent(composer(settings), reviewer(settings), 3)
        ```
    """
    return create_agent(
        model=settings.chat_model(**_client(http_async_client)),
        system_prompt=composer_system_message,
    )


def reviewer(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> LoopEvaluatorRunnable:
    """The article's reviewer: an `llm_judge` scoring into `Review`, accepting at `PASS_SCORE`.

    An unusable review is asked for again (`REVIEW_RETRIES` times), then `JudgeError` stops
    the loop; the feedback is the comments, then ``综合得分：N``.

    Example:
        ```python
        loop = create_loop_agent(composer, reviewer(ModelSettings.from_env()), 3)
        ```
    """
    check_review_method(settings.structured_output_method)
    method = cast(ReviewMethod, settings.structured_output_method)  # not "text": checked
    return llm_judge(
        settings.chat_model(**_client(http_async_client)),
        reviewer_system_message,
        threshold=PASS_SCORE,
        schema=Review,
        method=method,
        template=REVIEW_TEMPLATE,
        retries=REVIEW_RETRIES,
        name=REVIEWER_NAME,
    )


def _client(http_async_client: httpx.AsyncClient | None) -> dict[str, Any]:
    return {} if http_async_client is None else {"http_async_client": http_async_client}


def verdict(result: Mapping[str, Any], *, stop_reason: str | None = None) -> str:
    """A short account of the run: iterations, each try's score, why it stopped.

    ``stop_reason`` overrides the loop's own, for a run that did not finish.

    Example:
        ```python
        print(verdict(result))
        ```
    """
    records = result.get("records") or []
    scores = ", ".join(
        f"#{r['iteration']}: {r['score']:g}" if r["score"] is not None else f"#{r['iteration']}: -"
        for r in records
    )
    reasons = {
        "accepted": f"the reviewer accepted the ci (score >= {PASS_SCORE})",
        "max_iterations": f"the cap of {MAX_ITERATIONS} iterations was reached",
        "recursion_limit": "the graph's recursion limit left no room for another try",
        "judge_invalid": "the reviewer gave no usable review (score from 0 to 100)",
        "error": "an error stopped the run",
    }
    reason = stop_reason if stop_reason is not None else result.get("stop_reason")
    lines = [
        section_header("Verdict"),
        f"iterations: {result.get('iteration', 0)} of {MAX_ITERATIONS}",
        f"scores: {scores or 'none'}",
        f"stopped: {reasons.get(str(reason), str(reason))}",
    ]
    chosen = choose(records, "best") if records else None
    if chosen is not None:
        which = (
            "the last one: no draft has a score"
            if chosen["score"] is None
            else f"the best, score {chosen['score']:g}"
        )
        lines.append(f"answer: the draft of iteration {chosen['iteration']} ({which})")
    return "\n".join(lines)


class DemoFailed(RuntimeError):
    """The demo's loop stopped part-way: the message says why; ``values`` and ``stop_reason``."""

    def __init__(self, message: str, values: Mapping[str, Any], stop_reason: str) -> None:
        super().__init__(message)
        self.values = dict(values)
        self.stop_reason = stop_reason


def selected_draft(values: Mapping[str, Any]) -> str | None:
    """The draft that is the run's answer: the loop's, else (stopped part-way) the best so far.

    Example:
        ```python
        print(selected_draft(result))
        ```
    """
    last = values.get("last_response")
    records = list(values.get("records") or [])
    if values.get("stop_reason") is None and records:
        chosen = choose(records, "best")
        if chosen is not None:
            return record_answer(chosen, values).text
    return last.text if last is not None else None


def report(values: Mapping[str, Any], view: LoopConsole, *, stop_reason: str | None = None) -> None:
    """Print the verdict (`verdict`) and the selected draft under ``----Answer----``.

    Example:
        ```python
        report(result, LoopConsole(tidy=True))
        ```
    """
    view.console.print()
    view.console.print(verdict(values, stop_reason=stop_reason), markup=False, highlight=False)
    draft = selected_draft(values)
    if draft and draft.strip():
        view.print_answer(draft)


def describe_failure(exc: BaseException) -> str:
    """What stopped the demo, on one line."""
    if isinstance(exc, JudgeError):
        last = exc.problems[-1] if exc.problems else str(exc)
        text = (
            f"the reviewer gave no usable review after {len(exc.problems)} attempts (last: {last})"
        )
    else:
        text = f"{type(exc).__name__}: {exc}"
    line = " ".join(text.split())
    return line if len(line) <= 400 else line[:399] + "…"


def advice(*, offline: bool) -> str:
    """One line: the exact commands that run this demo on a stronger model.

    Example:
        ```python
        print(advice(offline=True))
        ```
    """
    demo = f"{_command()} demo song-lyrics"
    tiny = "the bundled model has 135M parameters; " if offline else ""
    return (
        f"hint: {tiny}for better drafts and reviews run the same demo on a stronger model: "
        f"`{demo} --gguf PATH.gguf` (a bigger GGUF file on the bundled llama.cpp server) or "
        f"`{demo} --base-url http://HOST:PORT/v1 --model NAME` (an OpenAI-compatible server)"
    )


def _command() -> str:
    """How ``loop-agents`` is typed here: its name on ``PATH``, else its path."""
    script = Path(sys.executable).parent / "loop-agents"
    found = shutil.which("loop-agents")
    if found is not None and Path(found).absolute() == script.absolute():
        return "loop-agents"
    if not script.exists():
        return f"{sys.executable} -m loop_agents_cli"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)


async def run(
    settings: ModelSettings,
    *,
    judge_settings: ModelSettings | None = None,
    http_async_client: httpx.AsyncClient | None = None,
    view: LoopConsole | None = None,
) -> LoopOutput:
    """Run the demo once, streamed to ``view`` (default tidied); then the verdict and the draft.

    Raises:
        DemoFailed: the loop stopped part-way; what it did is printed first.

    Example:
        ```python
        result = asyncio.run(run(ModelSettings.from_env()))
        ```
    """
    loop = build_loop(
        settings,
        judge_settings=judge_settings,
        http_async_client=http_async_client,
        checkpointer=InMemorySaver(),
    )
    view = view if view is not None else LoopConsole(tidy=True)
    message = HumanMessage(content=prompt)
    config: Any = {"configurable": {"thread_id": "song-lyrics"}}
    try:
        result: LoopOutput = await astream_to_console(
            loop, {"init_messages": [message], "messages": [message]}, config, view=view
        )
    except Exception as exc:  # the run so far is still shown, then the reason
        values = dict((await loop.aget_state(config)).values)
        reason = "judge_invalid" if isinstance(exc, JudgeError) else "error"
        view.failed(reason)
        report(values, view, stop_reason=reason)
        raise DemoFailed(describe_failure(exc), values, reason) from exc
    report(result, view)
    return result


async def run_offline(
    settings: ModelSettings | None = None,
    *,
    view: LoopConsole | None = None,
    seed: int | None = None,
) -> LoopOutput:
    """Run the demo on the bundled offline model, with a banner (``settings``: for its cap only).

    Raises:
        SettingsError: the ``local`` extra is not installed (the message says what to do).
        LocalModelServerDied: a server process stopped mid-run.
    """
    if not local_model.is_installed():
        raise SettingsError(local_model.no_endpoint_message())
    view = view if view is not None else LoopConsole(tidy=True)
    view.console.print(local_model.banner(), markup=False, highlight=False)
    cap = (settings.max_tokens if settings is not None else None) or LOCAL_MAX_TOKENS
    if seed is None:  # a fresh server replays llama.cpp's fixed seed: every run the same
        seed = secrets.randbelow(local_model.MAX_SEED + 1)
    view.console.print(
        f"seed {seed}: a new one every run (LOOP_AGENTS_SEED={seed} repeats this run's drafts)",
        style="dim",
        markup=False,
        highlight=False,
    )
    # one process per role: see its docs
    with local_model.LocalModelPair(seed=seed) as servers:
        # function_calling structured output and a max_tokens cap: what llama.cpp
        # honours; the client bounds the review's strings so its JSON fits in the cap
        try:
            result = await run(
                servers.agent.settings(max_tokens=cap),
                judge_settings=servers.judge.settings(max_tokens=cap),
                http_async_client=servers.agent.http_async_client(),
                view=view,
            )
            view.console.print(advice(offline=True), style="dim", markup=False)
            return result
        except DemoFailed as exc:
            died = servers.failure()
            if died is not None:  # the cause, whatever the client saw
                raise local_model.LocalModelServerDied(died) from exc
            raise
