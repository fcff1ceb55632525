"""Counting the tokens of the chat-model calls made while a part of the loop runs.

`counting_tokens` adds its `TokenCounter` to every callback manager configured in its block
(and in the threads and tasks started from it), through a configure hook of LangChain's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook

# Why not langchain_core's get_usage_metadata_callback (langchain-core 1.8, CPU per ainvoke
# of an instant fake model): 250 µs bare, 300 µs counted here, 850 µs counted by it (its
# handler is not run_inline, and takes chat-model starts); its configure hook per entry is
# never removed (466 µs bare after 3,200 calls); it skips responses that name no model and
# counts neither requests nor usage reported in llm_output.


class TokenCounter(BaseCallbackHandler):
    """Sums the tokens of the chat-model calls it sees, by model name (``""``: none named).

    A response that reports no usage is counted in ``unmetered``.
    """

    run_inline = True  # a sum under a lock: no executor hop from async callback managers
    # only on_llm_end carries usage; without ignore_chat_model LangChain would render
    # every prompt as strings for on_llm_start
    ignore_chain = ignore_agent = ignore_retriever = ignore_custom_event = True
    ignore_chat_model = ignore_retry = True

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._usage = NO_USAGE

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """Count one model call and add its usage (its first generation carries it)."""
        output = response.llm_output or {}
        first = next(iter(response.generations[0]), None) if response.generations else None
        message = first.message if isinstance(first, ChatGeneration) else None
        model = _model_name(output) or (message_model(message) if message else "")
        metadata = message.usage_metadata if isinstance(message, AIMessage) else None
        reported = output.get("token_usage")
        tokens = None
        if metadata:
            tokens = usage_of_metadata(metadata)
        elif isinstance(reported, Mapping) and reported:
            # a completion model (or an older chat model) reports its usage here
            details = reported.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
            tokens = (
                int(reported.get("prompt_tokens") or 0),
                int(reported.get("completion_tokens") or 0),
                int(cached or 0),
            )
        with self._lock:
            self._usage += _one_call(model, tokens)

    @property
    def totals(self) -> tuple[int, int]:
        """``(input_tokens, output_tokens)`` so far."""
        used = self._usage
        return used.input_tokens, used.output_tokens

    @property
    def cached_tokens(self) -> int:
        """Of the input tokens so far, those read from a prompt cache."""
        return self._usage.cached_tokens

    def usage(self) -> CallUsage:
        """What the calls seen so far used: tokens, requests, tokens by model name."""
        return self._usage


def usage_of_metadata(metadata: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(input, output, cached input)`` tokens of a message's ``usage_metadata``.

    Cached input tokens (``input_token_details["cache_read"]``) are part of the input.

    Example:
        ```python
        usage_of_metadata({"input_tokens": 900, "output_tokens": 40,
                           "input_token_details": {"cache_read": 800}})  # (900, 40, 800)
        ```

    """
    details = metadata.get("input_token_details")
    cached = details.get("cache_read") if isinstance(details, Mapping) else None
    return (
        int(metadata.get("input_tokens") or 0),
        int(metadata.get("output_tokens") or 0),
        int(cached or 0),
    )


def usage_of_answer(message: BaseMessage) -> CallUsage:
    """The usage of one chat-model call, read from its answer (what `TokenCounter` counts).

    Example:
        ```python
        assert usage_of_answer(AIMessage("hi")).unmetered == {"": 1}
        ```

    """
    metadata = message.usage_metadata if isinstance(message, AIMessage) else None
    return _one_call(message_model(message), usage_of_metadata(metadata) if metadata else None)


def _one_call(model: str, tokens: tuple[int, int, int] | None) -> CallUsage:
    """One call of ``model``: its tokens, or ``None`` when it reported none (unmetered)."""
    if tokens is None:
        return CallUsage(requests=1, models={model: (0, 0, 0)}, unmetered={model: 1})
    return CallUsage(tokens[0], tokens[1], 1, {model: tokens}, {}, tokens[2])


@dataclass(frozen=True)
class CallUsage:
    """The model calls of one part of an iteration (the agent, the evaluator, ...).

    Attributes:
        input_tokens: Prompt tokens (``cached_tokens`` of them read from a prompt cache).
        output_tokens: Completion tokens.
        requests: Model calls that completed.
        models: ``(input_tokens, output_tokens, cached_tokens)`` by model name, for pricing.
        unmetered: By model name, the calls that reported no usage (they cannot be priced).
        cached_tokens: Of the prompt tokens, those the server read from its prompt cache.

    """

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    models: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    unmetered: Mapping[str, int] = field(default_factory=dict)
    cached_tokens: int = 0

    def __add__(self, other: CallUsage) -> CallUsage:
        if other is NO_USAGE:
            return self
        if self is NO_USAGE:
            return other
        models = dict(self.models)
        for name, counts in other.models.items():
            mine = models.get(name, (0, 0, 0))
            models[name] = (mine[0] + counts[0], mine[1] + counts[1], mine[2] + counts[2])
        unmetered = dict(self.unmetered)
        for name, calls in other.unmetered.items():
            unmetered[name] = unmetered.get(name, 0) + calls
        return CallUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            models,
            unmetered,
            self.cached_tokens + other.cached_tokens,
        )

    def stored(self) -> dict[str, Any]:
        """A plain form that a checkpointer stores (lists, not tuples; `of_stored` reads it)."""
        if self is NO_USAGE:
            return {}  # read back as NO_USAGE
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "requests": self.requests,
            "models": {name: list(counts) for name, counts in self.models.items()},
            "unmetered": dict(self.unmetered),
        }

    @classmethod
    def of_stored(cls, stored: Mapping[str, Any]) -> CallUsage:
        """The usage `stored` gave (older forms without cached tokens included)."""
        if not stored:  # NO_USAGE's form, read several times an iteration
            return NO_USAGE
        models = {
            n: (int(c[0]), int(c[1]), int(c[2]) if len(c) > 2 else 0)
            for n, c in (stored.get("models") or {}).items()
        }
        usage = cls(
            int(stored.get("input_tokens", 0)),
            int(stored.get("output_tokens", 0)),
            int(stored.get("requests", 0)),
            models,
            {name: int(n) for name, n in (stored.get("unmetered") or {}).items()},
            int(stored.get("cached_tokens", 0)),
        )
        return NO_USAGE if usage == NO_USAGE else usage


NO_USAGE = CallUsage()
"""No model call."""


def _model_name(metadata: Mapping[str, Any]) -> str:
    """The model an ``llm_output`` or a ``response_metadata`` names (``""`` when none)."""
    name = metadata.get("model_name") or metadata.get("model")
    return name if isinstance(name, str) else ""


def message_model(message: BaseMessage) -> str:
    """The model a response message names in its ``response_metadata`` (``""`` if none)."""
    return _model_name(message.response_metadata or {})


_COUNTER: ContextVar[TokenCounter | None] = ContextVar("loop_agents_evaluator_usage", default=None)
register_configure_hook(_COUNTER, inheritable=True)


class counting_tokens(AbstractContextManager[TokenCounter]):  # a class: entered around every call
    """Count the tokens of every chat-model call made inside the ``with`` block."""

    __slots__ = ("_token",)

    def __enter__(self) -> TokenCounter:
        counter = TokenCounter()
        self._token = _COUNTER.set(counter)
        return counter

    def __exit__(self, *exc_info: object) -> None:
        _COUNTER.reset(self._token)
