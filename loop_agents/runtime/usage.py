"""Counting the tokens of the chat-model calls made while a part of the loop runs.

An agent, an evaluator, an advisor or a history policy may call models however it likes:
through a ready-made ``llm_judge``, a model invoked with the config it was given, or a
model invoked with no config at all. `counting_tokens` catches them all through a
configure hook of ``langchain_core``: while the context variable below holds a
`TokenCounter`, every callback manager configured in that context (and in the threads
and tasks started from it) gets the counter, which sums the ``usage_metadata`` of each
model response: input tokens, output tokens, and the input tokens the server read from
its prompt cache (``input_token_details["cache_read"]``, which langchain-openai fills
from the server's ``prompt_tokens_details.cached_tokens``).
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


class TokenCounter(BaseCallbackHandler):
    """Sums ``input_tokens`` and ``output_tokens`` over the chat-model calls it sees.

    Unlike ``langchain_core``'s ``UsageMetadataCallbackHandler`` it counts responses that
    carry no model name too (custom and fake chat models). It also counts the calls
    (``requests``: each completed chat-model or LLM call) and keeps the tokens by model
    name, for request and cost budgets.
    """

    run_inline = True  # a sum under a lock: no executor hop from async callback managers

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.input_tokens = 0
        self.output_tokens = 0
        self.requests = 0
        self.cached_tokens = 0
        self.models: dict[str, list[int]] = {}
        self.unmetered: dict[str, int] = {}

    @property
    def ignore_chain(self) -> bool:
        """Chain runs carry no usage: skip their events."""
        return True

    @property
    def ignore_agent(self) -> bool:
        """Agent actions carry no usage: skip their events."""
        return True

    @property
    def ignore_retriever(self) -> bool:
        """Retriever runs carry no usage: skip their events."""
        return True

    @property
    def ignore_custom_event(self) -> bool:
        """Custom events carry no usage: skip them."""
        return True

    @property
    def ignore_chat_model(self) -> bool:
        """Skip chat-model starts (the usage comes with ``on_llm_end``).

        Without this, LangChain falls back to ``on_llm_start`` with every prompt
        rendered as a string.
        """
        return True

    @property
    def ignore_retry(self) -> bool:
        """Retries carry no usage: skip their events."""
        return True

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """Count one model call and add its usage (its first generation carries it)."""
        tokens = (0, 0, 0)
        metered = False
        model = _model_name(response)
        generation = (
            response.generations[0][0] if response.generations and response.generations[0] else None
        )
        if isinstance(generation, ChatGeneration):
            message = generation.message
            if isinstance(message, AIMessage) and message.usage_metadata:
                metered = True
                tokens = usage_of_metadata(message.usage_metadata)
            model = model or message_model(message)
        usage = (response.llm_output or {}).get("token_usage")
        if not metered and isinstance(usage, Mapping) and usage:
            # a completion model (or an older chat model) reports its usage here
            metered = True
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
            tokens = (
                int(usage.get("prompt_tokens", 0)),
                int(usage.get("completion_tokens", 0)),
                int(cached or 0),
            )
        with self._lock:
            self.requests += 1
            self.input_tokens += tokens[0]
            self.output_tokens += tokens[1]
            self.cached_tokens += tokens[2]
            per_model = self.models.setdefault(model, [0, 0, 0])
            for index, count in enumerate(tokens):
                per_model[index] += count
            if not metered:
                self.unmetered[model] = self.unmetered.get(model, 0) + 1

    @property
    def totals(self) -> tuple[int, int]:
        """``(input_tokens, output_tokens)`` so far."""
        with self._lock:
            return self.input_tokens, self.output_tokens

    def usage(self) -> CallUsage:
        """What the calls seen so far used: tokens, requests, tokens by model name."""
        with self._lock:
            if not (self.requests or self.input_tokens or self.output_tokens):
                return NO_USAGE  # no call seen (a call is counted in requests)
            return CallUsage(
                self.input_tokens,
                self.output_tokens,
                self.requests,
                {name: (c[0], c[1], c[2]) for name, c in self.models.items()},
                dict(self.unmetered),
                self.cached_tokens,
            )


def usage_of_metadata(metadata: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(input, output, cached input)`` tokens of a message's ``usage_metadata``.

    Cached input tokens are the prompt tokens the server read from its prompt cache
    (``input_token_details["cache_read"]``); they are part of the input tokens.

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


@dataclass(frozen=True)
class CallUsage:
    """The model calls of one part of an iteration (the agent, the evaluator, ...).

    Attributes:
        input_tokens: Prompt tokens, from the responses' ``usage_metadata``.
        output_tokens: Completion tokens.
        requests: Model calls that completed.
        models: ``(input_tokens, output_tokens, cached_tokens)`` by model name (``""``
            when a response named no model), for pricing.
        unmetered: By model name, the calls whose response reported no token usage
            (a streaming call to a server that does not send it, a fake model): their
            tokens are unknown, so they cannot be priced.
        cached_tokens: Of the prompt tokens, those the server read from its prompt
            cache (0 when it reported none).

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
        """A plain form that a checkpointer stores (lists, not tuples).

        Example:
            ```python
            assert CallUsage.of_stored(usage.stored()) == usage
            ```

        """
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
        if not stored or not (
            stored.get("requests")
            or stored.get("input_tokens")
            or stored.get("output_tokens")
            or stored.get("cached_tokens")
            or stored.get("models")
            or stored.get("unmetered")
        ):
            return NO_USAGE
        given = stored.get("models")
        models = (
            {
                name: (int(c[0]), int(c[1]), int(c[2]) if len(c) > 2 else 0)
                for name, c in given.items()
            }
            if given
            else {}
        )
        unmetered = stored.get("unmetered")
        return cls(
            int(stored.get("input_tokens", 0)),
            int(stored.get("output_tokens", 0)),
            int(stored.get("requests", 0)),
            models,
            {name: int(n) for name, n in unmetered.items()} if unmetered else {},
            int(stored.get("cached_tokens", 0)),
        )


NO_USAGE = CallUsage()
"""No model call."""


def _model_name(response: LLMResult) -> str:
    """The model a response names in ``llm_output`` (``""`` when none)."""
    output = response.llm_output or {}
    name = output.get("model_name") or output.get("model")
    return name if isinstance(name, str) else ""


def message_model(message: BaseMessage) -> str:
    """The model a response message names in its ``response_metadata`` (``""`` if none)."""
    metadata = message.response_metadata or {}
    name = metadata.get("model_name") or metadata.get("model")
    return name if isinstance(name, str) else ""


_EVALUATOR_USAGE: ContextVar[TokenCounter | None] = ContextVar(
    "loop_agents_evaluator_usage", default=None
)
register_configure_hook(_EVALUATOR_USAGE, inheritable=True)


def counting_tokens() -> AbstractContextManager[TokenCounter]:
    """Count the tokens of every chat-model call made inside the ``with`` block.

    Example:
        ```python
        with counting_tokens() as counter:
            judge.invoke(messages)
        tokens_in, tokens_out = counter.totals
        ```

    """
    return _Counting()


class _Counting(AbstractContextManager[TokenCounter]):
    """`counting_tokens`'s block: a new counter is the current one while it runs.

    A class rather than a ``@contextmanager`` generator: it is entered around every
    agent and evaluator call, and costs fewer Python calls this way.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> TokenCounter:
        counter = TokenCounter()
        self._token = _EVALUATOR_USAGE.set(counter)
        return counter

    def __exit__(self, *exc_info: object) -> None:
        _EVALUATOR_USAGE.reset(self._token)
