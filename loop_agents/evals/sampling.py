"""Sampling an arm's answers: the model at the arm's temperature, cut-offs, counted calls.

Example:
    ```python
    sampler = at_temperature(model, 1.0)
    counter = CallCounter()
    reply = await sampler.ainvoke(messages, {"callbacks": [counter]})
    print(counter.calls, was_cut_off(reply))
    ```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import LLMResult

from loop_agents.runtime.usage import TokenCounter

__all__ = [
    "CallCounter",
    "answer_text",
    "at_temperature",
    "sampled_temperature",
    "was_cut_off",
]


def was_cut_off(message: object) -> bool:
    """Whether a model's answer ended at the token cap, not where the model stopped.

    Read from the message's ``response_metadata``: ``finish_reason`` ``"length"``
    (OpenAI's API, llama.cpp's server, vLLM), ``done_reason`` ``"length"`` (Ollama's own
    API) or ``stop_reason`` ``"max_tokens"`` (Anthropic's).

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
    """A copy of ``model`` that samples at ``temperature``.

    The copy is made with the model's own settings and validation, so a model that
    refuses other temperatures keeps its rule (``ChatOpenAI`` sends none to OpenAI's
    reasoning models, which accept only their default). A model that cannot be made
    again from its settings is copied with the temperature set; one without a
    ``temperature`` setting is returned as it is.

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
    """The temperature ``model`` really samples at when asked for ``temperature``.

    ``None`` when the model keeps its own default (see `at_temperature`).

    Example:
        ```python
        sampled_temperature(ChatOpenAI(model="gpt-5.4-mini"), 0.0)  # None: its default
        ```
    """
    if "temperature" not in type(model).model_fields:
        return None
    value = getattr(at_temperature(model, temperature), "temperature", None)
    return float(value) if isinstance(value, int | float) else None
