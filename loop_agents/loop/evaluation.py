"""Calling the evaluator and validating its verdict."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias, cast

from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableLambda

from loop_agents.loop.agents import check_one_argument, describe, is_async_callable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime._worker_threads import in_worker_thread
from loop_agents.runtime.numbers import describe_number, finite_float

Evaluator: TypeAlias = (
    Callable[[LoopContext], LoopEvaluation]
    | Callable[[LoopContext], Awaitable[LoopEvaluation]]
    | Runnable[LoopContext, LoopEvaluation]
)
"""A sync or async function (or a Runnable) from `LoopContext` to `LoopEvaluation`."""


class InvalidEvaluationError(ValueError):
    """An evaluator returned something that is not a valid `LoopEvaluation`."""


def _check_score(where: str, score: object) -> float:
    """``score`` as a float; `InvalidEvaluationError` naming 'score' when it is not one."""
    number = finite_float(score)
    if number is not None:
        return number
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise InvalidEvaluationError(
            f"{where} returned 'score'={score!r:.60} ({type(score).__name__}); 'score' must "
            f"be a number (a finite int or float), or left out"
        )
    raise InvalidEvaluationError(
        f"{where} returned a non-finite score: 'score'={describe_number(score)} (inf, nan "
        f"and ints too large for a float are not scores); return a finite number, or "
        f"leave 'score' out"
    )


class EvaluatorCaller:
    """Calls one evaluator, sync or async, and validates what it returns.

    A combinator's member (``member_of="all_of"``) must decide itself; the loop's own
    evaluator may leave the decision, or the feedback, to its controls (`Advice`).
    """

    def __init__(self, evaluator: Evaluator, *, member_of: str | None = None) -> None:
        check_one_argument(
            "evaluator",
            evaluator,
            "a function (sync or async) of a LoopContext returning a LoopEvaluation",
            "the LoopContext",
            "def evaluate(context): return {'stop': True}",
        )
        self.member_of = member_of
        self.evaluator = evaluator
        self.name = describe(evaluator)
        self._is_runnable = isinstance(evaluator, Runnable)
        self.is_async = not self._is_runnable and is_async_callable(evaluator)
        # typed once here rather than cast on every call
        self._runnable = cast(Runnable[LoopContext, Any], evaluator)
        self._function = cast(Callable[[LoopContext], Any], evaluator)

    def invoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        """Evaluate synchronously; async evaluators need the async methods."""
        if self._is_runnable:
            result = self._runnable.invoke(context, config)
        elif self.is_async:
            raise TypeError(self._use_async_message())
        else:
            result = self._function(context)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                raise TypeError(self._use_async_message())
        return self.validate(result, context["iteration"])

    async def ainvoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        """Evaluate asynchronously; sync evaluators run in an executor thread."""
        if self._is_runnable:
            result = await self._runnable.ainvoke(context, config)
        elif self.is_async:
            result = await self._function(context)
        else:
            result = await in_worker_thread(config, self._function, context)
            if inspect.isawaitable(result):
                result = await result
        return self.validate(result, context["iteration"])

    def _use_async_message(self) -> str:
        return (
            f"evaluator {self.name!r} is async; run the loop with ainvoke()/astream() "
            f"instead of invoke()/stream()"
        )

    def where(self, iteration: int) -> str:
        """How messages name this evaluator at ``iteration``."""
        return f"evaluator {self.name!r} at iteration {iteration}"

    def _member_must_decide(self, where: str, given: str) -> InvalidEvaluationError:
        """The error for a member of a combinator that gave a score and no decision."""
        return InvalidEvaluationError(
            f"{where} returned {given}; as a member of {self.member_of}() it must decide "
            f"itself (the loop's Advice(threshold) decides only for the loop's own evaluator): "
            f"return a LoopEvaluation with 'stop', such as {{'stop': score >= 75, "
            f"'score': score, 'feedback': '...'}}"
        )

    def validate(self, result: Any, iteration: int) -> LoopEvaluation:
        """``result`` checked as a `LoopEvaluation` (a bare score has no ``stop``): a copy.

        Raises:
            InvalidEvaluationError: naming the evaluator, the iteration and the problem.
        """
        where = self.where(iteration)
        if isinstance(result, int | float) and not isinstance(result, bool):
            if self.member_of is not None:
                raise self._member_must_decide(
                    where, f"the number {describe_number(result)}, a bare score"
                )
            return cast(LoopEvaluation, {"score": _check_score(where, result)})
        if not isinstance(result, Mapping):
            raise InvalidEvaluationError(
                f"{where} returned {type(result).__name__} {result!r:.60}; expected a "
                f"LoopEvaluation mapping such as {{'stop': False, 'feedback': '...'}}"
            )
        unknown = sorted(set(map(str, result)) - {"stop", "feedback", "score", "decided_by"})
        if unknown:
            raise InvalidEvaluationError(
                f"{where} returned unknown keys {unknown}; a LoopEvaluation has 'stop', "
                f"'feedback', 'score' and 'decided_by'"
            )
        evaluation: dict[str, Any] = {}
        stop = result.get("stop")
        if stop is None and result.get("score") is not None and self.member_of is not None:
            raise self._member_must_decide(where, "a 'score' without 'stop'")
        if stop is not None or result.get("score") is None:
            if not isinstance(stop, bool):
                raise InvalidEvaluationError(
                    f"{where} returned 'stop'={stop!r} ({type(stop).__name__}); 'stop' must "
                    f"be True or False"
                )
            evaluation["stop"] = stop
        feedback = result.get("feedback")
        if feedback is not None and not isinstance(feedback, str):
            raise InvalidEvaluationError(
                f"{where} returned 'feedback' of type {type(feedback).__name__}; it must be "
                f"a string"
            )
        if feedback is not None:
            evaluation["feedback"] = feedback
        if result.get("score") is not None:
            evaluation["score"] = _check_score(where, result["score"])
        decided_by = result.get("decided_by")
        if decided_by is not None:
            if not isinstance(decided_by, list) or not all(
                isinstance(name, str) for name in decided_by
            ):
                raise InvalidEvaluationError(
                    f"{where} returned 'decided_by'={decided_by!r:.80}; it must be a list "
                    f"of evaluator names (strings)"
                )
            evaluation["decided_by"] = list(decided_by)
        if self.member_of is not None and stop is False and not (feedback or "").strip():
            raise missing_feedback_error(where)
        return cast(LoopEvaluation, evaluation)


def undecided_error(where: str) -> InvalidEvaluationError:
    """The error for a verdict with a score and no decision, which no control decided."""
    return InvalidEvaluationError(
        f"{where} returned a score without a decision (a bare number, or a 'score' "
        f"without 'stop'); give the loop controls=[Advice(threshold)] so that the score "
        f"decides (accepted when score >= threshold), or return a LoopEvaluation with "
        f"'stop' (True or False) and the score, such as {{'stop': False, 'score': 40, "
        f"'feedback': '...'}}"
    )


def missing_feedback_error(where: str) -> InvalidEvaluationError:
    """The error for a verdict that asks to continue without feedback nobody wrote."""
    return InvalidEvaluationError(
        f"{where} asked to continue (stop=False) without feedback; give a non-empty "
        f"'feedback' string telling the agent what to improve, or give the loop "
        f"controls=[Advice(threshold, model=<chat model>)] (the model writes it; without a "
        f"model a default sentence naming the score is sent)"
    )


class LoopEvaluatorRunnable(RunnableLambda[LoopContext, LoopEvaluation]):
    """A ready-made evaluator: a runnable with sync and async paths, and its ``criteria``.

    ``criteria`` is a text for the agent, shown by `Criteria` (``None``: it states none).
    """

    criteria: str | None = None


def criteria_of(evaluator: object) -> str | None:
    """The criteria ``evaluator`` states (looking through ``with_config``), or ``None``."""
    for _ in range(10):  # at most ten bindings deep
        criteria = getattr(evaluator, "criteria", None)
        if isinstance(criteria, str) and criteria.strip():
            return criteria.strip()
        if not isinstance(evaluator, RunnableBinding):
            return None
        evaluator = evaluator.bound
    return None


def combined_criteria(members: Sequence[tuple[str, object]]) -> str | None:
    """The criteria of several evaluators: each member's under its name (``None`` if none)."""
    stated = [(name, text) for name, member in members if (text := criteria_of(member))]
    if len(stated) <= 1:
        return stated[0][1] if stated else None
    return "\n\n".join(f"[{name}]\n{text}" for name, text in stated)
