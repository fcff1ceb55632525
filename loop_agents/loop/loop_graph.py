"""`LoopAgentGraph`: the compiled loop, a LangGraph graph that checks its input and its thread.

`create_loop_agent` returns one. It is a ``CompiledStateGraph`` like any other (it
nests as a node, streams in every ``stream_mode``, has ``get_state``/``update_state``,
``get_graph``, ``with_config``, loads in LangGraph Server); only ``stream`` and
``astream`` (which ``invoke``, ``ainvoke``, ``batch`` and ``astream_events`` run
through) do two things first:

- check the input (`loop_agents.loop.input_checks`), so that a malformed call fails with a
  `LoopInputError` saying what to pass, before LangGraph coerces or runs anything;
- hold the run's thread for the whole run (`loop_agents.loop.thread_locking`), so that a
  second run on a busy thread fails with `ThreadBusyError` (or waits its turn) instead
  of silently overwriting the first run's checkpoints.

Nested in a parent graph (or run inside one, e.g. as a tool), the loop's input is the
parent's state and its thread is the parent's: only the loop's own keys are checked,
and the thread is the parent run's to guard (see `thread_guard`). Run by LangGraph
Server, the thread is guarded by the server's ``multitask_strategy`` and the loop
leaves it to the server.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import aclosing, closing
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import EmptyInputError
from langgraph.graph.state import CompiledStateGraph

from loop_agents.loop.input_checks import EXAMPLE, LoopInputError, check_input
from loop_agents.loop.state import LoopInput, LoopOutput, LoopState
from loop_agents.loop.thread_locking import (
    ConcurrentRuns,
    athread_guard,
    check_concurrent_runs,
    thread_guard,
)

_SERVER_KEYS = frozenset({"graph_id", "assistant_id", "run_id"})


def _is_nested(config: RunnableConfig) -> bool:
    """Whether the run is part of a parent graph's run (its checkpoint namespace is set)."""
    return bool((config.get("configurable") or {}).get("checkpoint_ns"))


def _is_served(config: RunnableConfig) -> bool:
    """Whether LangGraph Server runs the loop (it guards threads itself)."""
    configurable = config.get("configurable") or {}
    return "langgraph_api" in sys.modules and configurable.keys() >= _SERVER_KEYS


class LoopAgentGraph(CompiledStateGraph[LoopState, None, LoopInput, LoopOutput]):
    """A compiled loop: a ``CompiledStateGraph`` that checks its input and guards its thread.

    Built by `create_loop_agent`; ``with_config`` and ``copy`` keep the class and its
    options.

    Attributes:
        concurrent_runs: ``"reject"`` or ``"wait"``: what a run does when another run
            holds its thread (see `ConcurrentRuns`).
        busy_timeout: With ``"wait"``, the longest wait in seconds (``None``: no limit).

    Example:
        ```python
        loop = create_loop_agent(agent, evaluate, 3, checkpointer=InMemorySaver())
        assert isinstance(loop, LoopAgentGraph)
        loop.invoke({"messages": [HumanMessage("Hi")]}, {"configurable": {"thread_id": "t"}})
        ```

    """

    concurrent_runs: ConcurrentRuns
    busy_timeout: float | None

    def __init__(
        self,
        *,
        concurrent_runs: ConcurrentRuns = "reject",
        busy_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        """Take a compiled graph's attributes (as ``Pregel.copy`` does) and the options."""
        super().__init__(**kwargs)
        self.concurrent_runs, self.busy_timeout = check_concurrent_runs(
            concurrent_runs, busy_timeout
        )

    @classmethod
    def of(
        cls,
        graph: CompiledStateGraph[LoopState, None, LoopInput, LoopOutput],
        *,
        concurrent_runs: ConcurrentRuns = "reject",
        busy_timeout: float | None = None,
    ) -> LoopAgentGraph:
        """The loop graph for ``graph`` (what ``StateGraph.compile`` returned).

        Built the way ``Pregel.copy`` builds its copies: from the graph's attributes.
        """
        attributes = {k: v for k, v in vars(graph).items() if k != "__orig_class__"}
        return cls(concurrent_runs=concurrent_runs, busy_timeout=busy_timeout, **attributes)

    # -- what a run is checked against ---------------------------------------------------

    def _saver(self) -> BaseCheckpointSaver[Any] | None:
        saver = self.checkpointer
        return saver if isinstance(saver, BaseCheckpointSaver) else None

    def _prepare(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[Any, RunnableConfig, BaseCheckpointSaver[Any] | None]:
        """The checked input, the run's whole config, and the saver to guard (if any)."""
        merged = ensure_config(merge_configs(self.config, config))
        nested = _is_nested(merged)
        saver = self._saver()
        checked = check_input(input, nested=nested, checkpointer=saver is not None or nested)
        guarded = None if nested or _is_served(merged) else saver
        return checked, merged, guarded

    def _nothing_to_resume(self, config: RunnableConfig, error: EmptyInputError) -> LoopInputError:
        thread = (config.get("configurable") or {}).get("thread_id")
        return LoopInputError(
            f"the loop was called with None, which resumes the run saved on a thread, and "
            f"thread {thread!r} has no saved run (check the thread_id). To start a loop "
            f"on it, pass the request: loop.invoke({EXAMPLE}, config)"
        )

    # -- the runs ------------------------------------------------------------------------

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """``CompiledStateGraph.stream``, after checking the input and taking the thread.

        Raises:
            LoopInputError: the input is not a loop input (see `check_input`).
            ThreadBusyError: another run holds the thread (``concurrent_runs="reject"``,
                or it stayed busy past ``busy_timeout``).

        Example:
            ```python
            for chunk in loop.stream({"messages": [request]}, config, stream_mode="updates"):
                print(chunk)
            ```

        """
        checked, merged, saver = self._prepare(input, config)
        with (
            thread_guard(
                saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
            ),
            closing(
                cast(Generator[Any, None, None], super().stream(checked, config, **kwargs))
            ) as chunks,
        ):
            yielded = False
            try:
                for chunk in chunks:
                    yielded = True
                    yield chunk
            except EmptyInputError as error:
                if yielded or input is not None:
                    raise
                raise self._nothing_to_resume(merged, error) from error

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """``CompiledStateGraph.astream``, after checking the input and taking the thread.

        Raises:
            LoopInputError: the input is not a loop input (see `check_input`).
            ThreadBusyError: another run holds the thread (``concurrent_runs="reject"``,
                or it stayed busy past ``busy_timeout``).

        Example:
            ```python
            async for chunk in loop.astream({"messages": [request]}, config):
                print(chunk)
            ```

        """
        checked, merged, saver = self._prepare(input, config)
        async with (
            athread_guard(
                saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
            ),
            aclosing(
                cast(AsyncGenerator[Any, None], super().astream(checked, config, **kwargs))
            ) as chunks,
        ):
            yielded = False
            try:
                async for chunk in chunks:
                    yielded = True
                    yield chunk
            except EmptyInputError as error:
                if yielded or input is not None:
                    raise
                raise self._nothing_to_resume(merged, error) from error
