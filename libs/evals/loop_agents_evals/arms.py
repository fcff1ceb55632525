"""The arms of an eval, each run on one task with the same budget of K answers.

`BUILTIN_ARMS` (their table is in docs/eval.md, "The arms"): ``single`` and ``resample``
(`SampleArm`), and loops made of controls (`loop_agents_evals.loop_arm`): ``loop`` (every
retry a repair), ``judge-loop``, ``loop-candidates``, ``restart``, ``diverse-first``,
``adaptive``. Arms of your own are a `loop(...)` or a factory. `arun_arm` runs one arm on
one task and grades its answer, the answer after each step and its transcript, counting
every chat-model call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from loop_agents.controls import Adaptive, Candidates, DiverseFirst, Restart
from loop_agents_evals.arm_protocol import ArmRun, EvalArm, Ran
from loop_agents_evals.factory_arm import FactoryArm
from loop_agents_evals.grading import (
    Attempts,
    Grades,
    entry,
    grader_for,
    requirement_points,
    retry_sent,
    task_messages,
)
from loop_agents_evals.learning import ArmLearning
from loop_agents_evals.loop_arm import LoopArm
from loop_agents_evals.report import TaskResult
from loop_agents_evals.sampling import CallCounter, FirstAnswers, at_temperature, was_cut_off
from loop_agents_evals.settings import (
    ARMS,
    ARMS_TEXT,
    CANDIDATES,
    FIRST_ANSWERS,
    Arm,
    ArmSettings,
    check_arm_name,
    unknown_arms_error,
)
from loop_agents_evals.tasks import Task, task_digest

__all__ = [
    "BUILTIN_ARMS",
    "ArmLike",
    "PairRunner",
    "SampleArm",
    "arun_arm",
    "resolve_arms",
    "why_own_first_answer",
]

ArmLike: TypeAlias = str | EvalArm | Callable[..., Any]
"""What an arm may be given as: a built-in arm's name, a `loop(...)`, or a factory."""


PairRunner: TypeAlias = Callable[["Task", str], Awaitable[TaskResult]]
"""Runs one arm (by its name) on one task (here, or on a LangGraph server)."""


class SampleArm(EvalArm):
    """``single``, or ``resample``: the request again until an answer passes the visible checks.

    Example:
        ```python
        single, resample = SampleArm(resample=False), SampleArm(resample=True)
        ```
    """

    def __init__(self, *, resample: bool) -> None:
        self.resample = resample

    def identity(self) -> dict[str, Any]:
        """``{"kind": "resample"}`` or ``{"kind": "single"}``."""
        return {"kind": "resample" if self.resample else "single"}

    async def run(self, run: ArmRun) -> Ran:
        """One answer, or independent answers until one passes the visible checks."""
        task, attempts = run.task, run.attempts
        messages = task_messages(task)
        count = run.settings.iterations if self.resample else 1
        answer = ""
        for attempt in range(1, count + 1):
            if attempt == 1 and run.first_answer is not None:
                reply = await run.first_answer(messages, run.config)
            else:
                reply = await run.model.ainvoke(messages, run.config)
            answer = attempts.add(reply)
            attempts.answers.append(answer)
            found = await run.grader.check(answer) if attempt < count else None
            made = entry(answer, found, iteration=attempt, cut_off=was_cut_off(reply))
            attempts.transcript.append(made | {"sent": retry_sent("first", attempt)})
            if found is not None and found.ok:
                return Ran(answer, attempt, steps=count)
        return Ran(answer, count, steps=count)


BUILTIN_ARMS: Mapping[Arm, EvalArm] = {
    "single": SampleArm(resample=False),
    "loop": LoopArm(),  # the seed's repair loop: create_loop_agent's default
    "resample": SampleArm(resample=True),
    "judge-loop": LoopArm(evaluator="judge"),
    "loop-candidates": LoopArm(controls=[Candidates(CANDIDATES)]),
    "restart": LoopArm(controls=[Restart(requirements=requirement_points)]),
    # every first answer is the loop's agent's, system prompt included
    "diverse-first": LoopArm(controls=[DiverseFirst(FIRST_ANSWERS)]),
    # learns across the eval's tasks; its seed is derived from the eval's (evals.learning)
    "adaptive": LoopArm(controls=[Adaptive(requirements=requirement_points)]),
}
"""Each built-in arm by its name, in the order the report shows them."""


def _custom(name: object, arm: object) -> EvalArm:
    """An arm of your own, checked: its name, and what it is."""
    check_arm_name(name)
    if name in ARMS:
        raise ValueError(
            f"{name!r} is a built-in arm's name; give your arm another name (e.g. "
            f"'my-{name}'), or {{{name!r}: {name!r}}} for the built-in one"
        )
    if isinstance(arm, EvalArm):
        return arm
    if callable(arm):
        return FactoryArm(arm)
    raise TypeError(
        f"arm {name!r} is {type(arm).__name__} {arm!r:.60}; an arm is a built-in arm's name, "
        f"a loop(...) or a factory (task, model, settings) -> agent"
    )


def resolve_arms(arms: object) -> dict[str, EvalArm]:
    """The arms to run by name, from a list of built-in names or a mapping of names to arms.

    A mapping's values are a built-in arm's name (under its own name), a `loop(...)`, any
    `EvalArm`, or a factory ``(task, model, settings) -> agent``.

    Raises:
        ValueError: empty, an unknown name (with the closest one), a built-in arm under
            another name, an arm of your own under a built-in or unusable name.
        TypeError: a value that is not an arm; a factory with the wrong signature.

    Example:
        ```python
        arms = resolve_arms({"single": "single", "fresh": loop(controls=[Restart()])})
        assert list(resolve_arms(["loop", "single"])) == ["loop", "single"]
        ```
    """
    if not isinstance(arms, Mapping):
        if isinstance(arms, str) or not isinstance(arms, list | tuple) or not arms:
            raise ValueError(
                f"arms must be a non-empty list of {ARMS_TEXT}, or a mapping of names to "
                f"arms; got {arms!r:.80}"
            )
        unknown = [a for a in arms if a not in ARMS]
        if unknown:
            raise ValueError(
                unknown_arms_error(unknown, where="arms")
                + " (for one of your own, give arms={'name': loop(...) or a factory})"
            )
        return {name: BUILTIN_ARMS[name] for name in dict.fromkeys(cast(list[Arm], arms))}
    if not arms:
        raise ValueError("arms is an empty mapping; give at least one arm")
    chosen: dict[str, EvalArm] = {}
    for name, arm in arms.items():
        if not isinstance(arm, str):
            chosen[cast(str, name)] = _custom(name, arm)
        elif arm not in ARMS:
            raise ValueError(unknown_arms_error([arm], where=f"arm {name!r}"))
        elif name != arm:
            raise ValueError(
                f"arm {name!r}: a built-in arm keeps its name; give {{{arm!r}: {arm!r}}} "
                f"(for the loop under a name of yours, give loop() with its controls)"
            )
        else:
            chosen[arm] = BUILTIN_ARMS[arm]
    return chosen


def why_own_first_answer(arm: EvalArm, name: str, settings: ArmSettings) -> str | None:
    """Why ``arm`` samples its own first answer under ``same_first_answer``, or ``None``.

    Example:
        ```python
        arm = resolve_arms(["loop"])["loop"]
        assert why_own_first_answer(arm, "loop", ArmSettings(arm_temperatures={"loop": 0.5}))
        ```
    """
    if not arm.takes_first_answer:
        return "an agent of its own sends its first request"
    temperature = settings.temperature_of(name)
    if temperature != settings.temperature:
        return f"its own temperature, {temperature:g}"
    return None


async def arun_arm(
    task: Task,
    arm: ArmLike,
    model: BaseChatModel,
    *,
    name: str | None = None,
    settings: ArmSettings | None = None,
    judge: BaseChatModel | None = None,
    config: RunnableConfig | None = None,
    first_answers: FirstAnswers | None = None,
    learning: ArmLearning | None = None,
) -> TaskResult:
    """Run one arm on one task and grade its answer (and the answer after each step).

    Args:
        task: The task.
        arm: A built-in arm's name, a `loop(...)` arm, or a factory
            ``(task, model, settings) -> agent``.
        model: The chat model that answers (at the arm's temperature).
        name: The name of an arm of your own (default ``"custom"``).
        settings: K, the temperatures and the judge's settings (default `ArmSettings`).
        judge: The judge's chat model in ``judge-loop`` (default ``model``).
        config: A run config to run under (callbacks, tags, a parent run).
        first_answers: The eval's shared first answers (``same_first_answer``).
        learning: What an arm that learns across tasks learned so far in the eval
            (`ArmLearning`); what this task adds is in the result's ``learned``.

    Returns:
        Its `TaskResult` (``attempts`` 1: the eval counts its retries).

    Raises:
        ValueError: an unknown arm, or a K the arm cannot spend.
        Exception: whatever the model raises (never a pass).

    Example:
        ```python
        outcome = await arun_arm(task, "resample", model, settings=ArmSettings(temperature=0.7))
        ```
    """
    settings = settings or ArmSettings()
    if isinstance(arm, str):
        label, spec = arm, resolve_arms([arm])[arm]
    else:
        label = name if name is not None else "custom"
        spec = _custom(label, arm)
    spec.check_budget(settings.iterations, label)
    counter = CallCounter()
    run_config = merge_configs(
        config,
        {
            "callbacks": [counter],
            "run_name": f"eval {task.id}: {label}",
            "metadata": {"eval_task": task.id, "eval_arm": label},
        },
    )
    grader = grader_for(task, code_timeout=settings.code_timeout)
    started = time.perf_counter()
    attempts = Attempts()
    sampler = at_temperature(model, settings.temperature_of(label))
    first = None
    if first_answers is not None and why_own_first_answer(spec, label, settings) is None:
        first = first_answers.for_task(task.id, task_digest(task), sampler)
    ran = await spec.run(
        ArmRun(
            name=label,
            task=task,
            model=sampler,
            judge=(
                at_temperature(judge or model, settings.judge_temperature)
                if spec.uses_judge
                else None
            ),
            settings=settings,
            grader=grader,
            attempts=attempts,
            config=run_config,
            first_answer=first,
            learning=learning if spec.learns else None,
        )
    )
    grades = Grades(grader)
    by_attempt = await grades.steps(attempts.answers, ran.answer, ran.steps)
    await grades.transcript(attempts.transcript)
    tokens_in, tokens_out = counter.totals
    return TaskResult(
        task_id=task.id,
        arm=label,
        passed=by_attempt[-1],
        iterations=ran.answers,
        model_calls=counter.calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        seconds=round(time.perf_counter() - started, 3),
        answer=ran.answer,
        judge_failures=ran.judge_failures,
        cached_input_tokens=counter.cached_tokens,
        cut_off=attempts.cut_off,
        by_attempt=by_attempt,
        part=task.part,
        transcript=tuple(attempts.transcript),
        opaque=ran.opaque,
        learned=ran.learned,
    )
