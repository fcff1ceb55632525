"""One first answer per task, shared by the arms of an eval: `FirstAnswers`.

Every arm's first answer is a sample of the same request (the task's system message and
prompt, at the eval's temperature), so the arms differ only in what they do after it.
Sampled once per arm, those first answers differ by chance, and on a few dozen tasks that
chance can outweigh what the arms do afterwards: an arm whose first answers happen to
fail more often loses to resample whatever its repairs are worth. With
``arun_eval(..., same_first_answer=True)`` (``loop-agents eval --same-first-answer``) the
first answer to each task is sampled once and every arm starts from it: ``single`` is
that answer, and the comparisons between arms count only what happens after a first
answer that failed (the paired design of Olausson et al., 2024, whose conditions repair
the same initial programs).

Each arm is still charged the first answer (one model call, its tokens), so calls, tokens
and costs compare as if each arm had made it. The journal keeps each first answer (a line
of its own), so an eval resumed after a kill, or with an arm added, starts every
remaining arm from the same one. Shared are the arms that sample at the eval's
temperature and whose first call is made by the eval: ``single``, ``resample``, and the
loops (the built-in ones and `loop(...)`); an arm of your own built by a factory, and an
arm given its own temperature, sample their own.

Example:
    ```python
    report = await arun_eval("code", model, arms=["single", "loop", "resample"],
                             same_first_answer=True, out="code.json")
    ```
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, message_to_dict, messages_from_dict
from langchain_core.runnables import RunnableConfig

__all__ = ["FirstAnswer", "FirstAnswers", "message_of_record", "record_of_message"]

FirstAnswer = Callable[[Sequence[AnyMessage], RunnableConfig], Awaitable[AIMessage]]
"""The first answer to one task, for one arm: given the messages and the run config, the
shared answer (sampled on the first request for it), counted as one call of the arm."""

Keeper = Callable[[str, str, AIMessage], None]
"""Called with a task's id, its digest and its first answer once it is sampled."""


def record_of_message(message: AIMessage) -> dict[str, Any]:
    """A first answer as plain JSON (for the journal).

    Example:
        ```python
        assert message_of_record(record_of_message(AIMessage("x"))).text == "x"
        ```
    """
    return message_to_dict(message)


def message_of_record(record: object) -> AIMessage | None:
    """The first answer a journal line holds (``None`` when it holds none)."""
    try:
        (message,) = messages_from_dict([record])  # type: ignore[list-item]
    except (KeyError, TypeError, ValueError):
        return None
    return message if isinstance(message, AIMessage) else None


class FirstAnswers:
    """The first answers of one eval, by task: sampled once, then served to every arm.

    Args:
        temperature: The temperature they are sampled at (the eval's); only arms that
            sample at it share them.
        keep: Called with each first answer once it is sampled (the journal keeps it).

    Example:
        ```python
        shared = FirstAnswers(1.0)
        first = shared.for_task(task, digest, model)
        answer = await first(messages, config)
        ```
    """

    def __init__(self, temperature: float, *, keep: Keeper | None = None) -> None:
        self.temperature = temperature
        self.keep = keep
        self._answers: dict[tuple[str, str], AIMessage] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def preload(self, task_id: str, digest: str, message: AIMessage) -> None:
        """Serve ``message`` as the first answer of the task (read back from a journal)."""
        self._answers.setdefault((task_id, digest), message)

    def for_task(self, task_id: str, digest: str, model: BaseChatModel) -> FirstAnswer:
        """The first answer of one task for one arm run: ``model`` samples it if needed."""
        key = (task_id, digest)

        async def first(messages: Sequence[AnyMessage], config: RunnableConfig) -> AIMessage:
            lock = self._locks.setdefault(key, asyncio.Lock())
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
