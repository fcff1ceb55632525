"""Feedback turns: the evaluator's feedback as the user message the agent reads next."""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage

FEEDBACK_KEY = "loop_agents_feedback"
"""The ``additional_kwargs`` key that marks a message as loop feedback."""


def feedback_message(text: str, *, iteration: int) -> HumanMessage:
    """Make the user turn that carries an evaluator's feedback to the agent.

    The message is a ``HumanMessage`` (chat models read it as the next user turn),
    marked in ``additional_kwargs`` so that code can tell it from a real user message.
    The mark is not sent to model providers.

    Args:
        text: The evaluator's feedback.
        iteration: The iteration whose answer the feedback is about.

    Example:
        ```python
        message = feedback_message("Too long.", iteration=1)
        assert is_feedback(message)
        ```

    """
    return HumanMessage(content=text, additional_kwargs={FEEDBACK_KEY: {"iteration": iteration}})


def is_feedback(message: BaseMessage) -> bool:
    """Tell whether ``message`` is loop feedback rather than a real user message.

    Example:
        ```python
        user_turns = [m for m in result["messages"] if m.type == "human" and not is_feedback(m)]
        ```

    """
    return isinstance(message, HumanMessage) and FEEDBACK_KEY in message.additional_kwargs


def feedback_iteration(message: BaseMessage) -> int | None:
    """The iteration a feedback message is about, or ``None`` for other messages."""
    if not is_feedback(message):
        return None
    mark = message.additional_kwargs[FEEDBACK_KEY]
    return int(mark["iteration"]) if isinstance(mark, dict) and "iteration" in mark else None
