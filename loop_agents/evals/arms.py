"""The arms of an eval, each run on one task with the same budget of K answers.

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

Every arm's agent samples at the same temperature (`ArmSettings.temperature`, 1.0)
unless one is set for the arm (`ArmSettings.arm_temperatures`); the judge samples at
`ArmSettings.judge_temperature` (0). Every arm's answer is then graded the same way
(`loop_agents.evals.grading`): the hidden tests of a code task, every check of an
instructions task; so is the answer the arm would have given had it stopped after
each attempt (`ArmOutcome.by_attempt`). Model calls and tokens are counted with a
callback on every chat-model call of the arm (the agent's and the judge's).

Example:
    ```python
    outcome = await arun_arm(task, "loop", model, settings=ArmSettings(iterations=3))
    print(outcome.passed, outcome.model_calls, outcome.by_attempt)
    ```
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import merge_configs

from loop_agents.evals.code_tests import DEFAULT_TIMEOUT
from loop_agents.evals.grading import (
    Grader,
    VisibleResult,
    grader_for,
    request_text,
    requirement_points,
    system_prompt,
)
from loop_agents.evals.tasks import Task
from loop_agents.evaluators.judge import (
    JudgeError,
    JudgeFormat,
    judge_format_options,
    llm_judge,
)
from loop_agents.loop.controls.base import LoopControl
from loop_agents.loop.controls.candidates import best_candidate
from loop_agents.loop.controls.diverse_first import DiverseFirst
from loop_agents.loop.controls.restart import RESTART_KEY, Restart
from loop_agents.loop.factory import create_loop_agent
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.state import IterationRecord, LoopContext, LoopEvaluation, LoopOutput
from loop_agents.loop.usage import TokenCounter

__all__ = [
    "ARMS",
    "DEFAULT_ARMS",
    "Arm",
    "ArmOutcome",
    "ArmSettings",
    "PairRunner",
    "arun_arm",
    "at_temperature",
    "check_arm_budget",
    "check_arms",
    "sampled_temperature",
    "was_cut_off",
]

Arm = Literal[
    "single", "loop", "resample", "judge-loop", "loop-candidates", "restart", "diverse-first"
]
"""The name of an arm."""

ARMS: tuple[Arm, ...] = get_args(Arm)
"""Every arm, in the order the report shows them."""

DEFAULT_ARMS: tuple[Arm, ...] = ("single", "loop", "resample", "judge-loop")
"""The arms an eval runs when none are named (``loop-candidates`` is chosen explicitly)."""

CANDIDATES = 2
"""Answers per iteration of ``loop-candidates``."""

FIRST_ANSWERS = 2
"""First answers of ``diverse-first`` (then one repair per iteration)."""

JUDGE_INSTRUCTIONS = (
    "You review an answer to the task the user gave. You cannot run code or tests: judge "
    "by reading. Score from 0 to 100 how completely and exactly the answer does what the "
    "task asks (100: every requirement met), and say concisely what must change for a "
    "higher score."
)

CUT_OFF_FEEDBACK = {
    "code": (
        "Your answer was cut off at the token cap before it ended. Answer with the code "
        "only: one code block, no explanation."
    ),
    "instructions": (
        "Your answer was cut off at the token cap before it ended. Answer more briefly, "
        "with the answer only."
    ),
}
"""The sentence ``loop``'s feedback ends with when the answer hit the token cap."""


@dataclass(frozen=True)
class ArmSettings:
    """The settings every arm of one eval shares.

    Attributes:
        iterations: K, the most answers an arm may write (``single`` writes one).
        temperature: The sampling temperature of every arm's answers (the agent's).
        arm_temperatures: Arm name -> its own temperature, for the arms that do not
            sample at ``temperature``.
        judge_temperature: The sampling temperature of the judge of ``judge-loop``.
        judge_threshold: The judge's score (0-100) that accepts an answer in
            ``judge-loop``.
        judge_method: How the judge's verdict is requested: a structured-output
            method (``function_calling`` for llama.cpp's server), or ``"text"``
            (``Score: N`` / ``Feedback: ...``, for models without tool calling).
        code_timeout: Seconds a code answer and its tests may run.

    Raises:
        ValueError: a setting is out of range.
        TypeError: a setting has the wrong type.

    Example:
        ```python
        settings = ArmSettings(iterations=4, arm_temperatures={"resample": 0.7})
        assert settings.temperature_of("resample") == 0.7
        assert settings.temperature_of("loop") == 1.0
        ```
    """

    iterations: int = 4
    temperature: float = 1.0
    arm_temperatures: Mapping[str, float] = field(default_factory=dict, hash=False)
    judge_temperature: float = 0.0
    judge_threshold: float = 80.0
    judge_method: JudgeFormat = "json_schema"
    code_timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        """Check every setting (see the class docstring)."""
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise TypeError(f"iterations must be a whole number >= 1; got {self.iterations!r}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1 (the budget K); got {self.iterations}")
        if not isinstance(self.arm_temperatures, Mapping):
            raise TypeError(
                f"arm_temperatures must map arm names to temperatures; "
                f"got {self.arm_temperatures!r}"
            )
        unknown = [a for a in self.arm_temperatures if a not in ARMS]
        if unknown:
            raise ValueError(
                f"arm_temperatures: unknown arm {', '.join(map(repr, unknown))}; the arms "
                f"are {', '.join(ARMS)}"
            )
        object.__setattr__(self, "arm_temperatures", dict(self.arm_temperatures))
        checked: list[tuple[str, object, float, float]] = [
            ("temperature", self.temperature, 0.0, 2.0),
            ("judge_temperature", self.judge_temperature, 0.0, 2.0),
            ("judge_threshold", self.judge_threshold, 0.0, 100.0),
            ("code_timeout", self.code_timeout, 0.0, math.inf),
        ]
        checked += [
            (f"arm_temperatures[{arm!r}]", value, 0.0, 2.0)
            for arm, value in self.arm_temperatures.items()
        ]
        for name, value, low, high in checked:
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

    def temperature_of(self, arm: str) -> float:
        """The temperature ``arm``'s agent samples at.

        Example:
            ```python
            ArmSettings(temperature=0.5).temperature_of("single")  # 0.5
            ```
        """
        return float(self.arm_temperatures.get(arm, self.temperature))

    def steps(self, arm: str) -> int:
        """How many steps ``arm`` may take (the length of `ArmOutcome.by_attempt`).

        ``single``: 1; ``loop-candidates``: K/2 iterations; the others: K answers.

        Example:
            ```python
            assert ArmSettings(iterations=4).steps("loop-candidates") == 2
            ```
        """
        if arm == "single":
            return 1
        if arm == "loop-candidates":
            return max(1, self.iterations // CANDIDATES)
        return self.iterations


def check_arm_budget(arms: Sequence[str], iterations: int) -> None:
    """Refuse a budget an arm cannot spend exactly.

    An odd K for ``loop-candidates``; K below 2 for ``diverse-first``.

    Raises:
        ValueError: the message names the fix.

    Example:
        ```python
        check_arm_budget(["loop", "loop-candidates"], 4)  # fine
        ```
    """
    if "diverse-first" in arms and iterations < FIRST_ANSWERS:
        raise ValueError(
            f"diverse-first writes {FIRST_ANSWERS} first answers, so its budget K must be at "
            f"least {FIRST_ANSWERS}; got K={iterations}: give --iterations {FIRST_ANSWERS} or "
            f"more, or leave diverse-first out of --arms"
        )
    if "loop-candidates" in arms and iterations % CANDIDATES:
        raise ValueError(
            f"loop-candidates writes {CANDIDATES} answers per iteration, so its budget K "
            f"must be even; got K={iterations}: give --iterations {iterations + 1} (or "
            f"{iterations - 1}), or leave loop-candidates out of --arms"
            if iterations > 1
            else f"loop-candidates writes {CANDIDATES} answers per iteration, so its budget "
            f"K must be even; got K={iterations}: give --iterations 2, or leave "
            f"loop-candidates out of --arms"
        )


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
            final answer stands), K/2 iterations for ``loop-candidates``.
        transcript: Every answer the arm wrote, in order: ``answer``; ``ok``,
            ``feedback`` and ``score``, what the visible tests or checks (or the judge)
            said of it (``None`` where the arm did not check it: a ``single`` answer,
            ``resample``'s last); ``sent``, what the call was sent: ``"first"`` (the
            task only), ``"repair"`` (earlier answers and their feedback) or
            ``"fresh"`` (a ``restart``'s new sample: the task and what must hold).
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


def was_cut_off(message: object) -> bool:
    """Whether a model's answer ended at the token cap, not where the model stopped.

    Read from the message's ``response_metadata``: ``finish_reason`` ``"length"``
    (OpenAI's API, llama.cpp's server, vLLM), ``done_reason`` ``"length"`` (Ollama's own
    API) or ``stop_reason`` ``"max_tokens"`` (Anthropic's).

    Example:
        ```python
        assert was_cut_off(AIMessage("def f(", response_metadata={"finish_reason": "length"}))
        ```
    """
    metadata = getattr(message, "response_metadata", None)
    if not isinstance(metadata, Mapping):
        return False
    return (
        metadata.get("finish_reason") == "length"
        or metadata.get("done_reason") == "length"
        or metadata.get("stop_reason") == "max_tokens"
    )


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


def at_temperature(model: BaseChatModel, temperature: float) -> BaseChatModel:
    """A copy of ``model`` that samples at ``temperature``.

    The copy is made with the model's own settings and validation, so a model that
    refuses other temperatures keeps its rule (``ChatOpenAI`` sends none to OpenAI's
    reasoning models, which accept only their default). A model that cannot be made
    again from its settings is copied with the temperature set; one without a
    ``temperature`` setting is returned as it is.

    Example:
        ```python
        judge = at_temperature(ChatOpenAI(model="gpt-5.4-mini"), 0.0)
        ```
    """
    if "temperature" not in type(model).model_fields:
        return model
    settings = {name: getattr(model, name) for name in model.model_fields_set}
    try:
        return type(model)(**(settings | {"temperature": temperature}))
    except (TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return model.model_copy(update={"temperature": temperature})


def sampled_temperature(model: BaseChatModel, temperature: float) -> float | None:
    """The temperature ``model`` really samples at when asked for ``temperature``.

    ``None`` when the model keeps its own default (see `at_temperature`).

    Example:
        ```python
        sampled_temperature(ChatOpenAI(model="gpt-5.4-mini"), 0.0)  # None: its default
        ```
    """
    if "temperature" not in type(model).model_fields:
        return None
    value = getattr(at_temperature(model, temperature), "temperature", None)
    return float(value) if isinstance(value, int | float) else None


def _agent(model: BaseChatModel, task: Task, attempts: _Attempts) -> Runnable[Any, Any]:
    """The arm's agent: the task's system message, then ``model``; notes what it is sent."""
    system = SystemMessage(system_prompt(task))

    def with_system(messages: list[AnyMessage]) -> list[AnyMessage]:
        attempts.sent.append(_sent_kind(messages))
        return [system, *messages]

    return RunnableLambda(with_system, name="instructions") | model


def _sent_kind(messages: Sequence[AnyMessage]) -> str:
    """``"fresh"`` (a `Restart`'s new sample), ``"repair"`` (feedback in view) or ``"first"``."""
    if any(RESTART_KEY in m.additional_kwargs for m in messages):
        return "fresh"
    if any(is_feedback(m) for m in messages):
        return "repair"
    return "first"


@dataclass
class _Attempts:
    """What an arm wrote, as it wrote it.

    ``answers``: the answer the arm would give after each step (for `_grade_steps`);
    ``transcript``: every answer written, in order, with what the arm was told of it;
    ``sent``: what each agent call was sent (`_sent_kind`), in call order.
    """

    answers: list[str] = field(default_factory=list)
    cut_off: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def add(self, message: object) -> str:
        self.cut_off += was_cut_off(message)
        return _text(message)


def _entry(answer: str, found: VisibleResult | None = None) -> dict[str, Any]:
    """One transcript entry: the answer, and the visible verdict on it when one was made."""
    return {
        "answer": answer,
        "ok": None if found is None else found.ok,
        "feedback": None if found is None else found.feedback,
        "score": None if found is None else found.score,
    }


async def arun_arm(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    *,
    settings: ArmSettings | None = None,
    judge: BaseChatModel | None = None,
    config: RunnableConfig | None = None,
) -> ArmOutcome:
    """Run one arm on one task and grade its answer (and the answer after each step).

    Args:
        task: The task.
        arm: ``"single"``, ``"loop"``, ``"resample"``, ``"judge-loop"`` or
            ``"loop-candidates"``.
        model: The chat model that answers (it samples at the arm's temperature).
        settings: K, the temperatures and the judge's settings (default `ArmSettings`).
        judge: The judge's chat model in ``judge-loop`` (default ``model``).
        config: A run config to run under (callbacks, tags, a parent run).

    Returns:
        An `ArmOutcome`.

    Raises:
        ValueError: an unknown arm, or an odd K for ``loop-candidates``.
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
    check_arm_budget([arm], settings.iterations)
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
    sampler = at_temperature(model, settings.temperature_of(arm))
    started = time.perf_counter()
    judge_failures = 0
    attempts = _Attempts()
    if arm in ("single", "resample"):
        answer, iterations = await _sample(
            task, arm, sampler, settings, grader, attempts, run_config
        )
    else:
        judge_model = at_temperature(judge or model, settings.judge_temperature)
        answer, iterations, judge_failures = await _loop(
            task, arm, sampler, judge_model, settings, grader, attempts, run_config
        )
    by_attempt = await _grade_steps(attempts.answers, answer, settings.steps(arm), grader)
    tokens_in, tokens_out = counter.totals
    return ArmOutcome(
        passed=by_attempt[-1],
        iterations=iterations,
        model_calls=counter.calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        seconds=time.perf_counter() - started,
        answer=answer,
        judge_failures=judge_failures,
        cached_input_tokens=counter.cached_tokens,
        cut_off=attempts.cut_off,
        by_attempt=by_attempt,
        transcript=tuple(attempts.transcript),
    )


async def _grade_steps(
    answers: Sequence[str], final: str, steps: int, grader: Grader
) -> tuple[bool, ...]:
    """Grade the answer after each step; after the arm stopped, its final answer stands.

    The final answer is graded last, whatever the steps were (it is the arm's verdict).
    """
    verdicts: dict[str, bool] = {}

    async def grade(answer: str) -> bool:
        if answer not in verdicts:
            verdicts[answer] = await grader.final(answer)
        return verdicts[answer]

    graded = [await grade(answer) for answer in list(answers)[: steps - 1]]
    passed = await grade(final)
    return tuple(graded + [passed] * (steps - len(graded)))


async def _sample(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    settings: ArmSettings,
    grader: Grader,
    attempts: _Attempts,
    config: RunnableConfig,
) -> tuple[str, int]:
    """``single``: one answer. ``resample``: independent answers until one passes."""
    messages: list[AnyMessage] = [
        SystemMessage(system_prompt(task)),
        HumanMessage(request_text(task)),
    ]
    count = 1 if arm == "single" else settings.iterations
    answer = ""
    for attempt in range(1, count + 1):
        answer = attempts.add(await model.ainvoke(messages, config))
        attempts.answers.append(answer)
        found = await grader.check(answer) if attempt < count else None
        attempts.transcript.append(_entry(answer, found) | {"sent": "first"})
        if found is not None and found.ok:
            return answer, attempt
    return answer, count


def _loop_controls(arm: Arm) -> list[LoopControl]:
    if arm == "restart":
        return [Restart(requirements=requirement_points)]
    if arm == "diverse-first":  # every first answer is the loop's agent's, system prompt included
        return [DiverseFirst(FIRST_ANSWERS)]
    return []


async def _loop(
    task: Task,
    arm: Arm,
    model: BaseChatModel,
    judge_model: BaseChatModel,
    settings: ArmSettings,
    grader: Grader,
    attempts: _Attempts,
    config: RunnableConfig,
) -> tuple[str, int, int]:
    """The arms that are loops: by the visible tests or checks, or by an LLM judge."""
    failures = 0
    seen: dict[tuple[int, int], dict[str, Any]] = {}  # (iteration, candidate) -> entry

    def note(context: LoopContext, found: VisibleResult | None = None) -> AIMessage:
        response = context["last_response"]
        key = (context["iteration"], context.get("candidate", 1))
        seen[key] = _entry(attempts.add(response), found)
        return response

    async def by_tests(context: LoopContext) -> LoopEvaluation:
        found = await grader.check(context["last_response"].text)
        response = note(context, found)
        if found.ok:
            return {"stop": True, "score": found.score}
        feedback = found.feedback
        if was_cut_off(response):
            feedback = f"{feedback}\n\n{CUT_OFF_FEEDBACK[task.kind]}".strip()
            seen[(context["iteration"], context.get("candidate", 1))]["feedback"] = feedback
        return {"stop": False, "feedback": feedback, "score": found.score}

    if arm != "judge-loop":  # the visible tests are the evaluator
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
            note(context)
            entry = seen[(context["iteration"], context.get("candidate", 1))]
            try:
                verdict = await judge.ainvoke(context, config)
            except JudgeError:
                failures += 1  # no usable verdict, so no feedback: the loop ends here
                return {"stop": True, "feedback": "(the judge gave no usable verdict)"}
            entry |= {"ok": verdict["stop"], "feedback": verdict.get("feedback", "")}
            entry["score"] = verdict.get("score")
            return verdict

        evaluator = RunnableLambda(by_judge, name="judge")
    candidates = CANDIDATES if arm == "loop-candidates" else 1
    first = FIRST_ANSWERS if arm == "diverse-first" else 1
    loop = create_loop_agent(
        _agent(model, task, attempts),
        evaluator,
        settings.steps(arm) - first + 1,
        name=f"eval {arm}",
        candidates=candidates,
        controls=_loop_controls(arm),
    )
    result = cast(
        LoopOutput,
        await loop.ainvoke({"messages": [HumanMessage(request_text(task))]}, config),
    )
    records = result.get("records", [])
    if arm == "diverse-first" and records:
        attempts.answers += _best_so_far(seen, records[0])
        records = records[1:]
    for record in records:
        chosen = seen.get((record["iteration"], record.get("candidate", 1)))
        if chosen is not None:
            attempts.answers.append(chosen["answer"])
    ordered = sorted(seen)
    for key, kind in zip(ordered, attempts.sent, strict=False):
        attempts.transcript.append(seen[key] | {"sent": kind})
    return result["last_response"].text, len(seen), failures


def _best_so_far(
    seen: Mapping[tuple[int, int], Mapping[str, Any]], record: IterationRecord
) -> list[str]:
    """The answer after each first answer of ``diverse-first``: the best of those so far."""
    numbers = sorted(number for iteration, number in seen if iteration == 1)
    steps: list[str] = []
    for count in range(1, len(numbers) + 1):
        pool = [
            (n, {"stop": bool(seen[(1, n)]["ok"]), "score": seen[(1, n)]["score"]})
            for n in numbers[:count]
        ]
        best = best_candidate(cast(Any, pool))
        steps.append(str(seen[(1, best)]["answer"]))
    if numbers and record.get("candidate") is not None:  # the loop's own choice stands
        steps[-1] = str(seen[(1, record["candidate"])]["answer"])
    return steps


def _text(reply: object) -> str:
    if isinstance(reply, AIMessage):
        return reply.text
    return str(reply)
