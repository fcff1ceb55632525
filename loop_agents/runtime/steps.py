"""Steps written once, run by ``invoke`` (`run`) and ``ainvoke`` (`arun`).

A *program* is a generator that yields each call it needs (a `Call`, or a `Fanout` of
programs to run at once) and is sent back its `Measured` result. *Stepped*, every call runs
as a LangGraph task, saved with the checkpoint: on resume a finished call is not made again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.func import task
from langgraph.types import RetryPolicy

from loop_agents.runtime.usage import CallUsage, TokenCounter, counting_tokens

T = TypeVar("T")

RetryPolicies: TypeAlias = RetryPolicy | Sequence[RetryPolicy]
"""A LangGraph ``RetryPolicy``, or several (the first whose ``retry_on`` matches applies)."""


@dataclass(frozen=True)
class Measured(Generic[T]):
    """A call's result with what it took: seconds and the model calls made meanwhile.

    Attributes:
        value: What the call returned.
        seconds: Its wall-clock seconds.
        usage: The chat-model calls made while it ran.

    """

    value: T
    seconds: float = 0.0
    usage: CallUsage = field(default_factory=CallUsage)

    def stored(self) -> dict[str, Any]:
        """A plain form the checkpointer stores (a task's result)."""
        return {"value": self.value, "seconds": self.seconds, "usage": self.usage.stored()}

    @classmethod
    def of_stored(cls, stored: dict[str, Any]) -> Measured[Any]:
        """The `Measured` a task stored with `stored`."""
        return cls(stored["value"], stored["seconds"], CallUsage.of_stored(stored["usage"]))


@dataclass(frozen=True)
class Call:
    """One call a program asks for: a sync and an async form, an input and a config.

    Attributes:
        name: What the call is (``"agent"``, ``"evaluator"``, ...); stepped, its task's name.
        sync: Called by `run`: ``sync(input, config)``.
        async_: Awaited by `arun`: ``await async_(input, config)``.
        input: The call's input.
        config: The call's run config.
        limit: Its time limit (`loop_agents.runtime.time_limits.TimeLimit`), if any.
        retry: Stepped, the task's retry policy.
        counted: Reads the call's usage from its result (a chat model's answer), in place
            of counting the model calls made meanwhile through LangChain's callbacks.

    """

    name: str
    sync: Callable[[Any, RunnableConfig], Any]
    async_: Callable[[Any, RunnableConfig], Awaitable[Any]]
    input: Any
    config: RunnableConfig
    limit: Any = None  # a TimeLimit (loop_agents.runtime.time_limits, which imports this)
    retry: RetryPolicies | None = None
    counted: Callable[[Any], CallUsage] | None = None


ProgramFactory: TypeAlias = Callable[[], Generator[Any, Any, Any]]


@dataclass(frozen=True)
class Fanout:
    """Several programs to run at once; the result is the list of their results.

    Stepped, each runs in a LangGraph task of its own (named ``names[i]``, with ``retry``):
    one that fails runs again on resume, the others' results are kept. Every program runs
    to its end before an error is raised, so nothing already paid for is dropped.
    """

    programs: Sequence[ProgramFactory]
    names: Sequence[str]
    retry: RetryPolicies | None = None


Program: TypeAlias = Generator["Call | Fanout", Any, T]
"""A generator that yields `Call` and `Fanout` effects and returns its result."""


def measure_sync(call: Call) -> Measured[Any]:
    """Make ``call`` synchronously, within its time limit, and measure it."""
    started = time.perf_counter()
    with nullcontext() if call.counted else counting_tokens() as counter:
        value = call.sync(call.input, call.config) if call.limit is None else call.limit.run(call)
    usage = call.counted(value) if call.counted else cast(TokenCounter, counter).usage()
    return Measured(value, time.perf_counter() - started, usage)


async def measure_async(call: Call) -> Measured[Any]:
    """Make ``call`` asynchronously, within its time limit, and measure it."""
    started = time.perf_counter()
    with nullcontext() if call.counted else counting_tokens() as counter:
        value = await (
            call.async_(call.input, call.config) if call.limit is None else call.limit.arun(call)
        )
    usage = call.counted(value) if call.counted else cast(TokenCounter, counter).usage()
    return Measured(value, time.perf_counter() - started, usage)


def run(program: Program[T], *, stepped: bool = False) -> T:
    """Drive ``program`` synchronously; return what it returns.

    Example:
        ```python
        def advice(model, prompt):
            reply = yield Call("advisor", model.invoke, model.ainvoke, prompt, {})
            return reply.value.text


        text = run(advice(model, prompt))  # or: await arun(advice(model, prompt))
        ```

    """
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.throw(error) if error is not None else program.send(value)
        except StopIteration as done:
            return cast(T, done.value)
        value, error = None, None
        try:
            if isinstance(effect, Call) and not stepped:  # the common case, without a hop
                value = measure_sync(effect)
            elif isinstance(effect, Call):
                value = Measured.of_stored(
                    _task(effect.name, effect.retry, _stored)(effect).result()
                )
            elif isinstance(effect, Fanout):
                futures = _fanout(effect, _run_program)
                concurrent.futures.wait(cast(Any, futures))  # all of them, failed or not
                value = [future.result() for future in futures]
            else:
                raise _not_an_effect(effect)
        except Exception as exc:  # thrown into the program, which may handle it
            error = exc


async def arun(program: Program[T], *, stepped: bool = False) -> T:
    """Drive ``program`` asynchronously; return what it returns (see `run`)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.throw(error) if error is not None else program.send(value)
        except StopIteration as done:
            return cast(T, done.value)
        value, error = None, None
        try:
            if isinstance(effect, Call) and not stepped:  # the common case, without a hop
                value = await measure_async(effect)
            elif isinstance(effect, Call):
                value = Measured.of_stored(await _task(effect.name, effect.retry, _astored)(effect))
            elif isinstance(effect, Fanout):
                value = await asyncio.gather(
                    *_fanout(effect, _arun_program), return_exceptions=True
                )
                for result in value:
                    if isinstance(result, BaseException):
                        raise result
            else:
                raise _not_an_effect(effect)
        except Exception as exc:  # thrown into the program, which may handle it
            error = exc


def _not_an_effect(effect: object) -> TypeError:
    return TypeError(f"a loop step yielded {type(effect).__name__}; expected a Call or a Fanout")


def _task(name: str, retry: RetryPolicies | None, func: Callable[..., Any]) -> Any:
    return task(name=name, retry_policy=retry)(cast(Any, func))


def _fanout(effect: Fanout, func: Callable[..., Any]) -> list[Any]:
    """The futures of a fan-out's programs, each a task of its own."""
    return [
        _task(name, effect.retry, func)(factory)
        for name, factory in zip(effect.names, effect.programs, strict=True)
    ]


def _stored(call: Call) -> dict[str, Any]:
    return measure_sync(call).stored()


async def _astored(call: Call) -> dict[str, Any]:
    return (await measure_async(call)).stored()


def _run_program(factory: ProgramFactory) -> Any:
    return run(factory())


async def _arun_program(factory: ProgramFactory) -> Any:
    return await arun(factory())
