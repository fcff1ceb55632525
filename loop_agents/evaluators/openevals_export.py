"""`as_openevals`: any loop evaluator as an openevals / LangSmith evaluator.

The reverse of `from_openevals`: a function of keyword-only ``inputs``, ``outputs`` and
``reference_outputs`` returning ``{"key", "score", "comment", "metadata"}``; it builds a
`LoopContext` (iteration 1, no earlier feedback) and calls the loop evaluator once. How
inputs and outputs are read, and what the result holds: docs/evaluators.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.messages import convert_to_messages as _convert

from loop_agents.loop.agents import describe
from loop_agents.loop.evaluation import Evaluator, EvaluatorCaller
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.sync_bridge import run_coroutine

__all__ = ["ScoreKind", "as_openevals", "as_openevals_async", "loop_context"]

ScoreKind = Literal["verdict", "number"]
"""What an `as_openevals` result's ``score`` is: the verdict (a bool) or the score."""

_ANSWER_KEYS = ("output", "answer")
_NOT_STATE = ("messages", "last_response", *_ANSWER_KEYS)
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
    # the answer of an output mapping, and the key it was found under
    for key in _ANSWER_KEYS:
        value = outputs.get(key)
        if isinstance(value, str):
            return AIMessage(value), key
        if isinstance(value, AIMessage):
            return value, key
    texts = [(k, v) for k, v in outputs.items() if isinstance(v, str | AIMessage)]
    if len(texts) == 1:
        key, value = texts[0]
        return (AIMessage(value) if isinstance(value, str) else value), str(key)
    return None, None


def loop_context(inputs: object, outputs: object) -> LoopContext:
    """The `LoopContext` an `as_openevals` evaluator gives the loop evaluator.

    Raises `ValueError` when ``outputs`` holds no answer, saying what to return.

    Example:
        ```python
        context = loop_context("Say hi.", {"messages": [HumanMessage("Say hi."),
                                                        AIMessage("Hi!")]})
        assert context["last_response"].text == "Hi!"
        ```
    """
    request = _request(inputs)
    state: dict[str, Any] = {}
    conversation: list[AnyMessage] | None = None
    answer: AIMessage | None = None
    if isinstance(outputs, str):
        answer = AIMessage(outputs)
    elif isinstance(outputs, AIMessage):
        answer = outputs
    elif isinstance(outputs, Mapping):
        used: str | None = None
        if "messages" in outputs:
            conversation = _messages(outputs["messages"], "outputs['messages']")
            answer = next((m for m in reversed(conversation) if isinstance(m, AIMessage)), None)
        if answer is None and isinstance(outputs.get("last_response"), AIMessage):
            answer = outputs["last_response"]
        if answer is None:
            answer, used = _answer(outputs)
        found = outputs.get("agent_state")
        if isinstance(found, Mapping):
            state = dict(found)
        else:
            state = {str(k): v for k, v in outputs.items() if k not in _NOT_STATE and k != used}
    elif isinstance(outputs, list | tuple):
        conversation = _messages(list(outputs), "outputs")
        answer = next((m for m in reversed(conversation) if isinstance(m, AIMessage)), None)
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
    messages = conversation if conversation else [*request, answer]
    return {
        "iteration": 1,
        "init_messages": request,
        "last_response": answer,
        "feedback": [],
        "messages": messages,
        "agent_state": state,
    }


def _check(evaluator: object, key: object, score: object) -> tuple[str, EvaluatorCaller]:
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
    if score == "number":
        if number is None:
            raise ValueError(
                f"{where} gave no score; use as_openevals(..., score='verdict') for its "
                f"verdict, or an evaluator that returns a 'score'"
            )
        value: bool | float = number
    else:
        if stop is None:
            raise ValueError(
                f"{where} gave a score ({number}) without a verdict; use as_openevals(..., "
                f"score='number') for the score"
            )
        value = stop
    metadata: dict[str, Any] = {"loop_stop": stop}
    if number is not None:
        metadata["loop_score"] = number
    if "decided_by" in evaluation:
        metadata["decided_by"] = list(evaluation["decided_by"])
    feedback = evaluation.get("feedback")
    return {
        "key": key,
        "score": value,
        "comment": feedback if isinstance(feedback, str) and feedback.strip() else None,
        "metadata": metadata,
    }


def as_openevals(
    evaluator: Evaluator, *, key: str | None = None, score: ScoreKind = "verdict"
) -> Callable[..., dict[str, Any]]:
    """A loop evaluator as an openevals / LangSmith evaluator.

    ``key`` defaults to the evaluator's name in snake case; ``score`` is ``"verdict"``
    (``True`` when the evaluator accepts) or ``"number"`` (its own score). An async loop
    evaluator is run to completion (inside a running event loop use `as_openevals_async`).

    Example:
        ```python
        from loop_agents.evaluators import as_openevals, text_rule

        short = as_openevals(text_rule(lambda text: len(text) < 80, "Keep it short."))
        print(short(inputs="Say hi.", outputs="Hi!"))
        # {'key': ..., 'score': True, 'comment': None, 'metadata': {'loop_stop': True}}
        ```
    """
    label, caller = _check(evaluator, key, score)

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
        results = await aevaluate(target, data="my-dataset",
                                  evaluators=[as_openevals_async(my_judge)])
        ```
    """
    label, caller = _check(evaluator, key, score)

    async def evaluate(
        *, inputs: Any = None, outputs: Any, reference_outputs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        context = loop_context(inputs, outputs)  # reference_outputs is not used
        verdict = await caller.ainvoke(context, {})
        return _result(label, verdict, score, caller.where(1))

    evaluate.__name__ = evaluate.__qualname__ = label
    return evaluate
