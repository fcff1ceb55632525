"""History policies that keep data between iterations and may call models.

A plain history policy is a sync function of `LoopHistory`. A policy that needs more (a
model call, sync under ``invoke`` and async under ``ainvoke``; data carried from one
iteration to the next, such as a running summary) subclasses `StatefulHistory`;
`compacting` is one.

What ``select``/``aselect`` return as ``memory`` is kept in the loop's state (the
internal key ``history_memory``) and given back at the next iteration of the same loop,
so it is saved by the checkpointer with the rest of the state and survives a resume;
a new loop on the thread starts with ``None``. It must be something the checkpointer
can store: plain ``dict``/``list``/``str``/number values.

The run config a policy is given names the iteration's ``"compaction"`` role (run name
``"iteration N: compaction"``, tag ``loop_role:compaction``): pass it to model calls so
they show up under that name in traces and are told apart on the ``messages`` stream.
Their tokens are counted into the iteration's record (``history_input_tokens``,
``history_output_tokens``) and so into ``token_budget``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

if TYPE_CHECKING:
    from loop_agents.loop.history.policies import LoopHistory


class HistoryChoice(NamedTuple):
    """What a `StatefulHistory` decided for one iteration.

    Attributes:
        messages: The messages the agent is sent (the request included; a tool call
            never without its result).
        memory: What to keep for the next iteration of this loop (``None``: nothing).

    """

    messages: Sequence[BaseMessage]
    memory: dict[str, Any] | None = None


class StatefulHistory(ABC):
    """A history policy with memory between iterations and sync and async forms.

    Subclass it and implement `select` (called under ``invoke``/``stream``) and `aselect`
    (under ``ainvoke``/``astream``); pass an instance as ``history=``. What they return
    is checked like a history function's result.

    Example:
        ```python
        class CountingHistory(StatefulHistory):
            def select(self, history, memory, config):
                calls = (memory or {}).get("calls", 0) + 1
                return HistoryChoice(history["messages"], {"calls": calls})

            async def aselect(self, history, memory, config):
                return self.select(history, memory, config)


        loop = create_loop_agent(agent, evaluate, 5, history=CountingHistory())
        ```

    """

    name: str = "history"
    """The policy's name in error messages."""

    @abstractmethod
    def select(
        self, history: LoopHistory, memory: dict[str, Any] | None, config: RunnableConfig
    ) -> HistoryChoice:
        """Choose what the agent is sent at the start of an iteration (sync).

        Args:
            history: The conversation, split for this iteration.
            memory: What this policy returned as ``memory`` at the previous iteration of
                this loop; ``None`` at a loop's first iteration.
            config: The run config for model calls made while choosing.

        """

    @abstractmethod
    async def aselect(
        self, history: LoopHistory, memory: dict[str, Any] | None, config: RunnableConfig
    ) -> HistoryChoice:
        """Choose what the agent is sent at the start of an iteration (async)."""
