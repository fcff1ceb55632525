"""The Song-lyrics demo: a composer writes a ci to the tune 相见欢, a reviewer scores it.

The composer is a ``create_agent`` agent; the reviewer an `llm_judge` whose verdict is
a `Review` (the judge policy of ``loop-agents run``: an unusable review is asked for
again, then stops the loop). Before the reviewer, the 相见欢 form check reads each draft
(on unless ``LOOP_AGENTS_FORM_CHECK=0``): a draft without the form goes back to the
composer with what is wrong and a score for how near it is, at no reviewer call (the
reviewer alone accepts a copy of the source poem). While the score is below `PASS_SCORE`
the feedback goes back to the composer, at most `MAX_ITERATIONS` times; the best-scored
draft is the answer. `run` streams the loop to the console: the composer's tokens under
``----Agent----``, each review under ``----Evaluator----``, a status line per iteration,
then the summary, the verdict and the selected draft. A run that fails part-way prints
the same for what it did and raises `DemoFailed`, whose message says what went wrong.

Run it with ``loop-agents demo song-lyrics`` or ``python examples/song_lyrics.py``.
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

    Args:
        settings: Where the model is (see `loop_agents_cli.models.settings.ModelSettings`).
        judge_settings: Where the reviewer's model is (default ``settings``): on the
            bundled server, the judge's own process, so that the composer's and the
            reviewer's prompts keep their cached prefixes.
        http_async_client: An ``httpx.AsyncClient`` for both models (tests use a
            scripted transport); default: the OpenAI client's own.
        form_check: Check each draft's form (`xiangjianhuan_form`) before the
            reviewer sees it: a malformed draft goes back to the composer with what is
            wrong, at no reviewer call. Default: ``LOOP_AGENTS_FORM_CHECK`` in the
            environment (`form_check_from_env`: on unless set to 0).
        checkpointer: Passed to `create_loop_agent` (the command reads the state of
            a run that failed back from it).

    Example:
        ```python
        loop = build_loop(ModelSettings.from_env())
        result = await loop.ainvoke({"messages": [HumanMessage(prompt)]})
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

    It has the judge policy of ``loop-agents run``: a review that does not parse or
    scores off the 0-100 scale (or not a finite number) is asked for again, at most
    `REVIEW_RETRIES` times, then `loop_agents.evaluators.JudgeError` stops the loop:
    a broken review never passes a ci, and the loop never goes on as if it had been
    judged. The feedback is the article's: the comments, then ``综合得分：N``.

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
    """A short account of the run: iterations, the score of each try, why it stopped.

    Args:
        result: The loop's output (or its state, read back).
        stop_reason: Why the loop stopped, when it did not finish (``judge_invalid``,
            ``error``); default the loop's own stop reason.

    Example:
        ```python
        print(verdict(await build_loop(settings).ainvoke({"messages": [request]})))
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
    """The demo's loop stopped part-way; the message says why, on one line.

    Attributes:
        values: The loop's state when it stopped (every completed step).
        stop_reason: ``judge_invalid`` (no usable review) or ``error``.

    """

    def __init__(self, message: str, values: Mapping[str, Any], stop_reason: str) -> None:
        super().__init__(message)
        self.values = dict(values)
        self.stop_reason = stop_reason


def selected_draft(values: Mapping[str, Any]) -> str | None:
    """The draft that is the run's answer: the loop's (the best-scored), else the best so far.

    For a loop that stopped part-way it is the best-scored draft so far (the later on a
    tie), else the latest one.

    Example:
        ```python
        print(selected_draft(await build_loop(settings).ainvoke({"messages": [request]})))
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
    """What stopped the demo, on one line, without a library's advice to its developer.

    Example:
        ```python
        describe_failure(JudgeError("...", ["the score 316098 is outside the scale 0-100"]))
        ```

    """
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

    Printed at the end of a run on the bundled model, and when the reviewer gave no usable
    review (the model's limits). A server that could not be reached or died is not the
    model's fault, and its error says what to do.

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
    """How the ``loop-agents`` command is typed here.

    Its name when it is on ``PATH`` (this Python's), else its path (a virtual environment
    that is not activated, as ``make demo`` leaves it).
    """
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
    """Run the demo once, streamed to the console; then the verdict and the selected draft.

    Args:
        settings: Where the model is.
        judge_settings: Where the reviewer's model is (default ``settings``).
        http_async_client: Passed to `build_loop`.
        view: The renderer; default a `LoopConsole` on stdout that shows the text tidied.

    Returns:
        The loop's output.

    Raises:
        DemoFailed: the loop stopped part-way (a server error, no usable review); what
            it did is printed first (the summary so far, the best draft).

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
    """Run the demo on the bundled offline model (the ``local`` extra), with a banner.

    Used when neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` is set. Nothing is
    installed here: without the extra this raises with the one command that installs it.

    Args:
        settings: Read for ``max_tokens`` only (default `LOCAL_MAX_TOKENS`).
        view: The renderer; default a `LoopConsole` on stdout that shows the text tidied.
        seed: The servers' random seed (see `loop_agents_cli.models.local_model.LocalModelPair`);
            default a new one every run, printed, so that two runs are two samples.

    Raises:
        SettingsError: the ``local`` extra is not installed; the message says how to
            install it or how to point the demo at a model server instead.
        loop_agents_cli.models.local_model.LocalModelServerDied: a server process stopped
            mid-run (its role, how, its log and the fix).

    Example:
        ```python
        result = asyncio.run(run_offline())
        ```

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
