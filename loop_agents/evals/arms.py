"""The arms of an eval, each run on one task with the same budget of K answers.

The built-in arms (`BUILTIN_ARMS`):

- ``single``: one answer.
- ``loop``: `create_loop_agent` with the task's visible tests or checks as the
  evaluator: up to K answers, each failure's feedback sent back (and, for an answer
  cut off at the token cap, a sentence saying so).
- ``resample``: up to K independent answers; the first that passes the visible tests
  or checks is the answer, else the last. The compute-matched control.
- ``judge-loop``: `create_loop_agent` with an LLM judge (`llm_judge`) as the
  evaluator: up to K answers, feedback from the judge's opinion only, never from a
  test (intrinsic self-correction).
- ``loop-candidates``: the ``loop`` with two candidate answers per iteration
  (``candidates=2``) for K/2 iterations: K answers in all (K must be even). Not run by
  default.
- ``restart``: the ``loop`` with a `Restart` control: after a repair that did not raise
  the share of visible tests or checks passed (or an answer identical to an earlier
  one), the next answer is a fresh sample sent the task and what the earlier answers
  failed, as a list of what must hold. Not run by default.
- ``diverse-first``: the ``loop`` with a `DiverseFirst` control: two first answers at
  once, then repair of the better one: K answers in all (K >= 2). Not run by default.
- ``adaptive``: the ``loop`` with an `Adaptive` control: each answer after the first is
  a repair, a fresh sample or a fresh sample told what must hold, chosen by Thompson
  sampling from how each kind did on the eval's earlier tasks (`ArmLearning`, kept in
  the journal; see `loop_agents.evals.learning`). No extra model call. Not run by
  default.

Arms of your own: a loop built from `create_loop_agent`'s options
(`loop_agents.evals.loop_arm.loop`), or a factory ``(task, model, settings) -> agent``
(`loop_agents.evals.factory_arm`), given by name: ``arms={"mine": loop(...)}``.

Every arm's agent samples at the same temperature (`ArmSettings.temperature`, 1.0)
unless one is set for the arm (`ArmSettings.arm_temperatures`); the judge samples at
`ArmSettings.judge_temperature` (0). Every arm's answer is then graded the same way
(`loop_agents.evals.grading`): the hidden tests of a code task, every check of an
instructions task; so is the answer the arm would have given had it stopped after
each attempt (`ArmOutcome.by_attempt`), and every answer of its transcript. Model calls
and tokens are counted with a callback on every chat-model call of the arm (the
agent's and the judge's).

Example:
    ```python
    outcome = await arun_arm(task, "loop", model, settings=ArmSettings(iterations=3))
    print(outcome.passed, outcome.model_calls, outcome.by_attempt)
    ```
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from loop_agents.evals.arm_names import ARMS, DEFAULT_ARMS, Arm, check_arm_name
from loop_agents.evals.arm_protocol import ArmRun, EvalArm
from loop_agents.evals.arm_settings import ArmSettings, check_arm_budget
from loop_agents.evals.builtin_arms import BUILTIN_ARMS
from loop_agents.evals.factory_arm import FactoryArm
from loop_agents.evals.first_answers import FirstAnswers
from loop_agents.evals.grading import grader_for
from loop_agents.evals.learning import ArmLearning
from loop_agents.evals.sampling import (
    CallCounter,
    at_temperature,
    sampled_temperature,
    was_cut_off,
)
from loop_agents.evals.task_evaluator import CUT_OFF_FEEDBACK
from loop_agents.evals.tasks import Task, task_digest
from loop_agents.evals.transcript import Attempts, Grades

__all__ = [
    "ARMS",
    "CUT_OFF_FEEDBACK",
    "DEFAULT_ARMS",
    "Arm",
    "ArmLike",
    "ArmOutcome",
    "ArmSettings",
    "PairRunner",
    "arun_arm",
    "at_temperature",
    "check_arm_budget",
    "check_arms",
    "resolve_arms",
    "sampled_temperature",
    "was_cut_off",
]

ArmLike: TypeAlias = str | EvalArm | Callable[..., Any]
"""What an arm may be given as: a built-in arm's name, a `loop(...)`, or a factory."""


@dataclass(frozen=True)
class ArmOutcome:
    """What one arm did on one task.

    Attributes:
        passed: Whether its answer passed the hidden tests (code) or every check.
        iterations: Answers written (``loop-candidates``: both candidates of each
            iteration).
        model_calls: Chat-model calls made (the agent's and, in ``judge-loop``, the
            judge's, retries of an unusable verdict included).
        input_tokens: Prompt tokens over those calls (0 when the model reports none).
        output_tokens: Completion tokens over those calls.
        seconds: Wall-clock time, grading included.
        answer: The answer that was graded.
        judge_failures: ``judge-loop`` only: evaluations where the judge gave no usable
            verdict; the loop then ends with the answer it has.
        cached_input_tokens: Of the prompt tokens, those the server read from its
            prompt cache.
        cut_off: Answers that ended at the token cap (``finish_reason`` ``"length"``).
        by_attempt: Whether the answer the arm would have given, had it stopped after
            step 1, 2, ... passes the final grading: one entry for ``single``, K for
            ``loop``, ``resample`` and ``judge-loop`` (after the arm stopped, its
            final answer stands), K/2 iterations for ``loop-candidates``; for an arm of
            your own, one per attempt read (at least K), or one for an opaque agent.
        transcript: Every answer the arm wrote, in order, with what its evaluator said
            of it and whether it passes (see `loop_agents.evals.transcript`).
        opaque: Whether the arm's attempts could not be read (an agent of your own that
            is not a loop): ``by_attempt`` and ``transcript`` then hold its final
            answer only.
        learned: For an arm that learns across tasks (an `Adaptive` loop): the store
            items its loop added on this task (see `loop_agents.evals.learning`).
    """

    passed: bool
    iterations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    answer: str
    judge_failures: int = 0
    cached_input_tokens: int = 0
    cut_off: int = 0
    by_attempt: tuple[bool, ...] = ()
    transcript: tuple[dict[str, Any], ...] = ()
    opaque: bool = False
    learned: tuple[dict[str, Any], ...] = ()


PairRunner: TypeAlias = Callable[["Task", str], Awaitable[ArmOutcome]]
"""Runs one arm (by its name) on one task (here, or on a LangGraph server)."""


def check_arms(arms: object) -> tuple[Arm, ...]:
    """Validate a list of built-in arm names (order kept, repeats dropped).

    Raises:
        ValueError: empty, or a name that is not an arm.

    Example:
        ```python
        assert check_arms(["loop", "single"]) == ("loop", "single")
        ```
    """
    if isinstance(arms, str) or not isinstance(arms, list | tuple) or not arms:
        raise ValueError(
            f"arms must be a non-empty list of {', '.join(ARMS)}, or a mapping of names to "
            f"arms; got {arms!r:.80}"
        )
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(
            f"unknown arm {', '.join(map(repr, unknown))}; the arms are {', '.join(ARMS)} "
            f"(for one of your own, give arms={{'name': loop(...) or a factory}})"
        )
    return tuple(dict.fromkeys(cast(list[Arm], list(arms))))


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
    """The arms to run by name: a list of built-in names, or a mapping of names to arms.

    A mapping's values are a built-in arm's name (under its own name,
    ``{"resample": "resample"}``), a `loop(...)` arm, any `EvalArm`, or a factory
    ``(task, model, settings) -> agent``.

    Raises:
        ValueError: empty, an unknown built-in name, a built-in arm under another name,
            an arm of your own under a built-in name or an unusable name, a list that
            is not of names.
        TypeError: a value that is not an arm; a factory with the wrong signature.

    Example:
        ```python
        arms = resolve_arms({"single": "single", "fresh": loop(history="feedback_log")})
        ```
    """
    if not isinstance(arms, Mapping):
        return {name: BUILTIN_ARMS[name] for name in check_arms(arms)}
    if not arms:
        raise ValueError("arms is an empty mapping; give at least one arm")
    chosen: dict[str, EvalArm] = {}
    for name, arm in arms.items():
        if isinstance(arm, str):
            if arm not in ARMS:
                raise ValueError(
                    f"arm {name!r}: unknown built-in arm {arm!r}; the arms are {', '.join(ARMS)}"
                )
            if name != arm:
                raise ValueError(
                    f"arm {name!r}: a built-in arm keeps its name; give {{{arm!r}: {arm!r}}} "
                    f"(for the loop under a name of yours, give loop() with its options)"
                )
            chosen[arm] = BUILTIN_ARMS[arm]
        else:
            chosen[cast(str, name)] = _custom(name, arm)
    return chosen


def _arm_of(arm: object, name: str | None) -> tuple[str, EvalArm]:
    if isinstance(arm, str):
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}")
        return arm, BUILTIN_ARMS[arm]
    label = name if name is not None else "custom"
    return label, _custom(label, arm)


def why_own_first_answer(arm: EvalArm, name: str, settings: ArmSettings) -> str | None:
    """Why ``arm`` samples its own first answer under ``same_first_answer``, or ``None``.

    The eval's shared first answer is sampled at the eval's temperature from the task's
    own request: an arm given another temperature, or whose agent sends a request of its
    own (an arm built by a factory), samples its own.

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
) -> ArmOutcome:
    """Run one arm on one task and grade its answer (and the answer after each step).

    Args:
        task: The task.
        arm: A built-in arm's name (``"single"``, ``"loop"``, ``"resample"``,
            ``"judge-loop"``, ``"loop-candidates"``, ``"restart"``,
            ``"diverse-first"``, ``"adaptive"``), a `loop(...)` arm, or a factory
            ``(task, model, settings) -> agent``.
        model: The chat model that answers (it samples at the arm's temperature).
        name: The name of an arm of your own (default ``"custom"``): its run's name and
            the key of its temperature in ``settings.arm_temperatures``.
        settings: K, the temperatures and the judge's settings (default `ArmSettings`).
        judge: The judge's chat model in ``judge-loop`` (default ``model``).
        config: A run config to run under (callbacks, tags, a parent run).
        first_answers: The first answers shared by the arms of an eval
            (`loop_agents.evals.first_answers`): an arm that samples at their
            temperature and makes its first call itself starts from the task's.
        learning: For an arm that learns across tasks (``adaptive``, a loop with an
            `Adaptive` control): what it learned so far in the eval, which the task's
            loop starts from (`loop_agents.evals.learning`); without it the loop starts
            from nothing. What the task adds is in the outcome's ``learned``; it joins
            ``learning`` only when the caller adds it (`ArmLearning.add`).

    Returns:
        An `ArmOutcome`.

    Raises:
        ValueError: an unknown arm, or a K the arm cannot spend (an odd K for
            ``loop-candidates``).
        Exception: whatever the model raises (a server error, a timeout): the caller
            retries or reports it; it is never a pass.

    Example:
        ```python
        outcome = await arun_arm(task, "resample", model, settings=ArmSettings(temperature=0.7))
        ```
    """
    settings = settings or ArmSettings()
    label, spec = _arm_of(arm, name)
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
    return ArmOutcome(
        passed=by_attempt[-1],
        iterations=ran.answers,
        model_calls=counter.calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        seconds=time.perf_counter() - started,
        answer=ran.answer,
        judge_failures=ran.judge_failures,
        cached_input_tokens=counter.cached_tokens,
        cut_off=attempts.cut_off,
        by_attempt=by_attempt,
        transcript=tuple(attempts.transcript),
        opaque=ran.opaque,
        learned=ran.learned,
    )
