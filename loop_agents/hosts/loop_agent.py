"""`LoopAgent`: the compiled loop graph, with its input and its thread checked first.

`create_loop_agent` compiles a plain LangGraph graph (a ``CompiledStateGraph``, in
`LoopAgent.graph`) and returns it wrapped in a `LoopAgent`. The wrapper is a LangGraph
``PregelProtocol`` (as LangGraph's own ``RemoteGraph`` is): it nests as a node of a parent
graph, streams in every ``stream_mode``, has ``get_state``/``update_state``,
``get_graph``, ``with_config``; anything else is the graph's own (``loop.channels``,
``loop.checkpointer``, ``loop.nodes``). Before a run, and before an update is stored,
it does what a compiled graph cannot do for itself:

- check the input (`loop_agents.loop.input_checks`), so that a malformed call fails with
  a `LoopInputError` saying what to pass, before LangGraph coerces, stores or runs
  anything; that includes ``Command(update=...)`` and ``update_state`` values for the
  loop's keys, which LangGraph would store as given and then fail to read back;
- hold the run's thread for the whole run (`loop_agents.runtime.thread_locking`), so that a
  second run on a busy thread fails with `ThreadBusyError` (or waits its turn) instead
  of silently overwriting the first run's checkpoints.

Nested in a parent graph (or run inside one, e.g. as a tool), the loop's input is the
parent's state and its thread is the parent's: only the loop's own keys are checked,
and the thread is the parent run's to guard (see `thread_guard`). A parent's
``agent_state`` key is the parent's own: the loop neither takes it as its agent's state
nor writes its own back to it, unless it was built with ``share_agent_state=True``
(`without_parent_keys`, `for_parent`). Run by LangGraph
Server, the thread is guarded by the server's ``multitask_strategy``; serve
`LoopAgent.graph` (see `loop_agents_cli.serving`).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import EmptyInputError
from langgraph.graph import END
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel.protocol import PregelProtocol
from langgraph.types import Command, StateUpdate

from loop_agents.loop.input_checks import EXAMPLE, LoopInputError, check_input, check_update
from loop_agents.loop.state import LoopInput, LoopOutput, LoopState
from loop_agents.runtime.thread_locking import (
    ConcurrentRuns,
    athread_guard,
    check_concurrent_runs,
    thread_guard,
)

LoopGraph = CompiledStateGraph[LoopState, None, LoopInput, LoopOutput]
"""The compiled loop graph a `LoopAgent` wraps."""

_SERVER_KEYS = frozenset({"graph_id", "assistant_id", "run_id"})


def _is_nested(config: RunnableConfig) -> bool:
    """Whether the run is part of a parent graph's run (its checkpoint namespace is set)."""
    return bool((config.get("configurable") or {}).get("checkpoint_ns"))


def _is_served(config: RunnableConfig) -> bool:
    """Whether LangGraph Server runs the loop (it guards threads itself)."""
    configurable = config.get("configurable") or {}
    return "langgraph_api" in sys.modules and configurable.keys() >= _SERVER_KEYS


class LoopAgent(PregelProtocol[LoopState, None, LoopInput, LoopOutput]):
    """A compiled loop graph whose runs check their input and hold their thread.

    Built by `create_loop_agent`. Runs (``invoke``, ``stream`` and their async and
    batch forms) and updates (``update_state``, ``bulk_update_state``) go through the
    checks in the module docstring, then to `graph`; everything else is `graph`'s.

    Attributes:
        graph: The compiled LangGraph graph (a ``CompiledStateGraph``).
        concurrent_runs: ``"reject"`` or ``"wait"``: what a run does when another run
            holds its thread (see `ConcurrentRuns`).
        busy_timeout: With ``"wait"``, the longest wait in seconds (``None``: no limit).

    Example:
        ```python
        loop = create_loop_agent(agent, evaluate, 3, checkpointer=InMemorySaver())
        loop.invoke({"messages": [HumanMessage("Hi")]}, {"configurable": {"thread_id": "t"}})
        print(type(loop.graph).__name__)  # CompiledStateGraph
        ```

    """

    def __init__(
        self,
        graph: LoopGraph,
        *,
        concurrent_runs: ConcurrentRuns = "reject",
        busy_timeout: float | timedelta | None = None,
        share_agent_state: bool = False,
    ) -> None:
        """Wrap ``graph``; check the thread options."""
        self.graph = graph
        self.concurrent_runs, self.busy_timeout = check_concurrent_runs(
            concurrent_runs, busy_timeout
        )
        if not isinstance(share_agent_state, bool):
            raise TypeError(
                f"share_agent_state must be True or False; got "
                f"{type(share_agent_state).__name__} {share_agent_state!r:.60}"
            )
        self.share_agent_state = share_agent_state

    def __getattr__(self, name: str) -> Any:
        """The graph's own attributes (``channels``, ``checkpointer``, ``nodes``, ...)."""
        if name == "graph":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.graph, name)

    def __repr__(self) -> str:
        return f"LoopAgent({self.graph.name!r})"

    @property
    def name(self) -> str:  # type: ignore[override]
        """The loop's name."""
        return str(self.graph.name)

    @property
    def InputType(self) -> Any:
        """The input type (the graph's)."""
        return self.graph.InputType

    @property
    def OutputType(self) -> Any:
        """The output type (the graph's)."""
        return self.graph.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        """The graph's input schema."""
        return self.graph.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> Any:
        """The graph's output schema."""
        return self.graph.get_output_schema(config)

    def _wrapped(self, graph: LoopGraph, *, share_agent_state: bool | None = None) -> LoopAgent:
        return LoopAgent(
            graph,
            concurrent_runs=self.concurrent_runs,
            busy_timeout=self.busy_timeout,
            share_agent_state=(
                self.share_agent_state if share_agent_state is None else share_agent_state
            ),
        )

    def sharing_agent_state(self) -> LoopAgent:
        """The same loop, taking a caller's ``agent_state`` and giving its own back when nested.

        What ``share_agent_state=True`` builds; a loop used as another loop's agent is
        called this way, so that the outer loop carries the inner agent's state.

        Example:
            ```python
            inner = create_loop_agent(deep_agent, judge, 3).sharing_agent_state()
            ```

        """
        return self._wrapped(self.graph, share_agent_state=True)

    def with_config(self, config: RunnableConfig | None = None, **kwargs: Any) -> LoopAgent:
        """The same loop with ``config`` merged into its graph's (as ``Pregel.with_config``)."""
        return self._wrapped(self.graph.with_config(config, **kwargs))

    def copy(self, update: dict[str, Any] | None = None) -> LoopAgent:
        """A copy whose graph has ``update`` applied (as ``Pregel.copy``)."""
        return self._wrapped(self.graph.copy(update))

    # -- what a run is checked against ---------------------------------------------------

    def _saver(self) -> BaseCheckpointSaver[Any] | None:
        saver = self.graph.checkpointer
        return saver if isinstance(saver, BaseCheckpointSaver) else None

    def _prepare(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[Any, RunnableConfig, BaseCheckpointSaver[Any] | None]:
        """The checked input, the run's whole config, and the saver to guard (if any)."""
        merged = ensure_config(merge_configs(self.graph.config, config))
        nested = _is_nested(merged)
        saver = self._saver()
        if nested and not self.share_agent_state:
            input = without_parent_keys(input)
        checked = check_input(input, nested=nested, checkpointer=saver is not None or nested)
        guarded = None if nested or _is_served(merged) else saver
        return checked, merged, guarded

    def _for_caller(self, output: Any, config: RunnableConfig) -> Any:
        """The run's output, without ``agent_state`` for a parent that did not ask for it."""
        if self.share_agent_state or not _is_nested(config):
            return output
        return for_parent(output)

    def _nothing_to_resume(self, config: RunnableConfig) -> LoopInputError:
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
        """The graph's ``stream``, after checking the input and taking the thread.

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
        with thread_guard(
            saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
        ):
            yielded = False
            try:
                for chunk in self.graph.stream(checked, config, **kwargs):
                    yielded = True
                    yield chunk
            except EmptyInputError as error:
                if yielded or input is not None:
                    raise
                raise self._nothing_to_resume(merged) from error

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The graph's ``astream``, after checking the input and taking the thread.

        Raises:
            LoopInputError: the input is not a loop input (see `check_input`).
            ThreadBusyError: another run holds the thread.

        Example:
            ```python
            async for chunk in loop.astream({"messages": [request]}, config):
                print(chunk)
            ```

        """
        checked, merged, saver = self._prepare(input, config)
        async with athread_guard(
            saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
        ):
            yielded = False
            try:
                async for chunk in self.graph.astream(checked, config, **kwargs):
                    yielded = True
                    yield chunk
            except EmptyInputError as error:
                if yielded or input is not None:
                    raise
                raise self._nothing_to_resume(merged) from error

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The graph's ``invoke``, after the checks of `stream`.

        Example:
            ```python
            result = loop.invoke({"messages": [HumanMessage("Write a haiku.")]})
            ```

        """
        checked, merged, saver = self._prepare(input, config)
        with thread_guard(
            saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
        ):
            try:
                return self._for_caller(self.graph.invoke(checked, config, **kwargs), merged)
            except EmptyInputError as error:
                if input is not None:
                    raise
                raise self._nothing_to_resume(merged) from error

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The graph's ``ainvoke``, after the checks of `stream`.

        Example:
            ```python
            result = await loop.ainvoke({"messages": [HumanMessage("Write a haiku.")]})
            ```

        """
        checked, merged, saver = self._prepare(input, config)
        async with athread_guard(
            saver, merged, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
        ):
            try:
                output = await self.graph.ainvoke(checked, config, **kwargs)
                return self._for_caller(output, merged)
            except EmptyInputError as error:
                if input is not None:
                    raise
                raise self._nothing_to_resume(merged) from error

    # -- the rest: the graph's, updates checked first ------------------------------------

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Any:
        """The graph's drawing (``get_graph``)."""
        return self.graph.get_graph(config, xray=xray)

    async def aget_graph(
        self, config: RunnableConfig | None = None, *, xray: int | bool = False
    ) -> Any:
        """The graph's drawing (``aget_graph``)."""
        return await self.graph.aget_graph(config, xray=xray)

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        """The thread's state (``get_state``)."""
        return self.graph.get_state(config, subgraphs=subgraphs)

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        """The thread's state (``aget_state``)."""
        return await self.graph.aget_state(config, subgraphs=subgraphs)

    def get_state_history(self, config: RunnableConfig, **kwargs: Any) -> Iterator[Any]:
        """The thread's checkpoints, newest first (``get_state_history``)."""
        return self.graph.get_state_history(config, **kwargs)

    def aget_state_history(self, config: RunnableConfig, **kwargs: Any) -> AsyncIterator[Any]:
        """The thread's checkpoints, newest first (``aget_state_history``)."""
        return self.graph.aget_state_history(config, **kwargs)

    def get_subgraphs(self, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """The graph's subgraphs (``get_subgraphs``)."""
        return self.graph.get_subgraphs(**kwargs)

    def aget_subgraphs(self, **kwargs: Any) -> AsyncIterator[tuple[str, Any]]:
        """The graph's subgraphs (``aget_subgraphs``)."""
        return self.graph.aget_subgraphs(**kwargs)

    def update_state(
        self,
        config: RunnableConfig,
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        **kwargs: Any,
    ) -> RunnableConfig:
        """``update_state``, after checking the values of the loop's keys.

        An update between iterations (the thread's next step is the agent's, or the loop
        has ended) is made as the ``evaluate`` node, and the loop goes on from it as the
        node itself would: to the agent, unless the state has a stop reason. So
        ``update_state`` then ``invoke(None, config)`` runs the next iteration (see
        `loop_agents.loop.checkpoints.checkpoint_before_iteration`).

        Raises:
            LoopInputError: a loop key's value of the wrong type (nothing is stored).

        """
        _check_values(values, "update_state")
        if as_node is None and isinstance(values, dict):
            values, as_node = _between_iterations(self.graph.get_state(config), values)
        return self.graph.update_state(config, values, as_node, **kwargs)

    async def aupdate_state(
        self,
        config: RunnableConfig,
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        **kwargs: Any,
    ) -> RunnableConfig:
        """``aupdate_state``, after checking the values of the loop's keys (see `update_state`)."""
        _check_values(values, "aupdate_state")
        if as_node is None and isinstance(values, dict):
            values, as_node = _between_iterations(await self.graph.aget_state(config), values)
        return await self.graph.aupdate_state(config, values, as_node, **kwargs)

    def bulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        """``bulk_update_state``, after checking every update's values."""
        for step in supersteps:
            for update in step:
                _check_values(update.values, "bulk_update_state")
        return self.graph.bulk_update_state(config, supersteps)

    async def abulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        """``abulk_update_state``, after checking every update's values."""
        for step in supersteps:
            for update in step:
                _check_values(update.values, "abulk_update_state")
        return await self.graph.abulk_update_state(config, supersteps)


PARENT_OWNED = ("agent_state",)
"""The loop's input and output keys that, nested in a parent graph, stay the parent's
unless the loop is built with ``share_agent_state=True``."""


def without_parent_keys(input: Any) -> Any:
    """A nested loop's input (the parent's state) without the keys that stay the parent's.

    Example:
        ```python
        without_parent_keys({"messages": [m], "agent_state": {"user": "ann"}})
        # {'messages': [m]}
        ```

    """
    if isinstance(input, Mapping):
        if not any(key in input for key in PARENT_OWNED):
            return input
        return {k: v for k, v in input.items() if k not in PARENT_OWNED}
    if input is None or isinstance(input, Command):
        return input
    # a parent whose state is an object (a pydantic model, a dataclass): its loop keys
    return {k: getattr(input, k) for k in ("messages", "init_messages") if hasattr(input, k)}


def for_parent(output: Any) -> Any:
    """A nested loop's output without the keys that stay the parent's (see `PARENT_OWNED`).

    Example:
        ```python
        for_parent({"messages": [m], "agent_state": {"files": {}}})  # {'messages': [m]}
        ```

    """
    if isinstance(output, Mapping) and any(key in output for key in PARENT_OWNED):
        return {k: v for k, v in output.items() if k not in PARENT_OWNED}
    return output


def _between_iterations(snapshot: Any, values: dict[str, Any]) -> tuple[Any, str | None]:
    """An update made between iterations, as the ``evaluate`` node with its route.

    The ``evaluate`` node routes with a ``Command``; an update made as it must say where
    the loop goes, or the thread would have no next step. Within an iteration (the next
    step is ``evaluate``) LangGraph's own choice stands.
    """
    if "evaluate" in snapshot.next or not snapshot.values:
        return values, None
    stop_reason = values.get("stop_reason", snapshot.values.get("stop_reason"))
    return Command(update=values, goto=END if stop_reason else "invoke_agent"), "evaluate"


def _check_values(values: object, where: str) -> None:
    if isinstance(values, dict):
        check_update([(str(k), v) for k, v in values.items()], where)


def graph_of(loop: LoopAgent | Any) -> Any:
    """The compiled graph of ``loop`` (a `LoopAgent`), or ``loop`` itself.

    Example:
        ```python
        compiled = graph_of(create_loop_agent(agent, judge, 3))  # a CompiledStateGraph
        ```

    """
    return loop.graph if isinstance(loop, LoopAgent) else loop


__all__ = [
    "PARENT_OWNED",
    "LoopAgent",
    "LoopGraph",
    "for_parent",
    "graph_of",
    "without_parent_keys",
]
_ = cast
