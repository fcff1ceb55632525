"""Score-only evaluators and missing feedback: `Advice`.

An evaluator may return only a score (with ``Advice(threshold)`` the score decides) or a
verdict without feedback. When such a verdict asks for another attempt, the loop writes
the feedback itself:

- with ``Advice(threshold, model=<chat model>)``, the advisor is shown the task (the
  loop's request), the answer and its score, and asked for concrete advice (as DSPy's
  ``Refine`` does);
  its reply is the feedback. The call is a run named ``"iteration N: advisor"`` and its
  tokens, requests and cost count toward the loop's budgets;
- without one, the feedback is `default_advice`: a plain sentence naming the score and
  the threshold.

Either way the agent reads it fenced like any other feedback (``feedback_format``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop.agents import encodable
from loop_agents.loop.feedback import fenced
from loop_agents.loop.protocol import LoopControl, Outcome, Stage
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


def format_score(value: float) -> str:
    """A score as people write it: ``81`` rather than ``81.0``."""
    return f"{value:g}"


def default_advice(score: float | None, threshold: float | None) -> str:
    """The feedback sent when a verdict has none and there is no advisor.

    Example:
        ```python
        default_advice(55, 70)
        # 'The answer scored 55; an answer is accepted at 70 or more. Improve it ...'
        ```

    """
    if score is None:
        return "The answer was not accepted. Improve it and answer the request again."
    shown = format_score(score)
    if threshold is None:
        return f"The answer scored {shown} and was not accepted. Improve it and answer again."
    return (
        f"The answer scored {shown}; an answer is accepted at {format_score(threshold)} or "
        f"more. Improve it and answer the request again."
    )


def advisor_prompt(
    request: Sequence[AnyMessage],
    answer: AIMessage,
    score: float | None,
    threshold: float | None,
) -> list[BaseMessage]:
    """The messages the advisor is sent: instructions, then task, answer and score.

    The task and the answer are quoted in fences, so neither can pose as instructions.

    Example:
        ```python
        prompt = advisor_prompt([HumanMessage("Write a haiku.")], AIMessage("..."), 40, 70)
        ```

    """
    task = "\n\n".join(m.text for m in request if m.text) or "(no text)"
    if score is None:
        verdict = "It was not accepted."
    elif threshold is None:
        verdict = f"It scored {format_score(score)} and was not accepted."
    else:
        verdict = (
            f"It scored {format_score(score)}; an answer is accepted at "
            f"{format_score(threshold)} or more."
        )
    body = (
        f"The task:\n\n{fenced(task, 'task')}\n\nThe latest answer:\n\n"
        f"{fenced(answer.text or '(empty)', 'answer')}\n\n{verdict} What should change?"
    )
    return [SystemMessage(ADVISOR_INSTRUCTIONS), HumanMessage(body)]


def advice_text(reply: object) -> str:
    """The advice in an advisor's reply (a message or a string), stripped."""
    if isinstance(reply, BaseMessage):
        return reply.text.strip()
    if isinstance(reply, str):
        return reply.strip()
    raise TypeError(
        f"the advisor returned {type(reply).__name__} {reply!r:.60}; expected a message or "
        f"a string (the advice)"
    )


class Advice(LoopControl):
    """What a verdict without a decision or without feedback means: a score decides, advice.

    An evaluator may return only a score (or a verdict without feedback). With a
    ``threshold``, a verdict with a score and no ``stop`` accepts when ``score >=
    threshold``. A verdict that goes on without feedback gets feedback written for it:
    by the ``model`` (an advisor) when there is one, shown the task, the answer and its
    score and asked what to change (a run named ``"iteration N: advisor"``, a LangGraph
    task of its own, counted in the budgets; an empty reply keeps the default), else
    `default_advice`, a sentence naming the score and the threshold.

    Args:
        threshold: The score at which a score-only verdict accepts (``None``: the
            evaluator must say ``stop`` itself).
        model: An advisor: a chat model (any Runnable of a list of messages) that writes
            the feedback a verdict left out.

    Raises:
        TypeError: a threshold that is not a finite number, or an advisor that is not a
            Runnable.

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
        """Check the threshold and the advisor."""
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
        self._run: FunctionRunnable[list[BaseMessage], Any] | None = None
        if self.model is not None:
            advisor = self.model
            # a run of its own, named after the iteration ("iteration 2: advisor")
            self._run = FunctionRunnable(
                lambda prompt, config: advisor.invoke(prompt, config),
                _ainvoke_with(advisor),
                name="advisor",
            )

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
        verdict = outcome.verdict
        if self._run is None or verdict is None or outcome.answer is None or verdict.stop:
            return outcome
        if verdict.feedback_from != "default" or outcome.ends_loop():
            return outcome
        return self._advised(outcome)

    def _advised(self, outcome: Outcome) -> Generator[Any, Measured[Any], Outcome]:
        """Ask the advisor for the selected verdict's feedback (the loop goes on)."""
        verdict, answer, run = outcome.verdict, outcome.answer, self._run
        assert verdict is not None
        assert answer is not None
        assert run is not None
        prompt = encodable(advisor_prompt(outcome.request, answer, verdict.score, self.threshold))
        reply = yield Call("advisor", run.invoke, run.ainvoke, prompt, outcome.config("advisor"))
        text = advice_text(reply.value)
        if text:  # an empty reply keeps the default sentence (and its "default" source)
            verdict.feedback = text
            verdict.feedback_from = "advisor"
        return outcome


def _ainvoke_with(model: Runnable[Any, Any]) -> Any:
    async def ainvoke(prompt: list[BaseMessage], config: RunnableConfig) -> Any:
        return await model.ainvoke(prompt, config)

    return ainvoke
