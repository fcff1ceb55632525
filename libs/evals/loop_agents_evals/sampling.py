"""Sampling an arm's answers: the model at its temperature, cut-offs, calls, first answers.

`FirstAnswers` serves one first answer per task to every arm (``same_first_answer``; why,
in docs/eval.md, "The same first answer"); each arm is still charged its call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, messages_from_dict
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig

from loop_agents.runtime.usage import TokenCounter

__all__ = [
    "CallCounter",
    "FirstAnswer",
    "FirstAnswers",
    "answer_text",
    "at_temperature",
    "message_of_record",
    "sampled_temperature",
    "was_cut_off",
]


def was_cut_off(message: object) -> bool:
    """Whether a model's answer ended at the token cap (OpenAI's, Ollama's or Anthropic's word).

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


def answer_text(reply: object) -> str:
    """The text of an answer: an ``AIMessage``'s text, else the value as a string.

    Example:
        ```python
        assert answer_text(AIMessage("hi")) == "hi"
        ```
    """
    if isinstance(reply, AIMessage):
        return reply.text
    return str(reply)


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
    """A copy of ``model`` that samples at ``temperature`` (or at its own, if it accepts no other).

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
    """The temperature ``model`` samples at when asked for ``temperature`` (``None``: its own).

    Example:
        ```python
        sampled_temperature(ChatOpenAI(model="gpt-5.4-mini"), 0.0)  # None: its default
        ```
    """
    if "temperature" not in type(model).model_fields:
        return None
    value = getattr(at_temperature(model, temperature), "temperature", None)
    return float(value) if isinstance(value, int | float) else None


FirstAnswer = Callable[[Sequence[AnyMessage], RunnableConfig], Awaitable[AIMessage]]
"""One task's shared first answer for one arm, counted as one call of the arm."""

Keeper = Callable[[str, str, AIMessage], None]
"""Called with a task's id, its digest and its first answer once it is sampled."""


def message_of_record(record: object) -> AIMessage | None:
    """The first answer a journal line holds (`message_to_dict`'s), or ``None``."""
    try:
        (message,) = messages_from_dict([record])  # type: ignore[list-item]
    except (KeyError, TypeError, ValueError):
        return None
    return message if isinstance(message, AIMessage) else None


class FirstAnswers:
    """The first answers of one eval, by task: sampled once, then served to every arm.

    ``keep`` is called with each once sampled (the journal keeps it).

    Example:
        ```python
        answer = await FirstAnswers(1.0).for_task(task_id, digest, model)(messages, config)
        ```
    """

    def __init__(self, temperature: float, *, keep: Keeper | None = None) -> None:
        self.temperature = temperature
        self.keep = keep
        self._answers: dict[tuple[str, str], AIMessage] = {}
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}

    def preload(self, task_id: str, digest: str, message: AIMessage) -> None:
        """Serve ``message`` as the first answer of the task (read back from a journal)."""
        self._answers.setdefault((task_id, digest), message)

    def for_task(self, task_id: str, digest: str, model: BaseChatModel) -> FirstAnswer:
        """The first answer of one task for one arm run: ``model`` samples it if needed."""
        key = (task_id, digest)

        async def first(messages: Sequence[AnyMessage], config: RunnableConfig) -> AIMessage:
            # a lock per event loop: after a blocked pair loop is replaced, the new one's
            lock = self._locks.setdefault((*key, id(asyncio.get_running_loop())), asyncio.Lock())
            async with lock:  # one arm samples it; the others wait and are served it
                known = self._answers.get(key)
                if known is None:
                    reply = await model.ainvoke(list(messages), config)
                    if not isinstance(reply, AIMessage):  # pragma: no cover - chat models
                        raise TypeError(f"the model answered {type(reply).__name__}")
                    self._answers[key] = reply
                    if self.keep is not None:
                        self.keep(task_id, digest, reply)
                    return reply
            served = known.model_copy(update={"id": None})
            replay = GenericFakeChatModel(messages=iter([served]), name="first answer")
            reply = await replay.ainvoke(list(messages), config)  # one call of this arm
            return reply

        return first
