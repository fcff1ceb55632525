"""The four arms of an eval, each run on one task with the same budget of K answers.

- ``single``: one answer.
- ``loop``: `create_loop_agent` with the task's visible tests or checks as the
  evaluator: up to K answers, each failure's feedback sent back.
- ``resample``: up to K independent answers at temperature T; the first that passes
  the visible tests or checks is the answer, else the last. The compute-matched control.
- ``judge-loop``: `create_loop_agent` with an LLM judge (`llm_judge`) as the
  evaluator: up to K answers, feedback from the judge's opinion only, never from a
  test (intrinsic self-correction).

Every arm's answer is then graded the same way (`loop_agents.evals.grading`): the hidden
tests of a code task, every check of an instructions task. Model calls and tokens are
counted with a callback on every chat-model call of the arm (the agent's and the
judge's).

Example:
    ```python
    outcome = await arun_arm(task, "loop", model, settings=ArmSettings(iterations=3))
    print(outcome.passed, outcome.model_calls)
    ```
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import merge_configs

from loop_agents.evals.code_tests import DEFAULT_TIMEOUT
from loop_agents.evals.grading import Grader, grader_for, request_text, system_prompt
from loop_agents.evals.tasks import Task
from loop_agents.evaluators.judge import (
    JudgeError,
    JudgeFormat,
    judge_format_options,
    llm_judge,
)
from loop_agents.loop.factory import create_loop_agent
from loop_agents.loop.state import LoopContext, LoopEvaluation, LoopOutput
from loop_agents.loop.usage import TokenCounter

__all__ = ["ARMS", "Arm", "ArmOutcome", "ArmSettings", "PairRunner", "arun_arm", "check_arms"]

Arm = Literal["single", "loop", "resample", "judge-loop"]
"""The name of an arm."""

ARMS: tuple[Arm, ...] = get_args(Arm)
"""Every arm, in the order the report shows them."""

JUDGE_INSTRUCTIONS = (
    "You review an answer to the task the user gave. You cannot run code or tests: judge "
    "by reading. Score from 0 to 100 how completely and exactly the answer does what the "
    "task asks (100: every requirement met), and say concisely what must change for a "
    "higher score."
)


@dataclass(frozen=True)
class ArmSettings:
    """The settings every arm of one eval shares.

    Attributes:
        iterations: K, the most answers an arm may write (``single`` writes one).
        temperature: The sampling temperature of ``resample``'s answers. The other arms
            use the model as it is configured.
        judge_threshold: The judge's score (0-100) that accepts an answer in
            ``judge-loop``.
        judge_method: How the judge's verdict is requested: a structured-output
            method (``function_calling`` for llama.cpp's server), or ``"text"``
            (``Score: N`` / ``Feedback: ...``, for models without tool calling).
        code_timeout: Seconds a code answer and its tests may run.

    Raises:
        ValueError: a setting is out of range.
        TypeError: a setting has the wrong type.
    """

    iterations: int = 4
    temperature: float = 1.0
    judge_threshold: float = 80.0
    judge_method: JudgeFormat = "json_schema"
    code_timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        """Check every setting (see the class docstring)."""
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise TypeError(f"iterations must be a whole number >= 1; got {self.iterations!r}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1 (the budget K); got {self.iterations}")
        for name, low, high in (
            ("temperature", 0.0, 2.0),
            ("judge_threshold", 0.0, 100.0),
            ("code_timeout", 0.0, math.inf),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number; got {value!r}")
            if (
                not (low <= value <= high)
                or not math.isfinite(value)
                or (name == "code_timeout" and value <= 0)
            ):
                shown = "> 0" if name == "code_timeout" else f"from {low:g} to {high:g}"
                raise ValueError(f"{name} must be {shown}; got {value!r}")
        if self.judge_method not in get_args(JudgeFormat):
            raise ValueError(
                f"judge_method must be one of {', '.join(get_args(JudgeFormat))}; "
                f"got {self.judge_method!r}"
            )


@dataclass(frozen=True)
class ArmOutcome:
    """What one arm did on one task.

    Attributes:
        passed: Whether its answer passed the hidden tests (code) or every check.
        iterations: Answers written.
        model_calls: Chat-model calls made (the agent's and, in ``judge-loop``, the
            judge's, retries of an unusable verdict included).
        input_tokens: Prompt tokens over those calls (0 when the model reports none).
        output_tokens: Completion tokens over those calls.
        seconds: Wall-clock time, grading included.
        answer: The answer that was graded.
        judge_failures: ``judge-loop`` only: evaluations where the judge gave no usable
            verdict; the loop then ends with the answer it has.
    """

    passed: bool
    iterations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    answer: str
    judge_failures: int = 0


PairRunner: TypeAlias = Callable[["Task", Arm], Awaitable[ArmOutcome]]
"""Runs one arm on one task (here, or on a LangGraph server) and returns its outcome."""


def check_arms(arms: object) -> tuple[Arm, ...]:
    """Validate a list of arm names (order kept, repeats dropped).

    Raises:
        ValueError: empty, or a name that is not an arm.

    Example:
        ```python
        assert check_arms(["loop", "single"]) == ("loop", "single")
        ```
    """
    if isinstance(arms, str) or not isinstance(arms, list | tuple) or not arms:
        raise ValueError(f"arms must be a non-empty list of {', '.join(ARMS)}; got {arms!r}")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(
            f"unknown arm {', '.join(map(repr, unknown))}; the arms are {', '.join(ARMS)}"
        )
    return tuple(dict.fromkeys(cast(list[Arm], list(arms))))


class CallCounter(TokenCounter):
    """Counts chat-model calls as well as their tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """Count one finished model call and add its usage."""
        with self._lock:
            self.calls += 1
        super().on_llm_end(response, **kwargs)


def _agent(model: Runnable[Any, Any], task: Task) -> Runnable[Any, Any]:
    system = SystemMessage(system_prompt(task))

    def with_system(messages: list[AnyMessage]) -> list[AnyMessage]:
        return [system, *messages]

    return RunnableLambda(with_system, name="instructions") | model


async def arun_arm(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    *,
    settings: ArmSettings | None = None,
    judge: BaseChatModel | None = None,
    config: RunnableConfig | None = None,
) -> ArmOutcome:
    """Run one arm on one task and grade its answer.

    Args:
        task: The task.
        arm: ``"single"``, ``"loop"``, ``"resample"`` or ``"judge-loop"``.
        model: The chat model that answers.
        settings: K, the temperature and the judge's settings (default `ArmSettings`).
        judge: The judge's chat model in ``judge-loop`` (default ``model``).
        config: A run config to run under (callbacks, tags, a parent run).

    Returns:
        An `ArmOutcome`.

    Raises:
        Exception: whatever the model raises (a server error, a timeout): the caller
            retries or reports it; it is never a pass.

    Example:
        ```python
        outcome = await arun_arm(task, "resample", model, settings=ArmSettings(temperature=0.7))
        ```
    """
    settings = settings or ArmSettings()
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}")
    counter = CallCounter()
    run_config = merge_configs(
        config,
        {
            "callbacks": [counter],
            "run_name": f"eval {task.id}: {arm}",
            "metadata": {"eval_task": task.id, "eval_arm": arm},
        },
    )
    grader = grader_for(task, code_timeout=settings.code_timeout)
    started = time.perf_counter()
    judge_failures = 0
    if arm in ("single", "resample"):
        answer, iterations = await _sample(task, arm, model, settings, grader, run_config)
    else:
        answer, iterations, judge_failures = await _loop(
            task, arm, model, judge or model, settings, grader, run_config
        )
    passed = await grader.final(answer)
    tokens_in, tokens_out = counter.totals
    return ArmOutcome(
        passed=passed,
        iterations=iterations,
        model_calls=counter.calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        seconds=time.perf_counter() - started,
        answer=answer,
        judge_failures=judge_failures,
    )


async def _sample(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    settings: ArmSettings,
    grader: Grader,
    config: RunnableConfig,
) -> tuple[str, int]:
    """``single``: one answer. ``resample``: independent answers until one passes."""
    messages: list[AnyMessage] = [
        SystemMessage(system_prompt(task)),
        HumanMessage(request_text(task)),
    ]
    if arm == "single":
        reply = await model.ainvoke(messages, config)
        return _text(reply), 1
    sampler = model.bind(temperature=settings.temperature)
    answer = ""
    for attempt in range(1, settings.iterations + 1):
        answer = _text(await sampler.ainvoke(messages, config))
        ok, _ = await grader.visible(answer)
        if ok:
            return answer, attempt
    return answer, settings.iterations


async def _loop(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    judge_model: BaseChatModel,
    settings: ArmSettings,
    grader: Grader,
    config: RunnableConfig,
) -> tuple[str, int, int]:
    """``loop`` (tests or checks as the evaluator) and ``judge-loop`` (an LLM judge)."""
    failures = 0

    async def by_tests(context: LoopContext) -> LoopEvaluation:
        ok, feedback = await grader.visible(context["last_response"].text)
        return {"stop": True} if ok else {"stop": False, "feedback": feedback}

    if arm == "loop":  # the visible tests are the evaluator: no judge is built
        evaluator: Any = RunnableLambda(by_tests, name="visible tests")
    else:
        judge = llm_judge(
            judge_model,
            JUDGE_INSTRUCTIONS,
            threshold=settings.judge_threshold,
            **judge_format_options(settings.judge_method),
            name="judge",
        )

        async def by_judge(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
            nonlocal failures
            try:
                return await judge.ainvoke(context, config)
            except JudgeError:
                failures += 1  # no usable verdict, so no feedback: the loop ends here
                return {"stop": True, "feedback": "(the judge gave no usable verdict)"}

        evaluator = RunnableLambda(by_judge, name="judge")
    loop = create_loop_agent(
        _agent(model, task), evaluator, settings.iterations, name=f"eval {arm}"
    )
    result = cast(
        LoopOutput,
        await loop.ainvoke({"messages": [HumanMessage(request_text(task))]}, config),
    )
    return result["last_response"].text, int(result.get("iteration", 0)), failures


def _text(reply: object) -> str:
    if isinstance(reply, AIMessage):
        return reply.text
    return str(reply)
