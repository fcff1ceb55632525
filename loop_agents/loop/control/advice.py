"""Feedback for score-only evaluators: an ``advisor`` model, or a default sentence.

An evaluator may return only a score (with ``create_loop_agent(..., threshold=...)``)
or a verdict without feedback. When such a verdict asks for another attempt, the
loop writes the feedback itself:

- with ``advisor=<chat model>``, the advisor is shown the task (the loop's request),
  the answer and its score, and asked for concrete advice (as DSPy's ``Refine`` does);
  its reply is the feedback. The call is a run named ``"iteration N: advisor"`` and its
  tokens, requests and cost count toward the loop's budgets;
- without one, the feedback is `default_advice`: a plain sentence naming the score and
  the threshold.

Either way the agent reads it fenced like any other feedback (``feedback_format``).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop.feedback import fenced

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


def check_advisor(advisor: object) -> Runnable[list[BaseMessage], object] | None:
    """Validate ``advisor=``: ``None`` or a chat model (any Runnable of messages).

    Raises:
        TypeError: anything else.

    Example:
        ```python
        check_advisor(ChatOpenAI(model="gpt-5.4-mini"))
        ```

    """
    if advisor is None or isinstance(advisor, Runnable):
        return advisor
    raise TypeError(
        f"advisor must be a chat model (e.g. ChatOpenAI(model=...)) or another Runnable "
        f"of a list of messages, or None; got {type(advisor).__name__} {advisor!r:.60}"
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


class Advisor:
    """Writes the feedback a verdict left out: with the advisor model, or the default."""

    def __init__(
        self, model: Runnable[list[BaseMessage], object] | None, threshold: float | None
    ) -> None:
        self.model = model
        self.threshold = threshold

    def invoke(
        self,
        request: Sequence[AnyMessage],
        answer: AIMessage,
        score: float | None,
        config: RunnableConfig,
    ) -> str:
        """The advice (sync); the default sentence when there is no advisor.

        ``""`` when the advisor replied with no text (the loop keeps the default sentence).
        """
        if self.model is None:
            return default_advice(score, self.threshold)
        reply = self.model.invoke(advisor_prompt(request, answer, score, self.threshold), config)
        return advice_text(reply)

    async def ainvoke(
        self,
        request: Sequence[AnyMessage],
        answer: AIMessage,
        score: float | None,
        config: RunnableConfig,
    ) -> str:
        """The advice (async); see `invoke`."""
        if self.model is None:
            return default_advice(score, self.threshold)
        prompt = advisor_prompt(request, answer, score, self.threshold)
        reply = await self.model.ainvoke(prompt, config)
        return advice_text(reply)
