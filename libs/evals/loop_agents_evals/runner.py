"""`arun_eval` and `run_eval`: every task under every arm, concurrently, resumable.

`_plan` checks the settings, arms and tasks before any model call; `_journal_key` is
everything that changes an answer; `_run_pairs` runs the pairs on the pair loop
(`loop_agents_evals.pair_loop`: each within its time limit, whatever the arm does),
retries, journals, and stops when the model's server died; `build_report` summarizes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from langchain_core.language_models import BaseChatModel

from loop_agents.runtime.sync_bridge import background_loop
from loop_agents_checks.sandbox.text_files import json_text
from loop_agents_evals.arm_protocol import EvalArm
from loop_agents_evals.arms import (
    ArmLike,
    PairRunner,
    arun_arm,
    resolve_arms,
    why_own_first_answer,
)
from loop_agents_evals.factory_arm import ArmFactoryError, FactoryArm
from loop_agents_evals.journal import Journal, journal_path
from loop_agents_evals.learning import ArmLearning, learning_seed
from loop_agents_evals.pair_loop import PairTimeout, run_watched
from loop_agents_evals.report import EvalReport, TaskError, TaskResult, build_report
from loop_agents_evals.sampling import FirstAnswers, at_temperature, sampled_temperature
from loop_agents_evals.settings import (
    ARMS,
    DEFAULT_ARMS,
    HEADER_ARMS,
    PAIR_TIMEOUT,
    ArmSettings,
    EvalSettings,
    check_count,
    check_number,
    did_you_mean,
    server_conflict,
)
from loop_agents_evals.tasks import Task, check_sandbox, load_tasks, task_digest

__all__ = ["EvalProgress", "ModelServerDied", "TaskSource", "arun_eval", "run_eval"]

TaskSource: TypeAlias = str | Path | Sequence[Task | Mapping[str, Any]]
"""A JSONL task file, the name of a bundled set, or tasks: loaded, or as task-file lines."""


@dataclass(frozen=True)
class EvalProgress:
    """What a progress callback is told: once at the start, then after every pair.

    Attributes:
        done: Task/arm pairs finished so far, resumed ones included.
        total: All pairs of this eval.
        resumed: Pairs taken from the journal of an earlier run.
        result: The pair that just finished, if one did.
        error: The pair that just failed its last try, if one did.
        retrying: The pair that just failed a try and will be tried again.
    """

    done: int
    total: int
    resumed: int = 0
    result: TaskResult | None = None
    error: TaskError | None = None
    retrying: TaskError | None = None


ProgressCallback: TypeAlias = Callable[[EvalProgress], None]


class ModelServerDied(RuntimeError):
    """The model's server stopped mid-eval (the message says how); what finished is kept."""


_KEYWORDS = ("arms", "iterations", "concurrency", "limit", "out", "retries", "pair_timeout")
_SETTINGS = tuple(f.name for f in dataclasses.fields(EvalSettings))


def _check_keywords(options: Mapping[str, Any]) -> None:
    """Refuse a keyword `run_eval` does not take, naming those it takes."""
    for key, value in options.items():
        if key in _SETTINGS:  # a keyword until 0.3
            raise TypeError(
                f"run_eval() got an unexpected keyword argument {key!r}: removed in "
                f"loop_agents 0.3; pass settings=EvalSettings({key}={value!r:.60})"
            )
        if key not in (*_KEYWORDS, "settings", "progress"):
            raise TypeError(
                f"run_eval() got an unexpected keyword argument {key!r}"
                f"{did_you_mean(key, (*_KEYWORDS, *_SETTINGS))}; its keywords are "
                f"{', '.join(_KEYWORDS)}, settings=EvalSettings(...) (holding "
                f"{', '.join(_SETTINGS)}) and progress"
            )


def describe_model(model: object) -> str:
    """A chat model's name and endpoint, for the report and the journal.

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
    """The cap on each answer's tokens a chat model sends, if any.

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


@dataclass
class _Plan:
    """An eval checked and ready to run: what `_plan` found."""

    tasks: list[Task]
    arms: dict[str, EvalArm]
    custom: dict[str, EvalArm]
    settings: EvalSettings
    arm_settings: ArmSettings
    model: BaseChatModel | None
    runner: PairRunner
    label: str
    first_answers: FirstAnswers | None
    learnings: dict[str, ArmLearning]


def _plan(
    tasks: TaskSource,
    model: BaseChatModel | None,
    arms: object,
    settings: EvalSettings,
    *,
    iterations: int,
    limit: int | None,
) -> _Plan:
    """Check the arms, the model or server and the tasks; nothing is called yet."""
    arm_settings = settings.arm_settings(iterations)
    chosen = resolve_arms(arms)
    for name, arm in chosen.items():
        arm.check_budget(arm_settings.iterations, name)
    custom = {name: arm for name, arm in chosen.items() if name not in ARMS}
    unknown = [name for name in settings.arm_temperatures if name not in (*ARMS, *custom)]
    if unknown:
        raise ValueError(
            f"arm_temperatures: unknown arm {', '.join(map(repr, unknown))}; the arms are "
            f"{', '.join([*ARMS, *custom])}"
        )
    first_answers: FirstAnswers | None = None
    # the arms that learn across tasks (adaptive): one store each, kept in the journal
    learnings = {
        name: ArmLearning(seed=learning_seed(settings.model_seed, name))
        for name, arm in chosen.items()
        if arm.learns
    }
    if settings.server is not None:
        if model is not None or settings.judge is not None:
            raise ValueError(
                "give either a model or a server, not both: with server= the LangGraph "
                "server answers with the model of its own environment"
            )
        conflict = server_conflict(list(custom), settings.same_first_answer, list(learnings))
        if conflict:
            raise ValueError(conflict)
        from loop_agents_evals.server import server_runner

        runner = server_runner(settings.server, arm_settings)
        label = settings.model_id or f"LangGraph server {settings.server}"
    else:
        if not isinstance(model, BaseChatModel):
            raise TypeError(
                f"model must be a chat model (e.g. ChatOpenAI(...)), or give "
                f"settings=EvalSettings(server=URL); got {type(model).__name__}"
            )
        if settings.judge is not None and not isinstance(settings.judge, BaseChatModel):
            raise TypeError(f"judge must be a chat model; got {type(settings.judge).__name__}")
        if settings.same_first_answer:
            first_answers = FirstAnswers(arm_settings.temperature)
        runner = _local_runner(
            model, settings.judge, arm_settings, chosen, first_answers, learnings
        )
        label = settings.model_id or describe_model(model)
    loaded = load_tasks(tasks, limit=limit, ids=settings.task_ids)
    if settings.server is None:
        check_sandbox(loaded)  # once, before any model call: every code pair needs it
    return _Plan(
        loaded,
        chosen,
        custom,
        settings,
        arm_settings,
        model,
        runner,
        label,
        first_answers,
        learnings,
    )


def _local_runner(
    model: BaseChatModel,
    judge: BaseChatModel | None,
    settings: ArmSettings,
    arms: Mapping[str, EvalArm],
    first_answers: FirstAnswers | None,
    learnings: Mapping[str, ArmLearning],
) -> PairRunner:
    async def run(task: Task, arm: str) -> TaskResult:
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


async def _check_factories(plan: _Plan, pair_timeout: float | None) -> None:
    """Build each factory arm's agent for the first task: a wrong return fails here."""
    if plan.model is None or not plan.tasks:
        return
    for name, arm in plan.custom.items():
        if isinstance(arm, FactoryArm):
            sampler = at_temperature(plan.model, plan.arm_settings.temperature_of(name))
            build = functools.partial(
                arm.build, plan.tasks[0], sampler, plan.arm_settings, name=name
            )
            try:
                await run_watched(build, pair_timeout)
            except PairTimeout:
                raise ArmFactoryError(
                    f"the factory of arm {name!r} did not return an agent for the first task "
                    f"within {pair_timeout:g} s (the pair time limit); check that it does not "
                    f"wait for something, or give a longer pair_timeout"
                ) from None


def _journal_key(plan: _Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """The journal's key (all that changes an answer) and each arm of your own's identity."""
    model, settings, arm_settings = plan.model, plan.settings, plan.arm_settings

    def sampled(temperature: float) -> float | None:  # None: the model's own default
        return sampled_temperature(model, temperature) if model is not None else temperature

    record: dict[str, Any] = {
        "iterations": arm_settings.iterations,
        "temperature": arm_settings.temperature,
        "temperatures": {arm: sampled(arm_settings.temperature_of(arm)) for arm in HEADER_ARMS},
        "judge_temperature": (
            sampled_temperature(settings.judge or model, arm_settings.judge_temperature)
            if model is not None
            else arm_settings.judge_temperature
        ),
        "judge_threshold": arm_settings.judge_threshold,
        "judge_method": None if settings.server is not None else arm_settings.judge_method,
        "max_tokens": None if settings.server is not None else token_cap(model),
        "code_timeout": arm_settings.code_timeout,
        "model": plan.label,
    }
    if settings.model_digest is not None:
        record["model_sha256"] = settings.model_digest
    if settings.same_first_answer:
        record["same_first_answer"] = True
    declared = {
        name: {
            "identity": arm.identity(),
            "temperature": sampled(arm_settings.temperature_of(name)),
        }
        for name, arm in plan.arms.items()
        if name not in HEADER_ARMS  # and the built-in arms newer than the key (adaptive)
    }
    return record, declared


async def arun_eval(
    tasks: TaskSource,
    model: BaseChatModel | None = None,
    *,
    arms: Sequence[str] | Mapping[str, ArmLike] = DEFAULT_ARMS,
    iterations: int = 4,
    concurrency: int = 4,
    limit: int | None = None,
    out: str | Path | None = None,
    retries: int = 2,
    pair_timeout: float | None = PAIR_TIMEOUT,
    settings: EvalSettings | None = None,
    progress: ProgressCallback | None = None,
) -> EvalReport:
    """Run every task under every arm and compare the arms (async form of `run_eval`).

    Args:
        tasks: A JSONL task file, a bundled set (``"code"``, ``"instructions"``), or
            tasks (`Task` objects, or mappings shaped as a task file's lines).
        model: The chat model that answers (and judges, unless ``settings.judge``);
            none with ``settings.server``.
        arms: A list of built-in arms (default ``single``, ``loop``, ``resample``,
            ``judge-loop``), or a mapping of names to arms: a built-in arm's name, a
            `loop(...)`, or a factory ``(task, model, settings) -> agent``.
        iterations: K, the budget of answers of every arm.
        concurrency: Task/arm pairs run at the same time.
        limit: Run only the first ``limit`` tasks (after ``settings.task_ids``).
        out: Where to write the JSON result; its journal beside it lets an eval run
            again with the same ``out`` resume.
        retries: Tries after the first when a pair fails; a pair that fails every try
            is in ``errors``, without a result.
        pair_timeout: Seconds one pair may take, whatever the arm does (an hour;
            ``None``: no limit); a pair over it is an error, not retried (see
            `loop_agents_evals.pair_loop`). A factory's first build is held to it too.
        settings: Every other option (`EvalSettings`).
        progress: Called with an `EvalProgress` at the start and after every pair.

    Returns:
        An `EvalReport`; its ``recommendation`` says which arm to use.

    Raises:
        TaskFileError: the task file is malformed.
        ValueError: a setting is out of range, or the model/server choice is wrong.
        TypeError: not an arm, not tasks; a factory that does not build an agent for
            the first task (`ArmFactoryError`).
        JournalError: the journal beside ``out`` is of an eval with other settings, or
            another arm under one of your names.
        IsolationUnavailable: code tasks, and the sandbox cannot run code here.
        ModelServerDied: the model's server stopped mid-eval.

    Everything but the last is raised before any model call.

    Example:
        ```python
        report = await arun_eval("code", model, iterations=3, limit=10, out="code.json",
                                 settings=EvalSettings(temperature=0.7))
        ```
    """
    if settings is not None and not isinstance(settings, EvalSettings):
        raise TypeError(f"settings must be an EvalSettings(...); got {type(settings).__name__}")
    settings = settings or EvalSettings()
    check_count("concurrency", concurrency, 1)
    check_count("retries", retries, 0)
    if pair_timeout is not None:
        check_number("pair_timeout", pair_timeout, 0.0, math.inf, above=True)
    plan = _plan(tasks, model, arms, settings, iterations=iterations, limit=limit)
    await _check_factories(plan, pair_timeout)
    record, declared = _journal_key(plan)
    out_path = Path(out) if out is not None else None
    journal = None
    if out_path is not None:
        journal = Journal.open(
            journal_path(out_path), record, arms=declared, seed=settings.model_seed
        )
    if journal is not None and plan.first_answers is not None:
        for (task_id, digest), message in journal.first_answers().items():
            plan.first_answers.preload(task_id, digest, message)
        plan.first_answers.keep = journal.keep_first
    try:
        results, errors = await _run_pairs(
            plan,
            journal,
            concurrency=concurrency,
            retries=retries,
            pair_timeout=pair_timeout,
            progress=progress,
        )
    finally:
        if journal is not None:
            journal.close()
    report = _report(plan, record, declared, results, errors, journal)
    if out_path is not None:
        _write_json(out_path, report.to_json())
    return report


def _report(
    plan: _Plan,
    record: Mapping[str, Any],
    declared: Mapping[str, Mapping[str, Any]],
    results: list[TaskResult],
    errors: list[TaskError],
    journal: Journal | None,
) -> EvalReport:
    """The `EvalReport`, its settings the journal's key and what the run adds to them."""
    shown = dict(record) | {"tasks": len(plan.tasks)}
    if declared:
        temperatures = {name: found["temperature"] for name, found in declared.items()}
        shown["temperatures"] = record["temperatures"] | temperatures
    if plan.custom:
        shown["arms"] = {name: declared[name]["identity"] for name in plan.custom}
    if plan.first_answers is not None:  # the arms that could not start from the shared answer
        own = {n: why_own_first_answer(a, n, plan.arm_settings) for n, a in plan.arms.items()}
        shown["own_first_answer"] = {n: why for n, why in own.items() if why}
    seeds = [plan.settings.model_seed]
    if journal is not None and results:  # each result's seed, each once, in the tasks' order
        seeds = list(dict.fromkeys(journal.seed_of(r.task_id, r.arm) for r in results))
    if len(seeds) == 1 and seeds[0] is not None:
        shown["seed"] = seeds[0]
    elif len(seeds) > 1:  # a resumed eval, or one made of parts: each run's seed
        shown["seeds"] = seeds
    return build_report(list(plan.arms), results, errors, settings=shown)


async def _run_pairs(
    plan: _Plan,
    journal: Journal | None,
    *,
    concurrency: int,
    retries: int,
    pair_timeout: float | None,
    progress: ProgressCallback | None,
) -> tuple[list[TaskResult], list[TaskError]]:
    """Run the pairs not in the journal: each within its time limit, retried, journaled."""
    pairs = [(task, arm, task_digest(task)) for task in plan.tasks for arm in plan.arms]
    finished: dict[tuple[str, str], TaskResult] = {}
    todo: list[tuple[Task, str, str]] = []
    for task, arm, digest in pairs:
        found = journal.lookup(task.id, arm, digest) if journal else None
        if found is not None:  # a journal may predate the task's part
            finished[(task.id, arm)] = dataclasses.replace(found, part=task.part)
        else:
            todo.append((task, arm, digest))
    resumed = len(finished)
    for result in finished.values():  # what the learning arms learned before: restored
        if result.arm in plan.learnings:
            plan.learnings[result.arm].add(result.learned)
    errors: list[TaskError] = []
    gate = asyncio.Semaphore(concurrency)
    failure = plan.settings.model_server_failure

    async def died() -> str | None:
        """Why the model's server died, if it did; a fifth of a second is looked for it.

        A killed server's connections close a moment before it can be reaped.
        """
        for _ in range(10 if failure is not None else 0):
            if (found := failure()) is not None:  # type: ignore[misc]
                return found
            await asyncio.sleep(0.02)
        return None

    def report(**event: Any) -> None:
        if progress is not None:
            done = len(finished) + len(errors)
            progress(EvalProgress(done=done, total=len(pairs), resumed=resumed, **event))

    async def run_one(task: Task, arm: str, digest: str) -> None:
        async with gate:
            for attempt in range(1, retries + 2):
                try:
                    outcome = await run_watched(lambda: plan.runner(task, arm), pair_timeout)
                except Exception as exc:  # a server error, a timeout, a crash: not a pass
                    error = f"{type(exc).__name__}: {exc}"
                    hung = isinstance(exc, PairTimeout)
                    if hung:
                        why = f"did not finish within {pair_timeout:g} s (the pair time limit)"
                        if getattr(exc, "blocked", False):
                            why += "; it blocked its event loop, which was abandoned"
                        error = f"TimeoutError: {why}"
                    elif (server := await died()) is not None:  # no retry can succeed now
                        raise ModelServerDied(server) from exc
                    failure = TaskError(task.id, arm, error, attempt)
                    if attempt > retries or hung:  # a hung pair is not retried
                        errors.append(failure)
                        report(error=failure)
                        return
                    report(retrying=failure)
                    await asyncio.sleep(plan.settings.retry_delay * 2 ** (attempt - 1))
                    if (server := await died()) is not None:  # it may have died since
                        raise ModelServerDied(server) from exc
                    continue
                result = dataclasses.replace(outcome, arm=arm, attempts=attempt, part=task.part)
                if journal is not None:
                    journal.append(result, digest)
                if arm in plan.learnings:  # recorded: what it learned joins the arm's store
                    plan.learnings[arm].add(result.learned)
                finished[(task.id, arm)] = result
                report(result=result)
                return

    report()
    try:
        async with asyncio.TaskGroup() as group:
            for task, arm, digest in todo:
                group.create_task(run_one(task, arm, digest))
    except* ModelServerDied as stopped:
        raise stopped.exceptions[0] from None
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
    """Run every task under every arm and compare the arms; `arun_eval`'s options.

    Ctrl-C cancels the eval at once (what finished is in the journal beside ``out``).
    From async code, ``await arun_eval(...)``.

    Example:
        ```python
        report = run_eval("instructions", ChatOpenAI(model="gpt-5.4-mini"), limit=10,
                          out="instructions.json", settings=EvalSettings(temperature=0.7))
        render_report(report)
        ```
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        raise RuntimeError("run_eval was called from a running event loop; use await arun_eval")
    _check_keywords(options)
    coroutine = arun_eval(tasks, model, **options)
    future = asyncio.run_coroutine_threadsafe(coroutine, background_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise
