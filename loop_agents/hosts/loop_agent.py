"""`LoopAgent`: the compiled loop graph, with its input and its thread checked first.

A LangGraph ``PregelProtocol`` (as ``RemoteGraph`` is) around the graph `create_loop_agent`
compiles. Nested in a parent graph, only the loop's own keys are checked, the thread is the
parent's to guard, and a parent's ``agent_state`` stays the parent's unless shared. See
docs/reliability.md.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
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

_NOTHING = nullcontext()  # a with block that does nothing (it keeps no state: shared)

PARENT_OWNED = ("agent_state",)
"""Input and output keys that, nested in a parent graph, stay the parent's (unless shared)."""


class LoopAgent(PregelProtocol[LoopState, None, LoopInput, LoopOutput]):
    """A compiled loop graph whose runs check their input and hold their thread.

    Built by `create_loop_agent`. Runs (``invoke``, ``stream``, their async and batch
    forms) and updates (``update_state``, ``bulk_update_state``) are checked first
    (`LoopInputError` before anything runs or is stored), then go to `graph`; everything
    else is `graph`'s (``loop.channels``, ``loop.checkpointer``).

    Attributes:
        graph: The compiled LangGraph graph (a ``CompiledStateGraph``).
        concurrent_runs: ``"reject"`` or ``"wait"`` (see `ConcurrentRuns`).
        busy_timeout: With ``"wait"``, the longest wait in seconds (``None``: no limit).
        share_agent_state: Nested, whether the parent's ``agent_state`` is shared.

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

    def _wrapped(self, graph: LoopGraph, share_agent_state: bool | None = None) -> LoopAgent:
        return LoopAgent(
            graph,
            concurrent_runs=self.concurrent_runs,
            busy_timeout=self.busy_timeout,
            share_agent_state=share_agent_state or self.share_agent_state,
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

    def _prepare(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[Any, RunnableConfig, Any]:
        """The checked input, the run's ``configurable`` keys, and the saver to guard."""
        run: RunnableConfig = {"configurable": self._configurable(config)}
        nested = _is_nested(run)
        saver = self.graph.checkpointer
        saver = saver if isinstance(saver, BaseCheckpointSaver) else None
        if nested and not self.share_agent_state:
            input = _without_parent_keys(input)
        checked = check_input(input, nested=nested, checkpointer=saver is not None or nested)
        served = "langgraph_api" in sys.modules and run["configurable"].keys() >= _SERVER_KEYS
        return checked, run, None if nested or served else saver

    def _configurable(self, config: RunnableConfig | None) -> dict[str, Any]:
        """The ``configurable`` keys LangGraph's run will have (else the calling run's)."""
        # what ensure_config(merge_configs(self.graph.config, config)) gives for this key,
        # without copying every other key of both configs on every run
        own = self.graph.config.get("configurable") if self.graph.config else None
        given = config.get("configurable") if config else None
        if own is not None or given is not None:
            return {**(own or {}), **(given or {})}
        parent = var_child_runnable_config.get()
        return dict((parent or {}).get("configurable") or {})

    def _for_caller(self, output: Any, run: RunnableConfig) -> Any:
        """The run's output, without ``agent_state`` for a parent that did not ask for it."""
        return output if self.share_agent_state or not _is_nested(run) else _for_parent(output)

    def _guard(self, saver: Any, run: RunnableConfig, *, asynchronous: bool = False) -> Any:
        """The run's thread guard (a ``with``/``async with`` block; nothing to hold: none)."""
        if saver is None:  # the guard's generator costs a run more than the check itself
            return _NOTHING
        guard = athread_guard if asynchronous else thread_guard
        return guard(
            saver, run, concurrent_runs=self.concurrent_runs, busy_timeout=self.busy_timeout
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
        checked, run, saver = self._prepare(input, config)
        with self._guard(saver, run), _resuming(input, run):
            yield from self.graph.stream(checked, config, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The graph's ``astream``, after the checks of `stream`."""
        checked, run, saver = self._prepare(input, config)
        async with self._guard(saver, run, asynchronous=True):
            with _resuming(input, run):
                async for chunk in self.graph.astream(checked, config, **kwargs):
                    yield chunk

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The graph's ``invoke``, after the checks of `stream`."""
        checked, run, saver = self._prepare(input, config)
        with self._guard(saver, run), _resuming(input, run):
            return self._for_caller(self.graph.invoke(checked, config, **kwargs), run)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The graph's ``ainvoke``, after the checks of `stream`."""
        checked, run, saver = self._prepare(input, config)
        async with self._guard(saver, run, asynchronous=True):
            with _resuming(input, run):
                return self._for_caller(await self.graph.ainvoke(checked, config, **kwargs), run)

    # -- the rest: the graph's, updates checked first ------------------------------------

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Any:
        """The graph's drawing."""
        return self.graph.get_graph(config, xray=xray)

    async def aget_graph(
        self, config: RunnableConfig | None = None, *, xray: int | bool = False
    ) -> Any:
        """The graph's drawing."""
        return await self.graph.aget_graph(config, xray=xray)

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        """The thread's state."""
        return self.graph.get_state(config, subgraphs=subgraphs)

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        """The thread's state."""
        return await self.graph.aget_state(config, subgraphs=subgraphs)

    def get_state_history(self, config: RunnableConfig, **kwargs: Any) -> Iterator[Any]:
        """The thread's checkpoints, newest first."""
        return self.graph.get_state_history(config, **kwargs)

    def aget_state_history(self, config: RunnableConfig, **kwargs: Any) -> AsyncIterator[Any]:
        """The thread's checkpoints, newest first."""
        return self.graph.aget_state_history(config, **kwargs)

    def update_state(
        self,
        config: RunnableConfig,
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        **kwargs: Any,
    ) -> RunnableConfig:
        """``update_state``, after checking the values of the loop's keys.

        An update between iterations is made as the ``evaluate`` node, and the loop goes
        on from it as the node would: to the agent, unless the state has a stop reason
        (so ``update_state`` then ``invoke(None, config)`` runs the next iteration).

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
        _check_supersteps(supersteps, "bulk_update_state")
        return self.graph.bulk_update_state(config, supersteps)

    async def abulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        """``abulk_update_state``, after checking every update's values."""
        _check_supersteps(supersteps, "abulk_update_state")
        return await self.graph.abulk_update_state(config, supersteps)


def _is_nested(run: RunnableConfig) -> bool:
    """Whether the run is part of a parent graph's run (its checkpoint namespace is set)."""
    return bool(run["configurable"].get("checkpoint_ns"))


def _without_parent_keys(input: Any) -> Any:
    """A nested loop's input (the parent's state) without the keys that stay the parent's."""
    if input is None or isinstance(input, Mapping | Command):
        return _for_parent(input)
    # a parent whose state is an object (a pydantic model, a dataclass): its loop keys
    return {k: getattr(input, k) for k in ("messages", "init_messages") if hasattr(input, k)}


def _for_parent(output: Any) -> Any:
    """A nested loop's output or input without the keys that stay the parent's."""
    if isinstance(output, Mapping) and any(key in output for key in PARENT_OWNED):
        return {k: v for k, v in output.items() if k not in PARENT_OWNED}
    return output


def _between_iterations(snapshot: Any, values: dict[str, Any]) -> tuple[Any, str | None]:
    """An update made between iterations, as the ``evaluate`` node with its route."""
    # evaluate routes with a Command, so an update made as it must say where the loop
    # goes; within an iteration (evaluate is next) LangGraph's own choice stands
    if "evaluate" in snapshot.next or not snapshot.values:
        return values, None
    stop_reason = values.get("stop_reason", snapshot.values.get("stop_reason"))
    return Command(update=values, goto=END if stop_reason else "invoke_agent"), "evaluate"


def _check_values(values: object, where: str) -> None:
    if isinstance(values, dict):
        check_update([(str(k), v) for k, v in values.items()], where)


def _check_supersteps(supersteps: Sequence[Sequence[StateUpdate]], where: str) -> None:
    for step in supersteps:
        for update in step:
            _check_values(update.values, where)


def _resuming(input: Any, run: RunnableConfig) -> AbstractContextManager[None]:
    """A resume (``None``) on a thread with no saved run raises `LoopInputError`."""
    # a new run has nothing to check: the shared nullcontext costs it less than a generator
    return _resume_checked(run) if input is None else _NOTHING


@contextmanager
def _resume_checked(run: RunnableConfig) -> Iterator[None]:
    try:
        yield
    except EmptyInputError as error:
        raise LoopInputError(
            f"the loop was called with None, which resumes the run saved on a thread, and "
            f"thread {run['configurable'].get('thread_id')!r} has no saved run (check the "
            f"thread_id). To start a loop on it, pass the request: loop.invoke({EXAMPLE}, config)"
        ) from error


def graph_of(loop: LoopAgent | Any) -> Any:
    """The compiled graph of ``loop`` (a `LoopAgent`), or ``loop`` itself.

    Example:
        ```python
        compiled = graph_of(create_loop_agent(agent, judge, 3))  # a CompiledStateGraph
        ```

    """
    return loop.graph if isinstance(loop, LoopAgent) else loop
