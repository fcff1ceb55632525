"""`FunctionRunnable`: a sync and an async function of ``(input, config)`` as one runnable.

It does what ``RunnableLambda(func, afunc=afunc)`` does for the loop's nodes, router and
calls, with less work per call: ``RunnableLambda`` inspects its functions' signatures on
every call to find out whether they take a config, where these always do, and always
makes a run of its own, where LangGraph already makes one for each node.

With ``trace=True`` each call is one run (named after the runnable, or the config's
``run_name``); the function is given the run's child config, which is also the current
config while it runs, so ``get_config()``, ``get_stream_writer()`` and models called
inside it without a config see it. Two savings when a feature is not in use:

- When no callback handler receives chain events (no tracer, no ``astream_events``, no
  ``stream_mode="messages"``, no callbacks of yours), nobody would see the run, and the
  call is made without one, with the same config (told without configuring a callback
  manager, see `_observed`).
- Under LangSmith tracing the call runs in a copy of the context (an ``asyncio`` task of
  its own), as LangChain's runnables do, so that ``@traceable`` code inside attaches to
  the run; otherwise the current config is set around the call and reset after it.

With ``trace=False`` the function is called with the config as it is, like a plain
function given to ``StateGraph.add_node``.
"""

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


class FunctionRunnable(Runnable[In, Out], Generic[In, Out]):
    """Runs ``func`` (sync) or ``afunc`` (async) with the input and the config.

    Args:
        func: Called by ``invoke``.
        afunc: Called by ``ainvoke`` (an ``async def`` function).
        name: The run's name, unless the config gives a ``run_name``.
        trace: ``False`` for no run of its own: the function is given the config as is.
            For a graph's nodes, whose run LangGraph makes (named after the node, with
            the function called in its context), and for routers.

    Example:
        ```python
        async def adouble(x: int, config: RunnableConfig) -> int:
            return 2 * x


        double = FunctionRunnable(lambda x, config: 2 * x, adouble, name="double")
        assert double.invoke(21) == 42
        assert await double.ainvoke(21) == 42
        ```

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
            return _call(self.func, input, _unnamed(config))
        manager = get_callback_manager_for_config(config)
        run = manager.on_chain_start(
            None, input, name=config.get("run_name") or self.name, run_id=config.get("run_id")
        )
        callbacks = run.get_child()
        child = _child(config, callbacks)
        try:
            if _traced_to_langsmith(callbacks):
                with set_config_context(child) as context:
                    output = context.run(self.func, input, child)
            else:
                output = _call(self.func, input, child)
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
            return await _acall(self.afunc, input, _unnamed(config))
        manager = get_async_callback_manager_for_config(config)
        run = await manager.on_chain_start(
            None, input, name=config.get("run_name") or self.name, run_id=config.get("run_id")
        )
        callbacks = run.get_child()
        child = _child(config, callbacks)
        try:
            if _traced_to_langsmith(callbacks):
                with set_config_context(child) as context:
                    call = cast(Coroutine[Any, Any, Out], self.afunc(input, child))
                    output = await asyncio.create_task(call, context=context)
            else:
                output = await _acall(self.afunc, input, child)
        except BaseException as error:
            await run.on_chain_error(error)
            raise
        await run.on_chain_end(output)
        return output


def _call(func: Callable[[In, RunnableConfig], Out], input: In, config: RunnableConfig) -> Out:
    """``func(input, config)`` with ``config`` as the current config while it runs."""
    token = var_child_runnable_config.set(config)
    try:
        return func(input, config)
    finally:
        var_child_runnable_config.reset(token)


async def _acall(
    afunc: Callable[[In, RunnableConfig], Awaitable[Out]], input: In, config: RunnableConfig
) -> Out:
    """``await afunc(input, config)`` with ``config`` as the current config while it runs."""
    token = var_child_runnable_config.set(config)
    try:
        return await afunc(input, config)
    finally:
        var_child_runnable_config.reset(token)


def _observed(config: RunnableConfig) -> bool:
    """Whether a run would be seen: a handler that takes chain events, or tracing on.

    Read from the config's callbacks (a run's manager and its handlers, or a list of
    handlers) and from LangSmith's and LangChain's tracing and debug switches, without
    configuring a callback manager (which would cost as much as the call it decides on).
    A handler that only a configure hook adds (the loop's token counter) takes no chain
    events. When nobody would see the run, the call is made without one.
    """
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        handlers = callbacks.handlers
    elif isinstance(callbacks, list):
        handlers = callbacks
    else:
        handlers = []
    for handler in handlers:
        if not handler.ignore_chain:
            return True
    return (
        tracing_v2_callback_var.get() is not None
        or bool(tracing_is_enabled())
        or bool(get_debug())
        or bool(get_verbose())
    )


def _unnamed(config: RunnableConfig) -> RunnableConfig:
    """``config`` for a call made without a run of its own: no run name and id.

    They name the run that is not made, not the calls inside it.
    """
    if "run_name" not in config and "run_id" not in config:
        return config
    child: RunnableConfig = {**config}
    child.pop("run_name", None)
    child.pop("run_id", None)
    return child


def _traced_to_langsmith(callbacks: BaseCallbackManager) -> bool:
    """Whether LangSmith traces the run: its calls then need LangSmith's context too.

    ``set_config_context`` sets the current config and, for LangSmith, the run that
    ``@traceable`` functions called inside attach to; it does so in a copy of the
    context, so the call must run in a task of its own. Without LangSmith, setting the
    current config around the call (and resetting it after) is all it does.
    """
    return any(isinstance(handler, LangChainTracer) for handler in callbacks.handlers)


def complete_config(config: RunnableConfig | None) -> RunnableConfig:
    """``config`` when it is complete (as LangGraph passes it), else `ensure_config`'s.

    Example:
        ```python
        assert complete_config(None)["callbacks"] is None
        ```

    """
    if config is not None and "callbacks" in config and "configurable" in config:
        return config
    return ensure_config(config)


def _child(config: RunnableConfig, callbacks: BaseCallbackManager) -> RunnableConfig:
    """What ``patch_config(config, callbacks=callbacks)`` gives, for a complete config.

    ``patch_config`` copies the config (and its callback manager) first; a shallow copy
    is enough here, as nothing in it is changed in place.
    """
    child: RunnableConfig = {**config, "callbacks": callbacks}
    child.pop("run_name", None)
    child.pop("run_id", None)
    return child
