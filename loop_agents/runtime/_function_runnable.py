"""`FunctionRunnable`: a sync and an async function of ``(input, config)`` as one runnable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar, cast

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.globals import get_debug, get_verbose
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    set_config_context,
    var_child_runnable_config,
)
from langchain_core.tracers.context import tracing_v2_callback_var
from langchain_core.tracers.langchain import LangChainTracer
from langsmith.utils import tracing_is_enabled

In = TypeVar("In")
Out = TypeVar("Out")

# Why not RunnableLambda(func, afunc=afunc): it makes a run on every call even when nobody
# observes it, and inspects its function's signature on every call. Measured with callgrind
# (the Repair() loop of benchmark 1, 5 iterations, 10 runs): 245.6M instructions with this
# class, +53% with RunnableLambda for the agent and evaluator calls, +103% for the nodes too.


class FunctionRunnable(Runnable[In, Out], Generic[In, Out]):
    """Runs ``func`` (sync) or ``afunc`` (async) with the input and the config.

    With ``trace``, each call is a run (named ``name``, or the config's ``run_name``) when
    something observes chain events, and the function is given the run's child config, also
    the current config while it runs. Without, it is given the config as it is.

    Args:
        func: Called by ``invoke``.
        afunc: Called by ``ainvoke`` (an ``async def`` function).
        name: The run's name, unless the config gives a ``run_name``.
        trace: ``False`` for no run of its own (a graph's nodes: LangGraph makes their run).

    """

    def __init__(
        self,
        func: Callable[[In, RunnableConfig], Out],
        afunc: Callable[[In, RunnableConfig], Awaitable[Out]],
        *,
        name: str,
        trace: bool = True,
    ) -> None:
        self.func = func
        self.afunc = afunc
        self.name = name
        self.trace = trace

    def invoke(self, input: In, config: RunnableConfig | None = None, **kwargs: Any) -> Out:
        """Call ``func``, in a run of its own unless ``trace`` is off."""
        config = complete_config(config)
        if not self.trace:
            return self.func(input, config)
        if not _observed(config):
            unnamed = _unnamed(config)
            token = var_child_runnable_config.set(unnamed)
            try:
                return self.func(input, unnamed)
            finally:
                var_child_runnable_config.reset(token)
        manager = get_callback_manager_for_config(config)
        run = manager.on_chain_start(
            None, input, name=config.get("run_name") or self.name, run_id=config.get("run_id")
        )
        child = _unnamed({**config, "callbacks": run.get_child()})
        try:
            with set_config_context(child) as context:
                output = context.run(self.func, input, child)
        except BaseException as error:
            run.on_chain_error(error)
            raise
        run.on_chain_end(output)
        return output

    async def ainvoke(self, input: In, config: RunnableConfig | None = None, **kwargs: Any) -> Out:
        """Call ``afunc``, in a run of its own unless ``trace`` is off."""
        config = complete_config(config)
        if not self.trace:
            return await self.afunc(input, config)
        if not _observed(config):
            unnamed = _unnamed(config)
            token = var_child_runnable_config.set(unnamed)
            try:
                return await self.afunc(input, unnamed)
            finally:
                var_child_runnable_config.reset(token)
        manager = get_async_callback_manager_for_config(config)
        run = await manager.on_chain_start(
            None, input, name=config.get("run_name") or self.name, run_id=config.get("run_id")
        )
        callbacks = run.get_child()
        child = _unnamed({**config, "callbacks": callbacks})
        try:
            if any(isinstance(handler, LangChainTracer) for handler in callbacks.handlers):
                # LangSmith's run for @traceable code inside is set in a copy of the
                # context, so the call runs in a task of its own
                with set_config_context(child) as context:
                    call = cast(Coroutine[Any, Any, Out], self.afunc(input, child))
                    output = await asyncio.create_task(call, context=context)
            else:
                token = var_child_runnable_config.set(child)
                try:
                    output = await self.afunc(input, child)
                finally:
                    var_child_runnable_config.reset(token)
        except BaseException as error:
            await run.on_chain_error(error)
            raise
        await run.on_chain_end(output)
        return output


def _observed(config: RunnableConfig) -> bool:
    """Whether a run would be seen: a handler that takes chain events, or tracing on."""
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):  # it has the tracing and debug handlers
        return any(not handler.ignore_chain for handler in callbacks.handlers)
    return (
        any(not handler.ignore_chain for handler in callbacks or ())
        or tracing_v2_callback_var.get() is not None
        or bool(tracing_is_enabled())
        or get_debug()
        or get_verbose()
    )


def _unnamed(config: RunnableConfig) -> RunnableConfig:
    """``config`` without its run name and id: they name the run, not the calls inside it."""
    if "run_name" not in config and "run_id" not in config:
        return config
    return cast(RunnableConfig, {k: v for k, v in config.items() if k not in _NAMING})


_NAMING = ("run_name", "run_id")


def complete_config(config: RunnableConfig | None) -> RunnableConfig:
    """``config`` when it is complete (as LangGraph passes it), else `ensure_config`'s."""
    if config is not None and "callbacks" in config and "configurable" in config:
        return config
    return ensure_config(config)
