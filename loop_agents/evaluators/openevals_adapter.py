"""`from_openevals`: any openevals evaluator (or a function like one) as a loop evaluator.

It is called with ``inputs`` (the request's text), ``outputs`` (the answer's text) and
``reference_outputs``; its result's score decides. How results are read: docs/evaluators.md.
This module never imports openevals: it calls what it is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor

from loop_agents.evaluators.base import format_score, make_evaluator, merge_feedback
from loop_agents.loop.agents import describe, is_async_callable
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.sync_bridge import run_coroutine

__all__ = ["from_openevals"]

_PASSED_ON = ("inputs", "outputs")  # the keywords from_openevals fills in itself


def _label(evaluator: object) -> str:
    name = describe(evaluator)
    return "openevals" if name.startswith("_") or name == "<lambda>" else name


def _requires_reference(evaluator: object) -> bool:  # reference_outputs without a default
    try:
        parameters = inspect.signature(cast(Callable[..., Any], evaluator)).parameters
    except (TypeError, ValueError):  # a signature that cannot be read: find out at the call
        return False
    found = parameters.get("reference_outputs")
    return found is not None and found.default is inspect.Parameter.empty


def _check(
    evaluator: object, reference_outputs: object, threshold: object, kwargs: Mapping[str, Any]
) -> tuple[str, float | None]:
    if isinstance(evaluator, type) or not callable(evaluator):
        raise TypeError(
            f"from_openevals takes an openevals evaluator, e.g. exact_match or "
            f"create_llm_as_judge(prompt=..., judge=...); got {evaluator!r:.80}"
        )
    label = _label(evaluator)
    if label.startswith("create_"):
        raise TypeError(
            f"{label} makes an evaluator: call it and pass what it returns, e.g. "
            f"from_openevals({label}(...))"
        )
    taken = sorted(set(kwargs) & set(_PASSED_ON))
    if taken:
        raise TypeError(
            f"from_openevals passes {' and '.join(taken)} itself (the request and the "
            f"answer); do not give {', '.join(f'{k}=' for k in taken)}"
        )
    if reference_outputs is None and _requires_reference(evaluator):
        raise ValueError(
            f"the openevals evaluator {label!r} compares the answer with a reference: give "
            f"from_openevals({label}, reference_outputs=...)"
        )
    if threshold is None:
        return label, None
    number = finite_float(threshold)
    if number is None:
        raise TypeError(
            f"threshold must be a finite number on the evaluator's own scale (e.g. 0.8 "
            f"for a 0-1 score) or None; got {describe_number(threshold)}"
        )
    return label, number


def _request(context: LoopContext) -> str:  # the user messages (else every one), joined
    messages = context["init_messages"]
    asked: list[BaseMessage] = [m for m in messages if isinstance(m, HumanMessage)]
    asked = asked or list(messages)
    return "\n\n".join(m.text for m in asked if m.text)


def from_openevals(
    evaluator: Callable[..., Any],
    *,
    reference_outputs: Any = None,
    threshold: float | None = None,
    **kwargs: Any,
) -> LoopEvaluatorRunnable:
    """An openevals evaluator (sync or async) as the loop's evaluator.

    ``reference_outputs`` is a value or a function of the `LoopContext`; ``threshold``
    the lowest numeric score that accepts, on the evaluator's own scale (a boolean score
    needs none); ``kwargs`` are passed on at every call. A factory passed uncalled, a
    missing reference, a non-numeric threshold or ``inputs=``/``outputs=`` are refused
    here; a result of the wrong shape when the loop runs, naming the evaluator.

    Example:
        ```python
        loop = create_loop_agent(agent, from_openevals(exact_match, reference_outputs="Paris"), 3)
        ```
    """
    label, cutoff = _check(evaluator, reference_outputs, threshold, kwargs)
    is_async = is_async_callable(evaluator)

    def arguments(context: LoopContext) -> dict[str, Any]:
        reference = reference_outputs(context) if callable(reference_outputs) else reference_outputs
        return {
            "inputs": _request(context),
            "outputs": context["last_response"].text,
            "reference_outputs": reference,
            **kwargs,
        }

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        result = evaluator(**arguments(context))
        if inspect.isawaitable(result):  # an async evaluator, on the loop's sync path
            result = run_coroutine(_awaited(result))
        return verdict(label, result, cutoff)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if is_async:
            result = await evaluator(**arguments(context))
        else:
            result = await run_in_executor(config, evaluator, **arguments(context))
            if inspect.isawaitable(result):
                result = await result
        return verdict(label, result, cutoff)

    return make_evaluator(label, evaluate, aevaluate)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _score(label: str, result: object, threshold: float | None) -> tuple[str, bool, float | None]:
    # one result's key, whether it passes, and its number (None for a boolean)
    if not isinstance(result, Mapping) or "score" not in result:
        raise TypeError(
            f"the openevals evaluator {label!r} returned {result!r:.80}; expected an "
            f"EvaluatorResult (a dict with a 'score') or a list of them"
        )
    key = result.get("key")
    key = key if isinstance(key, str) and key else label
    score = result["score"]
    if isinstance(score, bool):
        return key, score, None
    number = finite_float(score)
    if number is None:
        raise TypeError(
            f"the openevals evaluator {label!r} gave {key!r} the score "
            f"{describe_number(score)}; a score must be True/False or a finite number"
        )
    if threshold is None:
        raise ValueError(
            f"the openevals evaluator {label!r} gave {key!r} the score {format_score(number)}, "
            f"a number: say which scores accept the answer with from_openevals(..., "
            f"threshold=N), N on the evaluator's own scale (e.g. 0.8 for a 0-1 score)"
        )
    return key, number >= threshold, number


def _failed_sentence(key: str, number: float | None, threshold: float | None) -> str:
    if number is None:
        return f"The answer did not pass the check {key!r}; revise it."
    return (
        f"The answer scored {format_score(number)} on {key!r}; at least "
        f"{format_score(cast(float, threshold))} is needed. Revise it."
    )


def verdict(label: str, result: object, threshold: float | None) -> LoopEvaluation:
    """The `LoopEvaluation` of an openevals result, or of a list of them (all must pass).

    Example:
        ```python
        verdict("exact_match", {"key": "exact_match", "score": False, "comment": None}, None)
        ```
    """
    results = list(result) if isinstance(result, list | tuple) else [result]
    if not results:
        raise TypeError(
            f"the openevals evaluator {label!r} returned an empty list; expected at least "
            f"one EvaluatorResult"
        )
    parts: list[tuple[str, bool, float | None, str]] = []
    for item in results:
        key, passed, number = _score(label, item, threshold)
        comment = cast(Mapping[str, Any], item).get("comment")
        text = comment.strip() if isinstance(comment, str) else ""
        parts.append((key, passed, number, text))
    failing = [p for p in parts if not p[1]]
    numbers = [p[2] for p in parts if p[2] is not None]
    evaluation: LoopEvaluation = {"stop": not failing}
    shown = failing or parts
    texts = [
        (key, text or (_failed_sentence(key, number, threshold) if not passed else ""))
        for key, passed, number, text in shown
    ]
    feedback = texts[0][1] if len(texts) == 1 else merge_feedback(texts)
    if feedback:
        evaluation["feedback"] = feedback
    if numbers:
        evaluation["score"] = min(numbers)
    return evaluation
