"""Fake models for offline tests.

`FakeChat` is langchain_core's streaming `GenericFakeChatModel` fed by an endless
generator: every answer is a new message (a new id), it records the messages of every
call, it accepts ``bind_tools`` so that ``create_agent`` can use it, and its streamed
answers keep their tool calls (as tool-call chunks).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, feedback_message

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
        self.__dict__["last_answer"] = message
        return super()._generate(messages, stop, run_manager, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from super()._stream(messages, stop, run_manager, **kwargs)
        answer = self.__dict__["last_answer"]
        if answer.tool_calls:  # GenericFakeChatModel streams the text only
            calls = [
                tool_call_chunk(name=c["name"], args=json.dumps(c["args"]), id=c["id"], index=i)
                for i, c in enumerate(answer.tool_calls)
            ]
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content="", id=answer.id, tool_call_chunks=calls)
            )
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk
        if answer.usage_metadata or answer.response_metadata:
            # as a server asked for stream_options.include_usage: a last chunk with the usage
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    id=answer.id,
                    usage_metadata=answer.usage_metadata,
                    response_metadata=answer.response_metadata,
                )
            )
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept tools (the answers decide whether a tool is called)."""
        return self


def texts(messages: Iterable[BaseMessage]) -> list[tuple[str, str]]:
    """``(type, text)`` pairs, for comparing transcripts."""
    return [(m.type, m.text) for m in messages]


def review(feedback: str, iteration: int, feedback_format: str = DEFAULT_FEEDBACK_FORMAT) -> str:
    """The text of the feedback message the agent reads (by default the fenced one)."""
    return feedback_message(feedback, iteration=iteration, feedback_format=feedback_format).text


CI_1 = "【相见欢】\n当年初见斜阳，过横塘。一诺轻轻笑语付疏妆。\n桑叶落，心先薄，泪成行。淇水汤汤流尽旧时光。"
"""A draft with the form of 相见欢 (6, 3, 9 / 3, 3, 3, 9): the demo's form check passes it."""
CI_2 = "【相见欢】\n当年一笑相逢，过淇东。布贸无非来语问深衷。\n垣上望，泪沾裳，意难忘。犹记复关车马度秋霜。"
"""Another draft with the form, for a second iteration."""
