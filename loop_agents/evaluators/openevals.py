"""openevals both ways: `from_openevals` and `as_openevals` (docs/evaluators.md).

`from_openevals` calls an openevals evaluator with the request's and the answer's texts;
`as_openevals` makes a loop evaluator an openevals / LangSmith one. It never imports openevals.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.messages import convert_to_messages as _convert
from langchain_core.runnables import RunnableConfig

from loop_agents.evaluators.base import format_score, make_evaluator, merge_feedback
from loop_agents.loop.agents import describe, is_async_callable
from loop_agents.loop.evaluation import Evaluator, EvaluatorCaller, LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.sync_bridge import run_coroutine

__all__ = ["ScoreKind", "as_openevals", "as_openevals_async", "from_openevals", "loop_context"]


def _check_from(
    evaluator: object, reference_outputs: object, threshold: object, kwargs: Mapping[str, Any]
) -> tuple[str, float | None]:
    if isinstance(evaluator, type) or not callable(evaluator):
        raise TypeError(
            f"from_openevals takes an openevals evaluator, e.g. exact_match or "
            f"create_llm_as_judge(prompt=..., judge=...); got {evaluator!r:.80}"
        )
    name = describe(evaluator)
    label = "openevals" if name.startswith("_") or name == "<lambda>" else name
    if label.startswith("create_"):
        raise TypeError(
            f"{label} makes an evaluator: call it and pass what it returns, e.g. "
            f"from_openevals({label}(...))"
        )
    taken = sorted(set(kwargs) & {"inputs", "outputs"})  # the keywords it fills in itself
    if taken:
        raise TypeError(
            f"from_openevals passes {' and '.join(taken)} itself (the request and the "
            f"answer); do not give {', '.join(f'{k}=' for k in taken)}"
        )
    try:
        needed = inspect.signature(evaluator).parameters.get("reference_outputs")
    except (TypeError, ValueError):  # a signature that cannot be read: find out at the call
        needed = None
    if reference_outputs is None and needed and needed.default is inspect.Parameter.empty:
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


def _request_text(context: LoopContext) -> str:  # the user messages (else every one), joined
    messages = context["init_messages"]
    asked = [m for m in messages if isinstance(m, HumanMessage)] or messages
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
    label, cutoff = _check_from(evaluator, reference_outputs, threshold, kwargs)

    def arguments(context: LoopContext) -> dict[str, Any]:
        reference = reference_outputs(context) if callable(reference_outputs) else reference_outputs
        return {
            "inputs": _request_text(context),
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
        return verdict(label, await evaluator(**arguments(context)), cutoff)

    return make_evaluator(label, evaluate, aevaluate if is_async_callable(evaluator) else None)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _score(
    label: str, result: object, threshold: float | None
) -> tuple[str, bool, float | None, str]:
    # one result's key, whether it passes, its number (None for a boolean) and its comment
    if not isinstance(result, Mapping) or "score" not in result:
        raise TypeError(
            f"the openevals evaluator {label!r} returned {result!r:.80}; expected an "
            f"EvaluatorResult (a dict with a 'score') or a list of them"
        )
    key = result.get("key")
    key = key if isinstance(key, str) and key else label
    comment = result.get("comment")
    text = comment.strip() if isinstance(comment, str) else ""
    score = result["score"]
    if isinstance(score, bool):
        failed = f"The answer did not pass the check {key!r}; revise it."
        return key, score, None, text or ("" if score else failed)
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
    failed = (
        f"The answer scored {format_score(number)} on {key!r}; at least "
        f"{format_score(threshold)} is needed. Revise it."
    )
    return key, number >= threshold, number, text or ("" if number >= threshold else failed)


def verdict(label: str, result: object, threshold: float | None) -> LoopEvaluation:
    """The `LoopEvaluation` of an openevals result, or of a list of them (all must pass)."""
    results = list(result) if isinstance(result, list | tuple) else [result]
    if not results:
        raise TypeError(
            f"the openevals evaluator {label!r} returned an empty list; expected at least "
            f"one EvaluatorResult"
        )
    parts = [_score(label, item, threshold) for item in results]
    failing = [part for part in parts if not part[1]]
    texts = [(key, text) for key, _, _, text in failing or parts]
    feedback = texts[0][1] if len(texts) == 1 else merge_feedback(texts)
    evaluation: LoopEvaluation = {"stop": not failing}
    if feedback:
        evaluation["feedback"] = feedback
    numbers = [number for _, _, number, _ in parts if number is not None]
    if numbers:
        evaluation["score"] = min(numbers)
    return evaluation


ScoreKind = Literal["verdict", "number"]
"""What an `as_openevals` result's ``score`` is: the verdict (a bool) or the score."""

_ANSWER_KEYS = ("last_response", "output", "answer")  # the answer, else the only text
_NOT_STATE = ("messages", *_ANSWER_KEYS)
_SNAKE = re.compile(r"[^0-9a-zA-Z]+")


def _messages(value: object, where: str) -> list[AnyMessage]:
    try:
        return cast(list[AnyMessage], list(_convert(cast(Any, value))))
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise ValueError(
            f"{where}: cannot read {type(value).__name__} {value!r:.60} as messages ({exc})"
        ) from None


def _request(inputs: object) -> list[AnyMessage]:
    if inputs is None:
        return []
    if isinstance(inputs, str):
        return [HumanMessage(inputs)]
    if isinstance(inputs, BaseMessage):
        return [cast(AnyMessage, inputs)]
    if isinstance(inputs, Mapping):
        if "messages" in inputs:
            return _messages(inputs["messages"], "inputs['messages']")
        texts = [v for v in inputs.values() if isinstance(v, str)]
        if len(inputs) == 1 and len(texts) == 1:
            return [HumanMessage(texts[0])]
        return [HumanMessage(json.dumps(dict(inputs), ensure_ascii=False, default=str))]
    if isinstance(inputs, list | tuple):
        return _messages(list(inputs), "inputs")
    return [HumanMessage(str(inputs))]


def _answer(outputs: Mapping[str, Any]) -> tuple[AIMessage | None, str | None]:
    # the answer of an output mapping (a named one, else its only text), and its key
    named = [(k, outputs[k]) for k in _ANSWER_KEYS if isinstance(outputs.get(k), str | AIMessage)]
    texts = [(str(k), v) for k, v in outputs.items() if isinstance(v, str | AIMessage)]
    found = named[:1] or (texts if len(texts) == 1 else [])
    if not found:
        return None, None
    key, value = found[0]
    return (AIMessage(value) if isinstance(value, str) else value), key


def loop_context(inputs: object, outputs: object) -> LoopContext:
    """The `LoopContext` an `as_openevals` evaluator gives the loop evaluator.

    Raises `ValueError` when ``outputs`` holds no answer, saying what to return.

    Example:
        ```python
        context = loop_context("Say hi.", {"output": "Hi!"})  # last_response: AIMessage("Hi!")
        ```
    """
    request = _request(inputs)
    conversation: list[AnyMessage] = []
    if isinstance(outputs, list | tuple):
        conversation = _messages(list(outputs), "outputs")
    elif isinstance(outputs, Mapping) and "messages" in outputs:
        conversation = _messages(outputs["messages"], "outputs['messages']")
    answer = next((m for m in reversed(conversation) if isinstance(m, AIMessage)), None)
    state: dict[str, Any] = {}
    if isinstance(outputs, str | AIMessage):
        answer = AIMessage(outputs) if isinstance(outputs, str) else outputs
    elif isinstance(outputs, Mapping):
        used: str | None = None
        if answer is None:
            answer, used = _answer(outputs)
        found = outputs.get("agent_state")
        if isinstance(found, Mapping):
            state = dict(found)
        else:
            state = {str(k): v for k, v in outputs.items() if k not in _NOT_STATE and k != used}
    if answer is None:
        shown = sorted(map(str, outputs)) if isinstance(outputs, Mapping) else type(outputs)
        raise ValueError(
            f"outputs holds no answer (got {shown}); give the answer's text, an AIMessage, "
            f"or a mapping with 'messages' (the last AI message is the answer) or 'output'"
        )
    if not request and conversation:
        first = next(
            (i for i, m in enumerate(conversation) if isinstance(m, AIMessage)), len(conversation)
        )
        request = conversation[:first]
    messages = conversation or [*request, answer]
    return {
        "iteration": 1,
        "init_messages": request,
        "last_response": answer,
        "feedback": [],
        "messages": messages,
        "agent_state": state,
    }


def _check_as(evaluator: object, key: object, score: object) -> tuple[str, EvaluatorCaller]:
    caller = EvaluatorCaller(cast(Evaluator, evaluator))
    if score not in ("verdict", "number"):
        raise ValueError(
            f"score must be 'verdict' (True when the evaluator accepts the answer) or "
            f"'number' (the evaluator's own score); got {score!r:.40}"
        )
    if key is None:
        name = _SNAKE.sub("_", describe(evaluator)).strip("_").lower()
        return (name if name and name != "lambda" else "loop_evaluator"), caller
    if not isinstance(key, str) or not key.strip():
        raise TypeError(f"key must be a non-empty string (the feedback key); got {key!r:.40}")
    return key, caller


def _result(key: str, evaluation: LoopEvaluation, score: ScoreKind, where: str) -> dict[str, Any]:
    stop, number = evaluation.get("stop"), evaluation.get("score")
    value = number if score == "number" else stop
    if value is None and score == "number":
        raise ValueError(
            f"{where} gave no score; use as_openevals(..., score='verdict') for its "
            f"verdict, or an evaluator that returns a 'score'"
        )
    if value is None:
        raise ValueError(
            f"{where} gave a score ({number}) without a verdict; use as_openevals(..., "
            f"score='number') for the score"
        )
    metadata: dict[str, Any] = {"loop_stop": stop}
    if number is not None:
        metadata["loop_score"] = number
    if "decided_by" in evaluation:
        metadata["decided_by"] = list(evaluation["decided_by"])
    feedback = evaluation.get("feedback")
    comment = feedback if isinstance(feedback, str) and feedback.strip() else None
    return {"key": key, "score": value, "comment": comment, "metadata": metadata}


def as_openevals(
    evaluator: Evaluator, *, key: str | None = None, score: ScoreKind = "verdict"
) -> Callable[..., dict[str, Any]]:
    """A loop evaluator as an openevals / LangSmith evaluator.

    ``key`` defaults to the evaluator's name in snake case; ``score`` is ``"verdict"``
    (``True`` when the evaluator accepts) or ``"number"`` (its own score). An async loop
    evaluator is run to completion (inside a running event loop use `as_openevals_async`).

    Example:
        ```python
        short = as_openevals(text_rule(lambda text: len(text) < 80, "Keep it short."))
        short(inputs="Say hi.", outputs="Hi!")  # {..., 'score': True, 'comment': None, ...}
        ```
    """
    label, caller = _check_as(evaluator, key, score)

    def evaluate(
        *, inputs: Any = None, outputs: Any, reference_outputs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        context = loop_context(inputs, outputs)  # reference_outputs is not used
        if caller.is_async:
            verdict = run_coroutine(caller.ainvoke(context, {}))
        else:
            verdict = caller.invoke(context, {})
        return _result(label, verdict, score, caller.where(1))

    evaluate.__name__ = evaluate.__qualname__ = label
    return evaluate


def as_openevals_async(
    evaluator: Evaluator, *, key: str | None = None, score: ScoreKind = "verdict"
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The async form of `as_openevals`; a sync loop evaluator runs in a worker thread.

    Example:
        ```python
        results = await aevaluate(target, data="my-data", evaluators=[as_openevals_async(judge)])
        ```
    """
    label, caller = _check_as(evaluator, key, score)

    async def evaluate(
        *, inputs: Any = None, outputs: Any, reference_outputs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        context = loop_context(inputs, outputs)  # reference_outputs is not used
        verdict = await caller.ainvoke(context, {})
        return _result(label, verdict, score, caller.where(1))

    evaluate.__name__ = evaluate.__qualname__ = label
    return evaluate
