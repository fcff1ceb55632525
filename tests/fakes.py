"""Fake models for offline tests.

`FakeChat` is langchain_core's streaming `GenericFakeChatModel` fed by an endless
generator: every answer is a new message (a new id), it records the messages of every
call, and it accepts ``bind_tools`` so that ``create_agent`` can use it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

Answer = str | AIMessage | Callable[[list[BaseMessage]], "str | AIMessage"]


def _endless(answers: Sequence[Answer]) -> Iterator[Answer]:
    """Yield the answers in order, then repeat the last one forever."""
    if not answers:
        raise ValueError("give at least one answer")
    yield from answers
    yield from itertools.repeat(answers[-1])


class FakeChat(GenericFakeChatModel):
    """A streaming fake chat model that records what it was sent.

    Answers may be strings, ``AIMessage`` templates (copied with a fresh id each time,
    so ``add_messages`` appends) or functions of the messages sent.
    """

    answers: Iterator[Answer] = Field(default_factory=lambda: iter(()))
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))

    @classmethod
    def of(cls, *answers: Answer) -> FakeChat:
        """A fake that gives ``answers`` in order and then repeats the last one."""
        return cls(answers=_endless(answers))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        answer = next(self.answers)
        if callable(answer) and not isinstance(answer, AIMessage):
            answer = answer(list(messages))
        message = (
            AIMessage(content=answer)
            if isinstance(answer, str)
            else answer.model_copy(update={"id": None}, deep=True)
        )
        self.messages = iter([message])
        return super()._generate(messages, stop, run_manager, **kwargs)

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept tools (the answers decide whether a tool is called)."""
        return self


def texts(messages: Iterable[BaseMessage]) -> list[tuple[str, str]]:
    """``(type, text)`` pairs, for comparing transcripts."""
    return [(m.type, m.text) for m in messages]
