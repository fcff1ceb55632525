"""`arun_eval` and `run_eval`: every task under every arm, concurrently, resumable.

Example:
    ```python
    from loop_agents.evals import run_eval

    report = run_eval("instructions", model, arms=["single", "loop", "resample"],
                      iterations=3, out="results.json")
    print(report.arms["loop"].pass_rate, report.arms["resample"].pass_rate)
    ```
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from langchain_core.language_models import BaseChatModel

from loop_agents.evals.arm_names import HEADER_ARMS
from loop_agents.evals.arm_protocol import EvalArm
from loop_agents.evals.arms import (
    ARMS,
    DEFAULT_ARMS,
    ArmLike,
    ArmOutcome,
    ArmSettings,
    PairRunner,
    arun_arm,
    at_temperature,
    resolve_arms,
    sampled_temperature,
    why_own_first_answer,
)
from loop_agents.evals.code_tests import DEFAULT_TIMEOUT
from loop_agents.evals.factory_arm import FactoryArm
from loop_agents.evals.first_answers import FirstAnswers
from loop_agents.evals.journal import Journal, journal_path
from loop_agents.evals.learning import ArmLearning, learning_seed
from loop_agents.evals.report import EvalReport, TaskError, TaskResult, build_report
from loop_agents.evals.tasks import Task, load_tasks, select_tasks, task_digest
from loop_agents.evaluators.judge import JudgeFormat
from loop_agents.runtime._sync_bridge import _background_loop
from loop_agents.sandbox.text_files import json_text

__all__ = ["EvalProgress", "PairRunner", "TaskSource", "arun_eval", "run_eval"]

TaskSource: TypeAlias = str | Path | Sequence[Task]
"""A JSONL task file, the name of a bundled set, or tasks already loaded."""


@dataclass(frozen=True)
class EvalProgress:
    """What a progress callback is told: once at the start, then after every pair.

    Attributes:
        done: Task/arm pairs finished so far, resumed ones included.
        total: All pairs of this eval.
        resumed: Pairs taken from the journal of an earlier run.
        result: The pair that just finished, if one did.
        error: The pair that just failed its last try, if one did (no result).
        retrying: The pair that just failed a try and will be tried again.
    """

    done: int
    total: int
    resumed: int = 0
    result: TaskResult | None = None
    error: TaskError | None = None
    retrying: TaskError | None = None


ProgressCallback: TypeAlias = Callable[[EvalProgress], None]


def _check_count(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number >= {low}; got {value!r}")
    return value


def describe_model(model: object) -> str:
    """A short name of a chat model for the report and the journal: name and endpoint.

    Example:
        ```python
        describe_model(ChatOpenAI(model="gpt-5.4-mini"))  # 'gpt-5.4-mini'
        ```
    """
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    label = str(name) if isinstance(name, str) and name else type(model).__name__
    base = getattr(model, "openai_api_base", None)
    return f"{label} at {base}" if isinstance(base, str) and base else label


def token_cap(model: object) -> int | None:
    """The cap on each answer's tokens a chat model sends (``max_tokens``), if any.

    Example:
        ```python
        token_cap(ChatOpenAI(model="gpt-5.4-mini", max_tokens=512))  # 512
        ```
    """
    for name in ("max_tokens", "max_completion_tokens", "num_predict"):
        cap = getattr(model, name, None)
        if isinstance(cap, int) and not isinstance(cap, bool):
            return cap
    return None


def _local_runner(
    model: BaseChatModel,
    judge: BaseChatModel | None,
    settings: ArmSettings,
    arms: Mapping[str, EvalArm],
    first_answers: FirstAnswers | None,
    learnings: Mapping[str, ArmLearning],
) -> PairRunner:
    async def run(task: Task, arm: str) -> ArmOutcome:
        return await arun_arm(
            task,
            arm if arm in ARMS else arms[arm],
            model,
            name=None if arm in ARMS else arm,
            settings=settings,
            judge=judge,
            first_answers=first_answers,
            learning=learnings.get(arm),
        )

    return run


async def _check_factories(
    arms: Mapping[str, EvalArm], task: Task | None, model: BaseChatModel, settings: ArmSettings
) -> None:
    """Build each factory arm's agent for the first task: a wrong return fails here."""
    if task is None:
        return
    for name, arm in arms.items():
        if isinstance(arm, FactoryArm):
            sampler = at_temperature(model, settings.temperature_of(name))
            await arm.build(task, sampler, settings, name=name)


async def arun_eval(
    tasks: TaskSource,
    model: BaseChatModel | None = None,
    *,
    arms: Sequence[str] | Mapping[str, ArmLike] = DEFAULT_ARMS,
    iterations: int = 4,
    concurrency: int = 4,
    temperature: float = 1.0,
    arm_temperatures: Mapping[str, float] | None = None,
    judge_temperature: float = 0.0,
    out: str | Path | None = None,
    progress: ProgressCallback | None = None,
    judge: BaseChatModel | None = None,
    judge_method: JudgeFormat = "json_schema",
    judge_threshold: float = 80.0,
    limit: int | None = None,
    task_ids: Sequence[str] | None = None,
    retries: int = 2,
    retry_delay: float = 1.0,
    code_timeout: float = DEFAULT_TIMEOUT,
    server: str | None = None,
    model_id: str | None = None,
    model_digest: str | None = None,
    model_seed: int | None = None,
    same_first_answer: bool = False,
) -> EvalReport:
    """Run every task under every arm and compare the arms (async form of `run_eval`).

    Args:
        tasks: A JSONL task file, a bundled set (``"code"``, ``"instructions"``), or
            tasks already loaded.
        model: The chat model that answers (and judges, unless ``judge`` is given).
            Not given with ``server``: the server uses its own.
        arms: Which arms to run: a list of built-in arms, of ``single``, ``loop``,
            ``resample``, ``judge-loop`` (the default), ``loop-candidates``,
            ``restart``, ``diverse-first`` and ``adaptive``; or a mapping of names to arms, each a
            built-in arm's name (under its own name), a `loop(...)` arm (a
            `create_loop_agent` loop from options), or a factory
            ``(task, model, settings) -> agent`` (see `loop_agents.evals.factory_arm`).
            Every arm of your own is compared with ``resample`` and ``single``.
        iterations: K, the budget of answers every arm may write (even, with
            ``loop-candidates``).
        concurrency: Task/arm pairs run at the same time.
        temperature: The sampling temperature of every arm's answers.
        arm_temperatures: Arm name -> its own temperature, for arms that do not
            sample at ``temperature`` (built-in arms, or yours by their names).
        judge_temperature: The sampling temperature of the judge of ``judge-loop``.
        out: Where to write the JSON result. Its journal (``NAME.journal.jsonl`` beside
            it) records each finished pair, and an eval run again with the same
            ``out`` skips the pairs already there: an interrupted eval resumes.
        progress: Called with an `EvalProgress` at the start and after every pair.
        judge: The judge's chat model in ``judge-loop`` (default ``model``).
        judge_method: How the judge's verdict is requested: a structured-output
            method (``function_calling`` for llama.cpp's server), or ``"text"``
            (``Score: N`` / ``Feedback: ...``, for models without tool calling).
        judge_threshold: The judge's score (0-100) that accepts an answer.
        limit: Run only the first ``limit`` tasks (after ``task_ids``).
        task_ids: Run only these tasks.
        retries: Tries after the first when a pair fails (a server error); a pair that
            fails every try is reported in ``errors``, without a result.
        retry_delay: Seconds before the first retry (doubled for each next one).
        code_timeout: Seconds a code answer and its tests may run.
        server: The URL of a LangGraph Server that serves ``eval_task`` (see
            `loop_agents.serving.eval_task`): each pair runs there, with the server's model.
        model_id: How the model is named in the report and the journal (default: its
            name and endpoint).
        model_digest: The identity of the model's weights (e.g. the SHA-256 of a GGUF
            file, `loop_agents.models.file_identity.file_digest`), kept in the settings
            and the journal's key: a journal of other weights is refused.
        model_seed: The random seed the model's server was started with, kept in the
            report's settings (not in the journal's key: another seed samples from the
            same distribution, so an eval resumed with a new seed stays one eval). The
            seed of an ``adaptive`` arm's draws is derived from it
            (`loop_agents.evals.learning.learning_seed`).
        same_first_answer: Sample each task's first answer once and start every arm
            from it (the arms that sample at ``temperature`` and make their first call
            themselves: not factories), so that the arms differ only in what they do
            after it; each arm is still charged that call. Kept in the settings and the
            journal (see `loop_agents.evals.first_answers`).

    Returns:
        An `EvalReport`.

    Raises:
        TaskFileError: the task file is malformed (before any model call).
        ValueError: a setting is out of range, or the model/server choice is wrong.
        JournalError: the journal beside ``out`` belongs to an eval with other settings,
            or with another arm under the name of one of yours.
        TypeError: an arm that is not one; a factory with the wrong signature, or one
            that does not return an agent for the first task (checked before any model
            call).

    Example:
        ```python
        report = await arun_eval("code", model, iterations=3, limit=10, out="code.json")
        ```
    """
    settings = ArmSettings(
        iterations=iterations,
        temperature=temperature,
        arm_temperatures=dict(arm_temperatures or {}),
        judge_temperature=judge_temperature,
        judge_threshold=judge_threshold,
        judge_method=judge_method,
        code_timeout=code_timeout,
    )
    chosen_arms = resolve_arms(arms)
    for name, arm in chosen_arms.items():
        arm.check_budget(settings.iterations, name)
    custom = {name: arm for name, arm in chosen_arms.items() if name not in ARMS}
    unknown = [name for name in settings.arm_temperatures if name not in (*ARMS, *custom)]
    if unknown:
        raise ValueError(
            f"arm_temperatures: unknown arm {', '.join(map(repr, unknown))}; the arms are "
            f"{', '.join([*ARMS, *custom])}"
        )
    _check_count("concurrency", concurrency, 1)
    _check_count("retries", retries, 0)
    if not isinstance(retry_delay, int | float) or retry_delay < 0:
        raise ValueError(f"retry_delay must be a number of seconds >= 0; got {retry_delay!r}")
    runner: PairRunner
    # the arms that learn across tasks (adaptive): one store each, kept in the journal
    learnings = {
        name: ArmLearning(seed=learning_seed(model_seed, name))
        for name, arm in chosen_arms.items()
        if arm.learns
    }
    if server is not None:
        if model is not None or judge is not None:
            raise ValueError(
                "give either a model or a server, not both: with server= the LangGraph "
                "server answers with the model of its own environment"
            )
        if custom:
            raise ValueError(
                f"arms of your own ({', '.join(custom)}) run here, not on a LangGraph server "
                f"(it runs the built-in arms only): drop server=, or run those arms apart"
            )
        if same_first_answer:
            raise ValueError(
                "same_first_answer shares the first answers of the arms run here; with "
                "server= each pair runs on the LangGraph server: drop one of them"
            )
        if learnings:
            raise ValueError(
                f"{', '.join(learnings)} learns across the tasks of an eval, which runs "
                f"here (on a LangGraph server each pair runs alone): drop server=, or run "
                f"that arm apart"
            )
        from loop_agents.evals.server import server_runner

        first_answers: FirstAnswers | None = None  # refused above: not on a server
        runner = server_runner(server, settings)
        label = model_id or f"LangGraph server {server}"
    else:
        if not isinstance(model, BaseChatModel):
            raise TypeError(
                f"model must be a chat model (e.g. ChatOpenAI(...)), or give server=URL; "
                f"got {type(model).__name__}"
            )
        if judge is not None and not isinstance(judge, BaseChatModel):
            raise TypeError(f"judge must be a chat model; got {type(judge).__name__}")
        if not isinstance(same_first_answer, bool):
            raise TypeError(f"same_first_answer must be True or False; got {same_first_answer!r}")
        first_answers = FirstAnswers(settings.temperature) if same_first_answer else None
        runner = _local_runner(model, judge, settings, chosen_arms, first_answers, learnings)
        label = model_id or describe_model(model)
    if isinstance(tasks, str | Path):
        chosen = load_tasks(tasks, limit=limit, ids=task_ids)
    else:
        chosen = select_tasks(list(tasks), limit=limit, ids=task_ids)
    if isinstance(model, BaseChatModel):
        await _check_factories(custom, next(iter(chosen), None), model, settings)
    # everything that changes an answer: the journal's key (a journal of other settings
    # is refused) and the report's settings
    temperatures: dict[str, float | None] = {
        arm: settings.temperature_of(arm) for arm in HEADER_ARMS
    }
    judge_sampled: float | None = settings.judge_temperature
    if isinstance(model, BaseChatModel):  # what the model really sends (None: its default)
        temperatures = {
            arm: sampled_temperature(model, settings.temperature_of(arm)) for arm in HEADER_ARMS
        }
        judge_sampled = sampled_temperature(judge or model, settings.judge_temperature)
    record: dict[str, Any] = {
        "iterations": settings.iterations,
        "temperature": settings.temperature,
        "temperatures": temperatures,
        "judge_temperature": judge_sampled,
        "judge_threshold": settings.judge_threshold,
        "judge_method": None if server is not None else settings.judge_method,
        "max_tokens": None if server is not None else token_cap(model),
        "code_timeout": settings.code_timeout,
        "model": label,
    }
    if model_digest is not None:
        record["model_sha256"] = model_digest
    if same_first_answer:
        record["same_first_answer"] = True
    # the arms of your own, and built-in arms newer than the journal's first line: what
    # each is and its temperature (declared in the journal)
    declared = {
        name: {
            "identity": arm.identity(),
            "temperature": (
                sampled_temperature(model, settings.temperature_of(name))
                if isinstance(model, BaseChatModel)
                else settings.temperature_of(name)
            ),
        }
        for name, arm in chosen_arms.items()
        if name not in HEADER_ARMS
    }
    out_path = Path(out) if out is not None else None
    journal = (
        Journal.open(journal_path(out_path), record, arms=declared, seed=model_seed)
        if out_path
        else None
    )
    if journal is not None and first_answers is not None:
        for (task_id, digest), message in journal.first_answers().items():
            first_answers.preload(task_id, digest, message)
        first_answers.keep = journal.keep_first
    try:
        results, errors = await _run_pairs(
            chosen,
            list(chosen_arms),
            runner,
            journal,
            concurrency=concurrency,
            retries=retries,
            retry_delay=float(retry_delay),
            progress=progress,
            learnings=learnings,
        )
    finally:
        if journal is not None:
            journal.close()
    shown = record | {"tasks": len(chosen)}
    if declared:
        shown["temperatures"] = temperatures | {n: d["temperature"] for n, d in declared.items()}
    if custom:
        shown["arms"] = {name: declared[name]["identity"] for name in custom}
    if first_answers is not None:  # the arms that could not start from the shared answer
        own = {n: why_own_first_answer(a, n, settings) for n, a in chosen_arms.items()}
        shown["own_first_answer"] = {n: why for n, why in own.items() if why}
    seeds = _seeds_of(results, journal, model_seed)
    if len(seeds) == 1 and seeds[0] is not None:
        shown["seed"] = seeds[0]
    elif len(seeds) > 1:  # a resumed eval, or one made of parts: each run's seed
        shown["seeds"] = seeds
    report = build_report(list(chosen_arms), results, errors, settings=shown)
    if out_path is not None:
        _write_json(out_path, report.to_json())
    return report


def _seeds_of(
    results: Sequence[TaskResult], journal: Journal | None, model_seed: int | None
) -> list[int | None]:
    """The model seeds behind ``results``, each once, in the tasks' order (``None``: unknown)."""
    if journal is None or not results:
        return [model_seed]
    return list(dict.fromkeys(journal.seed_of(r.task_id, r.arm) for r in results))


async def _run_pairs(
    tasks: Sequence[Task],
    arms: Sequence[str],
    runner: PairRunner,
    journal: Journal | None,
    *,
    concurrency: int,
    retries: int,
    retry_delay: float,
    progress: ProgressCallback | None,
    learnings: Mapping[str, ArmLearning] | None = None,
) -> tuple[list[TaskResult], list[TaskError]]:
    pairs = [(task, arm, task_digest(task)) for task in tasks for arm in arms]
    finished: dict[tuple[str, str], TaskResult] = {}
    todo: list[tuple[Task, str, str]] = []
    for task, arm, digest in pairs:
        found = journal.lookup(task.id, arm, digest) if journal else None
        if found is not None:  # a journal may predate the task's part
            finished[(task.id, arm)] = dataclasses.replace(found, part=task.part)
        else:
            todo.append((task, arm, digest))
    resumed = len(finished)
    learnings = learnings or {}
    for result in finished.values():  # what the learning arms learned before: restored
        if result.arm in learnings:
            learnings[result.arm].add(result.learned)
    errors: list[TaskError] = []
    gate = asyncio.Semaphore(concurrency)
    total = len(pairs)

    def report(**event: Any) -> None:
        if progress is not None:
            progress(
                EvalProgress(
                    done=len(finished) + len(errors), total=total, resumed=resumed, **event
                )
            )

    async def run_one(task: Task, arm: str, digest: str) -> None:
        async with gate:
            for attempt in range(1, retries + 2):
                try:
                    outcome = await runner(task, arm)
                except Exception as exc:  # a server error, a timeout, a crash: not a pass
                    failure = TaskError(task.id, arm, f"{type(exc).__name__}: {exc}", attempt)
                    if attempt <= retries:
                        report(retrying=failure)
                        await asyncio.sleep(retry_delay * 2 ** (attempt - 1))
                        continue
                    errors.append(failure)
                    report(error=failure)
                    return
                result = TaskResult(
                    task_id=task.id,
                    arm=arm,
                    passed=outcome.passed,
                    iterations=outcome.iterations,
                    model_calls=outcome.model_calls,
                    input_tokens=outcome.input_tokens,
                    output_tokens=outcome.output_tokens,
                    seconds=round(outcome.seconds, 3),
                    answer=outcome.answer,
                    attempts=attempt,
                    judge_failures=outcome.judge_failures,
                    cached_input_tokens=outcome.cached_input_tokens,
                    cut_off=outcome.cut_off,
                    by_attempt=tuple(outcome.by_attempt),
                    part=task.part,
                    transcript=tuple(outcome.transcript),
                    opaque=outcome.opaque,
                    learned=outcome.learned,
                )
                if journal is not None:
                    journal.append(result, digest)
                if arm in learnings:  # recorded: what it learned joins the arm's store
                    learnings[arm].add(result.learned)
                finished[(task.id, arm)] = result
                report(result=result)
                return

    report()
    async with asyncio.TaskGroup() as group:
        for task, arm, digest in todo:
            group.create_task(run_one(task, arm, digest))
    ordered = [finished[(t.id, a)] for t, a, _ in pairs if (t.id, a) in finished]
    order: dict[tuple[str, str], int] = {(t.id, a): i for i, (t, a, _) in enumerate(pairs)}
    errors.sort(key=lambda e: order[(e.task_id, e.arm)])
    return ordered, errors


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json_text(data, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def run_eval(tasks: TaskSource, model: BaseChatModel | None = None, **options: Any) -> EvalReport:
    """Run every task under every arm and compare the arms; see `arun_eval` for options.

    Runs on the package's background event loop (so async clients cached by chat models
    keep working from one call to the next); Ctrl-C cancels the eval, and what finished
    is in the journal beside ``out``. From async code, ``await arun_eval(...)``.

    Example:
        ```python
        report = run_eval("instructions", ChatOpenAI(model="gpt-5.4-mini"), limit=10,
                          out="instructions.json")
        render_report(report)
        ```
    """
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        raise RuntimeError("run_eval was called from a running event loop; use await arun_eval")
    future = asyncio.run_coroutine_threadsafe(arun_eval(tasks, model, **options), loop)
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise
