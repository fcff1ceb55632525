"""`compacting`: a history policy that summarizes older attempts to fit a token budget.

While the prompt fits ``max_tokens`` the agent is sent everything (the earlier turns of
the thread as the user saw them, the request, every attempt and its feedback). When it
would not fit, the oldest attempts with their feedback are replaced by one summary
message that ``model`` writes; the request and the latest attempt with its feedback are
always sent verbatim. Attempts are summarized whole, so a tool call is never separated
from its result.

The summary is incremental: each attempt is given to the summarizer once, with the
previous summary, and the result is kept in the loop's state (``history_memory``), so
later iterations, a retried agent call and a loop resumed from a checkpoint reuse it.
See ``docs/history.md`` for the budget rule and the token estimate.
"""

from __future__ import annotations

import hashlib
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.loop._reporting import write_event
from loop_agents.loop.agents import encodable
from loop_agents.loop.events import HistoryCompacted
from loop_agents.loop.history._summary_text import (
    DEFAULT_SUMMARY_INSTRUCTIONS,
    reply_text,
    summarizer_prompt,
    summary_message,
)
from loop_agents.loop.history._token_count import (
    CounterOption,
    TokenCounter,
    checked_count,
    resolve_counter,
)
from loop_agents.loop.history.policies import (
    Attempt,
    HistoryChoice,
    LoopHistory,
    StatefulHistory,
    added_messages,
    without_rejected_attempts,
)
from loop_agents.loop.tracing import LOOP_KEY

_CACHE_SIZE = 256


@dataclass(frozen=True)
class _Summary:
    """A summary of the first ``len(covers)`` attempts of a loop."""

    text: str
    covers: tuple[str, ...]  # the key of each summarized attempt, oldest first

    def memory(self) -> dict[str, Any]:
        return {"summary": self.text, "covers": list(self.covers)}


@dataclass
class _Plan:
    """What to send at one iteration, before the summary call (if one is needed)."""

    base: list[AnyMessage]
    attempts: list[Attempt]
    pending: list[AnyMessage]
    previous: _Summary | None
    covered: int  # how many attempts the summary will cover
    tokens_before: int


class CompactingHistory(StatefulHistory):
    """The policy `compacting` returns; see there."""

    name = "compacting"

    def __init__(
        self,
        model: Runnable[Any, Any],
        *,
        max_tokens: int,
        summary_tokens: int,
        token_counter: CounterOption,
        instructions: str,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.summary_tokens = summary_tokens
        self.instructions = instructions
        self._counter_option = token_counter
        self._counter: TokenCounter | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, ...], str] = OrderedDict()

    # -- the two forms -------------------------------------------------------------------

    def select(
        self, history: LoopHistory, memory: dict[str, Any] | None, config: RunnableConfig
    ) -> HistoryChoice:
        """Send everything, or the summary and the recent attempts (sync)."""
        plan = self._plan(history, memory)
        text = self._reused(plan)
        if text is None:
            started = time.perf_counter()
            reply = self.model.invoke(encodable(self._summary_prompt(plan)), config)
            text = self._new_summary(plan, history, config, reply, started)
        return self._choice(plan, text)

    async def aselect(
        self, history: LoopHistory, memory: dict[str, Any] | None, config: RunnableConfig
    ) -> HistoryChoice:
        """Send everything, or the summary and the recent attempts (async)."""
        plan = self._plan(history, memory)
        text = self._reused(plan)
        if text is None:
            started = time.perf_counter()
            reply = await self.model.ainvoke(encodable(self._summary_prompt(plan)), config)
            text = self._new_summary(plan, history, config, reply, started)
        return self._choice(plan, text)

    # -- deciding what to summarize --------------------------------------------------------

    def count(self, messages: Sequence[BaseMessage]) -> int:
        """The token count of ``messages`` with this policy's counter.

        Example:
            ```python
            policy = compacting(model, max_tokens=4000)
            print(policy.count([HumanMessage("hello")]))
            ```

        """
        return checked_count(self._resolved_counter(), messages)

    def _plan(self, history: LoopHistory, memory: dict[str, Any] | None) -> _Plan:
        attempts = history["attempts"]
        base = [*without_rejected_attempts(history["earlier"]), *history["request"]]
        plan = _Plan(base, attempts, history["pending"], _valid(memory, attempts), 0, 0)
        done = len(plan.previous.covers) if plan.previous else 0
        plan.tokens_before = self.count(_prompt(plan, 0, None))
        plan.covered = done
        current = self.count(_prompt(plan, done, self._message(plan.previous, done)))
        if current <= self.max_tokens or len(attempts) - 1 <= done:
            return plan
        # summarize as few more attempts as fit the budget, never the latest one
        for covered in range(done + 1, len(attempts)):
            plan.covered = covered
            if self.count(_prompt(plan, covered, None)) + self.summary_tokens <= self.max_tokens:
                break
        return plan

    def _reused(self, plan: _Plan) -> str | None:
        """The summary text to send ("" for none), or ``None`` when one must be made."""
        done = len(plan.previous.covers) if plan.previous else 0
        if plan.covered == 0:
            return ""
        if plan.covered == done and plan.previous is not None:
            return plan.previous.text
        return self._cached(self._key(plan))

    def _new_summary(
        self,
        plan: _Plan,
        history: LoopHistory,
        config: RunnableConfig,
        reply: object,
        started: float,
    ) -> str:
        text = self._store(
            self._key(plan), self._fit(reply_text(reply, plan.covered), plan.covered)
        )
        self._report(history, plan, config, reply, time.perf_counter() - started, text)
        return text

    def _choice(self, plan: _Plan, text: str) -> HistoryChoice:
        summary = None
        if plan.covered:
            summary = _Summary(text, tuple(_attempt_key(a) for a in plan.attempts[: plan.covered]))
        sent = _prompt(plan, plan.covered, self._message(summary, plan.covered))
        tokens = self.count(sent)
        if tokens > self.max_tokens:
            warnings.warn(
                f"compacting history: the prompt takes {tokens:,} tokens, over max_tokens="
                f"{self.max_tokens:,}, even with the older attempts summarized: the request "
                f"and the latest attempt are always sent whole. Raise max_tokens or lower "
                f"summary_tokens.",
                UserWarning,
                stacklevel=2,
            )
        return HistoryChoice(sent, summary.memory() if summary else None)

    # -- the summary -----------------------------------------------------------------------

    def _summary_prompt(self, plan: _Plan) -> list[BaseMessage]:
        previous = plan.previous
        done = len(previous.covers) if previous else 0
        return summarizer_prompt(
            self.instructions,
            words=max(10, self.summary_tokens // 2),
            request=plan.base,
            previous=(previous.text, done) if previous else None,
            attempts=plan.attempts[done : plan.covered],
        )

    def _message(self, summary: _Summary | None, covered: int) -> HumanMessage | None:
        if summary is None or covered == 0:
            return None
        return self._summary_message(summary, covered)

    @staticmethod
    def _summary_message(summary: _Summary, covered: int) -> HumanMessage:
        return summary_message(summary.text, summary.covers, covered)

    def _fit(self, text: str, covered: int) -> str:
        """Cut ``text`` until its summary message takes at most ``summary_tokens``."""
        framing = self.count([self._summary_message(_Summary("", ()), covered)])
        if framing >= self.summary_tokens:
            raise ValueError(
                f"compacting(summary_tokens={self.summary_tokens}) is too small: the summary "
                f"message's own framing takes {framing} tokens; pass a larger summary_tokens"
            )
        body = candidate = text
        while True:
            tokens = self.count([self._summary_message(_Summary(candidate, ()), covered)])
            if tokens <= self.summary_tokens or not body:
                return candidate
            share = (self.summary_tokens - framing) / max(1, tokens - framing)
            cut = min(len(body) - max(1, len(body) // 20), int(len(body) * share * 0.95))
            body = body[: max(cut, 0)].rstrip()
            candidate = f"{body} [...]" if body else ""

    def _report(
        self,
        history: LoopHistory,
        plan: _Plan,
        config: RunnableConfig,
        reply: object,
        seconds: float,
        text: str,
    ) -> None:
        done = len(plan.previous.covers) if plan.previous else 0
        summary = _Summary(text, ())
        sent = _prompt(plan, plan.covered, self._message(summary, plan.covered))
        usage = reply.usage_metadata if isinstance(reply, AIMessage) else None
        event: HistoryCompacted = {
            "type": "history_compacted",
            "loop": str((config.get("metadata") or {}).get(LOOP_KEY, "")),
            "iteration": history["iteration"],
            "summarized": list(range(1, plan.covered + 1)),
            "added": list(range(done + 1, plan.covered + 1)),
            "tokens_before": plan.tokens_before,
            "tokens_after": self.count(sent),
            "max_tokens": self.max_tokens,
            "seconds": seconds,
            "input_tokens": int(usage["input_tokens"]) if usage else 0,
            "output_tokens": int(usage["output_tokens"]) if usage else 0,
        }
        write_event(event)

    # -- the cache and the counter --------------------------------------------------------

    def _key(self, plan: _Plan) -> tuple[str, ...]:
        previous = plan.previous.text if plan.previous else ""
        return (previous, *(_attempt_key(a) for a in plan.attempts[: plan.covered]))

    def _cached(self, key: tuple[str, ...]) -> str | None:
        with self._lock:
            text = self._cache.get(key)
            if text is not None:
                self._cache.move_to_end(key)
            return text

    def _store(self, key: tuple[str, ...], text: str) -> str:
        with self._lock:
            self._cache[key] = text
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return text

    def _resolved_counter(self) -> TokenCounter:
        with self._lock:
            if self._counter is None:
                self._counter = resolve_counter(self._counter_option, self.model)
            return self._counter


def compacting(
    model: Runnable[Any, Any],
    *,
    max_tokens: int,
    summary_tokens: int | None = None,
    token_counter: CounterOption = None,
    instructions: str | None = None,
) -> CompactingHistory:
    """A history policy that summarizes older attempts when the prompt would exceed a budget.

    At each iteration the agent is sent what ``"full"`` sends (with the thread's earlier
    turns as the user saw them) as long as its tokens stay within ``max_tokens``. When
    they would not, the oldest attempts with their feedback are replaced by one summary
    message written by ``model``: as few attempts as bring the prompt within the budget,
    never the latest one. The request, the latest attempt (with its tool calls and tool
    results) and its feedback are always sent verbatim; messages added during the loop
    (e.g. with ``update_state``) are kept.

    Each attempt is summarized once: the next summary is made from the previous one and
    the attempts it did not cover, and it is kept in the loop's state, so it survives a
    checkpoint and a resume. The summary call is a run named ``"iteration N:
    compaction"``; its tokens count into the iteration's record and ``token_budget``; a
    ``history_compacted`` event is written on the ``custom`` stream.

    Args:
        model: The summarizer: a chat model (or any runnable taking messages and returning
            a message or text), e.g. a small, cheap model. It needs no tool calling.
        max_tokens: The budget for what the agent is sent.
        summary_tokens: The most tokens the summary message may take (a longer summary
            is cut); default ``max_tokens // 4``. The summarizer is asked for about half
            as many words.
        token_counter: How tokens are counted. ``None`` (the default): ``model``'s
            ``get_num_tokens_from_messages`` when its class provides its own tokenizer and
            it works on this machine (offline included), else ``"approximate"``.
            ``"approximate"``: langchain-core's ``count_tokens_approximately`` (4
            characters a token, plus 3 a message). A chat model: its
            ``get_num_tokens_from_messages`` (pass the agent's model to count with its
            tokenizer). Or a function of a list of messages returning an int.
        instructions: The summarizer's system prompt (``{words}`` in it is replaced by
            the length asked for); default `DEFAULT_SUMMARY_INSTRUCTIONS`.

    Returns:
        A `StatefulHistory` to pass to `History`.

    Raises:
        TypeError: ``model`` cannot be invoked, or an option has the wrong type.
        ValueError: ``max_tokens`` or ``summary_tokens`` is out of range.

    Example:
        ```python
        from langchain_openai import ChatOpenAI
        from loop_agents import create_loop_agent
        from loop_agents.loop.history.compaction import compacting

        history = compacting(ChatOpenAI(model="gpt-5.4-nano"), max_tokens=8_000)
        loop = create_loop_agent(agent, judge, 10, controls=[History(history)])
        ```

    """
    if not (callable(getattr(model, "invoke", None)) and callable(getattr(model, "ainvoke", None))):
        raise TypeError(
            f"compacting needs a chat model (or a runnable of messages) to summarize with; "
            f"got {type(model).__name__} {model!r:.60}"
        )
    max_tokens = _positive_int("max_tokens", max_tokens)
    if summary_tokens is None:
        summary_tokens = max(1, max_tokens // 4)
    summary_tokens = _positive_int("summary_tokens", summary_tokens)
    if summary_tokens >= max_tokens:
        raise ValueError(
            f"summary_tokens ({summary_tokens}) must be below max_tokens ({max_tokens}): the "
            f"request and the latest attempt are sent beside the summary"
        )
    if instructions is None:
        instructions = DEFAULT_SUMMARY_INSTRUCTIONS
    elif not isinstance(instructions, str) or not instructions.strip():
        raise TypeError(f"instructions must be a non-empty string; got {instructions!r:.60}")
    if isinstance(token_counter, str) and token_counter != "approximate":
        raise ValueError(
            f"token_counter must be 'approximate', a chat model, a function of messages or "
            f"None; got {token_counter!r}"
        )
    if (
        token_counter is not None
        and not isinstance(token_counter, str | BaseLanguageModel)
        and not callable(token_counter)
    ):
        raise TypeError(
            f"token_counter must be 'approximate', a chat model, a function of messages "
            f"or None; got {type(token_counter).__name__}"
        )
    return CompactingHistory(
        model,
        max_tokens=max_tokens,
        summary_tokens=summary_tokens,
        token_counter=token_counter,
        instructions=instructions,
    )


# -- helpers ---------------------------------------------------------------------------------


def _prompt(plan: _Plan, covered: int, summary: HumanMessage | None) -> list[AnyMessage]:
    """The base, the kept messages of summarized attempts, the summary, the rest."""
    sent = list(plan.base)
    for attempt in plan.attempts[:covered]:
        sent += added_messages(attempt["messages"])
    if summary is not None:
        sent.append(summary)
    for attempt in plan.attempts[covered:]:
        sent += [*attempt["messages"], attempt["feedback"]]
    return [*sent, *plan.pending]


def _valid(memory: dict[str, Any] | None, attempts: Sequence[Attempt]) -> _Summary | None:
    """The summary in ``memory`` if it covers this conversation's first attempts."""
    if not memory:
        return None
    text, covers = memory.get("summary"), memory.get("covers")
    if not isinstance(text, str) or not isinstance(covers, list) or not covers:
        return None
    if len(covers) >= len(attempts):  # it would cover the latest attempt: not ours
        return None
    if [_attempt_key(a) for a in attempts[: len(covers)]] != covers:
        return None
    return _Summary(text, tuple(str(c) for c in covers))


def _attempt_key(attempt: Attempt) -> str:
    """Names one attempt by the ids of its messages and of its feedback."""
    parts = []
    for message in (*attempt["messages"], attempt["feedback"]):
        if message.id:
            parts.append(message.id)
        else:
            digest = hashlib.sha256(repr((message.type, message.content)).encode()).hexdigest()
            parts.append(digest[:16])
    return "|".join(parts)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (tokens); got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1 tokens; got {value}")
    return value
