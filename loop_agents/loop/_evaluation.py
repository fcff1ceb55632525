"""Calling the evaluator and validating its verdict."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias, cast

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop._agent import check_one_argument, describe, is_async_callable
from loop_agents.loop._numbers import describe_number, finite_float
from loop_agents.loop._worker_threads import in_worker_thread
from loop_agents.loop.state import LoopContext, LoopEvaluation

Evaluator: TypeAlias = (
    Callable[[LoopContext], LoopEvaluation]
    | Callable[[LoopContext], Awaitable[LoopEvaluation]]
    | Runnable[LoopContext, LoopEvaluation]
)
"""A sync or async function (or a Runnable) from `LoopContext` to `LoopEvaluation`."""


class InvalidEvaluationError(ValueError):
    """An evaluator returned something that is not a valid `LoopEvaluation`."""


def check_evaluator(evaluator: object) -> None:
    """Raise `TypeError` when ``evaluator`` cannot be called with a `LoopContext`.

    A class, or a function that cannot be called with one positional argument, is
    rejected here, when the loop is built, rather than failing at the first evaluation.
    """
    if isinstance(evaluator, Runnable):
        return
    if callable(evaluator):
        example = "def evaluate(context): return {'stop': True}"
        check_one_argument("evaluator", evaluator, "the LoopContext", example)
        return
    raise TypeError(
        "evaluator must be a function (sync or async) of a LoopContext returning a "
        f"LoopEvaluation; got {type(evaluator).__name__}: {evaluator!r:.80}"
    )


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

    With ``threshold`` (the loop's ``threshold=``) the evaluator may return a score
    alone (``{"score": 0.8}``, or a bare number from a metric function): the answer is
    accepted when the score reaches the threshold. With ``threshold`` or ``advised``
    (the loop has an ``advisor=``) a verdict that asks to continue may leave out its
    feedback; the loop then writes it (see `loop_agents.loop.control.advice`).
    """

    def __init__(
        self,
        evaluator: Evaluator,
        *,
        threshold: float | None = None,
        advised: bool = False,
        member_of: str | None = None,
    ) -> None:
        """Wrap ``evaluator``; see `Evaluator` for what is accepted.

        ``member_of`` names the combinator (``"all_of"``, ``"panel"``) the evaluator is a
        member of: a member decides for itself, so its errors say so.
        """
        check_evaluator(evaluator)
        self.threshold = threshold
        self.member_of = member_of
        self.advised = advised
        self.evaluator = evaluator
        self.name = describe(evaluator)
        self._is_runnable = isinstance(evaluator, Runnable)
        self.is_async = not self._is_runnable and is_async_callable(evaluator)

    def invoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        """Evaluate synchronously; async evaluators need the async methods."""
        if self._is_runnable:
            result = cast(Runnable[LoopContext, Any], self.evaluator).invoke(context, config)
        elif self.is_async:
            raise TypeError(self._use_async_message())
        else:
            result = cast(Callable[[LoopContext], Any], self.evaluator)(context)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                raise TypeError(self._use_async_message())
        return self.validate(result, context["iteration"])

    async def ainvoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        """Evaluate asynchronously; sync evaluators run in an executor thread."""
        if self._is_runnable:
            result = await cast(Runnable[LoopContext, Any], self.evaluator).ainvoke(context, config)
        elif self.is_async:
            result = await cast(Callable[[LoopContext], Awaitable[Any]], self.evaluator)(context)
        else:
            func = cast(Callable[[LoopContext], Any], self.evaluator)
            result = await in_worker_thread(config, func, context)
            if inspect.isawaitable(result):
                result = await result
        return self.validate(result, context["iteration"])

    def _use_async_message(self) -> str:
        return (
            f"evaluator {self.name!r} is async; run the loop with ainvoke()/astream() "
            f"instead of invoke()/stream()"
        )

    def _member_must_decide(self, where: str, given: str) -> InvalidEvaluationError:
        """The error for a member of a combinator that gave a score and no decision."""
        return InvalidEvaluationError(
            f"{where} returned {given}; as a member of {self.member_of}() it must decide "
            f"itself (the loop's threshold= decides only for the loop's own evaluator): "
            f"return a LoopEvaluation with 'stop', such as {{'stop': score >= 75, "
            f"'score': score, 'feedback': '...'}}"
        )

    def _metric(self, where: str, number: float) -> dict[str, Any]:
        """A bare number from a metric function: a score the threshold decides on."""
        if self.threshold is None and self.member_of is not None:
            raise self._member_must_decide(
                where, f"the number {describe_number(number)}, a bare score"
            )
        if self.threshold is None:
            raise InvalidEvaluationError(
                f"{where} returned the number {describe_number(number)}, a bare score; "
                f"build the loop with threshold=<score> so that a score decides (accepted "
                f"when score >= threshold), or return a LoopEvaluation such as "
                f"{{'stop': False, 'feedback': '...'}}"
            )
        return {"score": number}

    def _decided_by_threshold(self, where: str, score: object) -> bool:
        if self.threshold is None and self.member_of is not None:
            raise self._member_must_decide(where, "a 'score' without 'stop'")
        if self.threshold is None:
            raise InvalidEvaluationError(
                f"{where} returned a 'score' without 'stop'; build the loop with "
                f"threshold=<score> so that the score decides (accepted when score >= "
                f"threshold), or return 'stop' (True or False) with the score"
            )
        return _check_score(where, score) >= self.threshold

    def _writes_feedback(self, scored: bool) -> bool:
        """Whether the loop writes the feedback a verdict left out."""
        return self.advised or (self.threshold is not None and scored)

    def validate(self, result: Any, iteration: int) -> LoopEvaluation:
        """Check ``result`` is a `LoopEvaluation`; return a clean copy of it.

        Raises:
            InvalidEvaluationError: naming the evaluator, the iteration and the problem.

        """
        where = f"evaluator {self.name!r} at iteration {iteration}"
        if isinstance(result, int | float) and not isinstance(result, bool):
            result = self._metric(where, result)
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
        stop = result.get("stop")
        if stop is None and result.get("score") is not None:
            stop = self._decided_by_threshold(where, result["score"])
        if not isinstance(stop, bool):
            raise InvalidEvaluationError(
                f"{where} returned 'stop'={stop!r} ({type(stop).__name__}); 'stop' must be "
                f"True or False"
            )
        evaluation: LoopEvaluation = {"stop": stop}
        feedback = result.get("feedback")
        if feedback is not None and not isinstance(feedback, str):
            raise InvalidEvaluationError(
                f"{where} returned 'feedback' of type {type(feedback).__name__}; it must be "
                f"a string"
            )
        scored = result.get("score") is not None
        if not stop and not (feedback and feedback.strip()) and not self._writes_feedback(scored):
            raise InvalidEvaluationError(
                f"{where} asked to continue (stop=False) without feedback; give a "
                f"non-empty 'feedback' string telling the agent what to improve, or build "
                f"the loop with advisor=<chat model> (which writes it) or with "
                f"threshold=<score> and return a 'score' (a default sentence is sent)"
            )
        if feedback is not None:
            evaluation["feedback"] = feedback
        if "score" in result and result["score"] is not None:
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
        return evaluation
