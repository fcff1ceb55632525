"""Score-only evaluators and missing feedback: `Advice`.

With ``Advice(threshold)`` a score decides; feedback a verdict left out is written by an
advisor model, or is `default_advice`. The user guide: ``docs/loop-control.md``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

from loop_agents.loop.agents import encodable
from loop_agents.loop.feedback import fenced
from loop_agents.loop.protocol import LoopControl, Outcome, Stage, Verdict
from loop_agents.runtime._function_runnable import FunctionRunnable
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.steps import Call, Measured

ADVISOR_INSTRUCTIONS = (
    "You help an assistant improve its answer. You are given the task it was set, its "
    "latest answer and the score that answer received. Say concretely what to change so "
    "that the next answer scores higher: the most important problems first, at most five "
    "points. Reply with the advice only; do not write the answer yourself."
)
"""The advisor's system prompt."""


def default_advice(score: float | None, threshold: float | None) -> str:
    """The feedback sent when a verdict has none and there is no advisor.

    ``default_advice(55, 70)`` is ``"The answer scored 55; an answer is accepted at 70 or
    more. Improve it and answer the request again."``.
    """
    return f"The answer {_standing(score, threshold)}. Improve it and answer the request again."


def _standing(score: float | None, threshold: float | None) -> str:
    if score is None:
        return "was not accepted"
    if threshold is None:
        return f"scored {score:g} and was not accepted"
    return f"scored {score:g}; an answer is accepted at {threshold:g} or more"


def advisor_prompt(
    request: Sequence[AnyMessage], answer: AIMessage, score: float | None, threshold: float | None
) -> list[BaseMessage]:
    """The advisor's messages: instructions, then the task and answer (fenced) and score."""
    task = "\n\n".join(m.text for m in request if m.text) or "(no text)"
    verdict = f"It {_standing(score, threshold)}."
    body = (
        f"The task:\n\n{fenced(task, 'task')}\n\nThe latest answer:\n\n"
        f"{fenced(answer.text or '(empty)', 'answer')}\n\n{verdict} What should change?"
    )
    return [SystemMessage(ADVISOR_INSTRUCTIONS), HumanMessage(body)]


class Advice(LoopControl):
    """A score decides at a threshold; feedback a verdict left out is written for it.

    Args:
        threshold: The score at which a score-only verdict accepts (``None``: the
            evaluator must say ``stop`` itself).
        model: An advisor (a chat model, or any Runnable of messages), shown the task, the
            answer and its score and asked what to change (a run ``"iteration N: advisor"``,
            counted in the budgets). Without one, or on an empty reply: `default_advice`.

    Example:
        ```python
        advice = Advice(threshold=70, model=ChatOpenAI(model="gpt-5.4-mini"))
        loop = create_loop_agent(agent, length_metric, 5, controls=[advice])
        ```
    """

    name = "advice"
    stage = Stage.VERDICT
    claims = frozenset({"advice"})

    def __init__(
        self, threshold: float | None = None, *, model: Runnable[Any, Any] | None = None
    ) -> None:
        number = None if isinstance(threshold, bool) else finite_float(threshold)
        if threshold is not None and number is None:
            raise TypeError(
                f"threshold must be a finite number (the score at which a score-only verdict "
                f"accepts) or None; got {describe_number(threshold)}"
            )
        if model is not None and not isinstance(model, Runnable):
            raise TypeError(
                f"advisor must be a chat model (e.g. ChatOpenAI(model=...)) or another "
                f"Runnable of a list of messages, or None; got {type(model).__name__} "
                f"{model!r:.60}"
            )
        self.threshold = number
        self.model = model
        self.calls_models = self.model is not None
        # a run of its own, named after the iteration ("iteration 2: advisor")
        self._run: FunctionRunnable[list[BaseMessage], Any] | None = None
        if model is not None:
            self._run = FunctionRunnable(model.invoke, model.ainvoke, name="advisor")

    def after_verdict(self, outcome: Outcome) -> Outcome | Generator[Any, Measured[Any], Outcome]:
        """Decide the undecided verdicts by their scores; write the missing feedback."""
        threshold = self.threshold
        for judged in outcome.judged:
            verdict = judged.verdict
            if verdict is None:
                continue
            if verdict.stop is None and verdict.score is not None and threshold is not None:
                verdict.stop = verdict.score >= threshold
            if verdict.stop is False and not (verdict.feedback or "").strip():
                verdict.feedback = default_advice(verdict.score, threshold)
                verdict.feedback_from = "default"
        verdict, answer, run = outcome.verdict, outcome.answer, self._run
        if run is None or verdict is None or answer is None or verdict.stop:
            return outcome
        if verdict.feedback_from != "default" or outcome.ends_loop():
            return outcome
        prompt = encodable(advisor_prompt(outcome.request, answer, verdict.score, self.threshold))
        call = Call("advisor", run.invoke, run.ainvoke, prompt, outcome.config("advisor"))
        return self._advised(outcome, verdict, call)

    def _advised(
        self, outcome: Outcome, verdict: Verdict, call: Call
    ) -> Generator[Any, Measured[Any], Outcome]:
        # ask the advisor for the selected verdict's feedback (the loop goes on)
        reply = yield call
        if not isinstance(reply.value, BaseMessage | str):
            raise TypeError(
                f"the advisor returned {type(reply.value).__name__} {reply.value!r:.60}; "
                f"expected a message or a string (the advice)"
            )
        text = (reply.value if isinstance(reply.value, str) else reply.value.text).strip()
        if text:  # an empty reply keeps the default sentence (and its "default" source)
            verdict.feedback = text
            verdict.feedback_from = "advisor"
        return outcome
