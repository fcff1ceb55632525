"""Counting the tokens of the chat-model calls made while an evaluator runs.

An evaluator may call models however it likes: through a ready-made ``llm_judge``, a
model invoked with the config it was given, or a model invoked with no config at all.
`counting_tokens` catches them all through a configure hook of ``langchain_core``: while
the context variable below holds a `TokenCounter`, every callback manager configured in
that context (and in the threads and tasks started from it) gets the counter, which
sums the ``usage_metadata`` of each model response.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook


class TokenCounter(BaseCallbackHandler):
    """Sums ``input_tokens`` and ``output_tokens`` over the chat-model calls it sees.

    Unlike ``langchain_core``'s ``UsageMetadataCallbackHandler`` it counts responses that
    carry no model name too (custom and fake chat models).
    """

    run_inline = True  # a sum under a lock: no executor hop from async callback managers

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.input_tokens = 0
        self.output_tokens = 0

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
        """Add the usage of one model call (its first generation carries it)."""
        if not response.generations or not response.generations[0]:
            return
        generation = response.generations[0][0]
        if not isinstance(generation, ChatGeneration):
            return
        message = generation.message
        if isinstance(message, AIMessage) and message.usage_metadata:
            with self._lock:
                self.input_tokens += int(message.usage_metadata.get("input_tokens", 0))
                self.output_tokens += int(message.usage_metadata.get("output_tokens", 0))

    @property
    def totals(self) -> tuple[int, int]:
        """``(input_tokens, output_tokens)`` so far."""
        with self._lock:
            return self.input_tokens, self.output_tokens


_EVALUATOR_USAGE: ContextVar[TokenCounter | None] = ContextVar(
    "loop_agents_evaluator_usage", default=None
)
register_configure_hook(_EVALUATOR_USAGE, inheritable=True)


@contextmanager
def counting_tokens() -> Iterator[TokenCounter]:
    """Count the tokens of every chat-model call made inside the ``with`` block.

    Example:
        ```python
        with counting_tokens() as counter:
            judge.invoke(messages)
        tokens_in, tokens_out = counter.totals
        ```

    """
    counter = TokenCounter()
    token = _EVALUATOR_USAGE.set(counter)
    try:
        yield counter
    finally:
        _EVALUATOR_USAGE.reset(token)
