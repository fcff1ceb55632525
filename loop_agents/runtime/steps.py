"""One implementation for ``invoke`` and ``ainvoke``: steps written once, run either way.

The loop's nodes and the controls that call models are written as *programs*: generator
functions that ``yield`` each call they need (a `Call`, or a `Fanout` of several programs
to run at once) and receive its result. `run` drives a program with ``invoke`` and
threads, `arun` with ``ainvoke`` and ``await``; the logic between the calls exists once.

```python
def advice(model, prompt):
    reply = yield Call("advisor", model.invoke, model.ainvoke, prompt)
    return reply.value.text
```

*Stepped* programs run every call as a LangGraph task (``langgraph.func.task``): its
result is saved with the checkpoint as a pending write, so when the node runs again (a
resume after an error, an answered interrupt) a call that already finished is not made
a second time. The loop steps a node that makes more than one paid call (`Candidates`,
an ``advisor``, a ``compacting`` history); a node that makes one call runs it directly,
and LangGraph's own checkpoint after the node is enough.

Every call is measured: its wall-clock seconds and the chat-model calls made while it
ran (`loop_agents.runtime.usage`), so a result read back from a checkpoint carries the
usage of the call that produced it. A call with a ``timeout`` is abandoned at its
deadline (`loop_agents.controls.retries`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.func import task
from langgraph.types import RetryPolicy

from loop_agents.runtime.usage import CallUsage, counting_tokens

T = TypeVar("T")

RetryPolicies: TypeAlias = RetryPolicy | Sequence[RetryPolicy]
"""A LangGraph ``RetryPolicy``, or several (the first whose ``retry_on`` matches applies)."""

SyncCall: TypeAlias = Callable[[Any, RunnableConfig], Any]
AsyncCall: TypeAlias = Callable[[Any, RunnableConfig], Awaitable[Any]]
TimeLimit: TypeAlias = Callable[..., Any]


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
        name: What the call is (``"agent"``, ``"evaluator"``, ``"advisor"``,
            ``"compaction"``, ...); stepped, the LangGraph task's name, which must be
            the same each time the node runs.
        sync: Called by `run`: ``sync(input, config)``.
        async_: Awaited by `arun`: ``await async_(input, config)``.
        input: The call's input.
        config: The call's run config.
        timeout: Seconds after which the call is abandoned (``None``: no limit).
        limit: How the time limit is enforced (see `loop_agents.controls.retries`);
            set with ``timeout``.
        retry: Stepped, the task's retry policy.

    """

    name: str
    sync: SyncCall
    async_: AsyncCall
    input: Any
    config: RunnableConfig
    timeout: float | None = None
    limit: Any = None
    retry: RetryPolicies | None = None


ProgramFactory: TypeAlias = Callable[[], Generator[Any, Any, Any]]


@dataclass(frozen=True)
class Fanout:
    """Several programs to run at once; the result is the list of their results.

    Stepped, each program runs in a LangGraph task of its own (named ``names[i]``, with
    ``retry``): a program that fails is run again on resume, and the others' results
    are kept. Every program runs to its end before an error is raised, so nothing
    already paid for is dropped.
    """

    programs: Sequence[ProgramFactory]
    names: Sequence[str]
    retry: RetryPolicies | None = None


Program: TypeAlias = Generator["Call | Fanout", Any, T]
"""A generator that yields `Call` and `Fanout` effects and returns its result."""


# -- measuring one call -------------------------------------------------------------------


def measure_sync(call: Call) -> Measured[Any]:
    """Make ``call`` synchronously, within its time limit, and measure it."""
    started = time.perf_counter()
    with counting_tokens() as used:
        value = call.sync(call.input, call.config) if call.timeout is None else call.limit.run(call)
    return Measured(value, time.perf_counter() - started, used.usage())


async def measure_async(call: Call) -> Measured[Any]:
    """Make ``call`` asynchronously, within its time limit, and measure it."""
    started = time.perf_counter()
    with counting_tokens() as used:
        if call.timeout is None:
            value = await call.async_(call.input, call.config)
        else:
            value = await call.limit.arun(call)
    return Measured(value, time.perf_counter() - started, used.usage())


# -- the drivers --------------------------------------------------------------------------


class _Stepper:
    """Where a program is: the next effect it asks for, and what to send back into it."""

    def __init__(self, program: Program[Any]) -> None:
        self.program = program
        self.value: Any = None
        self.error: BaseException | None = None
        self.result: Any = None

    def next(self) -> Call | Fanout | None:
        """The program's next effect, after sending in the last one's value (or error).

        ``None`` once the program returned (its value is then in ``result``).
        """
        value, error = self.value, self.error
        self.value, self.error = None, None
        try:
            return self.program.throw(error) if error is not None else self.program.send(value)
        except StopIteration as done:
            self.result = done.value
            return None


def run(program: Program[T], *, stepped: bool = False) -> T:
    """Drive ``program`` synchronously; return what it returns.

    Example:
        ```python
        text = run(advice(model, prompt))
        ```

    """
    stepper = _Stepper(program)
    while (effect := stepper.next()) is not None:
        try:
            if not stepped and type(effect) is Call:  # the common case, without a hop
                stepper.value = measure_sync(effect)
            else:
                stepper.value = _effect(effect, stepped)
        except Exception as exc:  # thrown into the program, which may handle it
            stepper.error = exc
    result: T = stepper.result
    return result


async def arun(program: Program[T], *, stepped: bool = False) -> T:
    """Drive ``program`` asynchronously; return what it returns.

    Example:
        ```python
        text = await arun(advice(model, prompt))
        ```

    """
    stepper = _Stepper(program)
    while (effect := stepper.next()) is not None:
        try:
            if not stepped and type(effect) is Call:  # the common case, without a hop
                stepper.value = await measure_async(effect)
            else:
                stepper.value = await _aeffect(effect, stepped)
        except Exception as exc:  # thrown into the program, which may handle it
            stepper.error = exc
    result: T = stepper.result
    return result


def _effect(effect: Call | Fanout, stepped: bool) -> Any:
    if isinstance(effect, Call):
        if not stepped:
            return measure_sync(effect)
        future = _sync_task(effect.name, effect.retry)(effect)
        return Measured.of_stored(future.result())
    if isinstance(effect, Fanout):
        tasks = [_sync_program_task(name, effect.retry) for name in effect.names]
        futures = [t(factory) for t, factory in zip(tasks, effect.programs, strict=True)]
        concurrent.futures.wait(cast(Any, futures))  # all of them, failed or not
        return [future.result() for future in futures]
    raise TypeError(f"a loop step yielded {type(effect).__name__}; expected a Call or a Fanout")


async def _aeffect(effect: Call | Fanout, stepped: bool) -> Any:
    if isinstance(effect, Call):
        if not stepped:
            return await measure_async(effect)
        stored = await _async_task(effect.name, effect.retry)(effect)
        return Measured.of_stored(stored)
    if isinstance(effect, Fanout):
        tasks = [_async_program_task(name, effect.retry) for name in effect.names]
        futures = [t(factory) for t, factory in zip(tasks, effect.programs, strict=True)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results
    raise TypeError(f"a loop step yielded {type(effect).__name__}; expected a Call or a Fanout")


# -- LangGraph tasks ----------------------------------------------------------------------


def _sync_task(name: str, retry: RetryPolicies | None) -> Any:
    def call_task(call: Call) -> dict[str, Any]:
        return measure_sync(call).stored()

    return task(name=name, retry_policy=retry)(cast(Any, call_task))


def _async_task(name: str, retry: RetryPolicies | None) -> Any:
    async def call_task(call: Call) -> dict[str, Any]:
        return (await measure_async(call)).stored()

    return task(name=name, retry_policy=retry)(cast(Any, call_task))


def _sync_program_task(name: str, retry: RetryPolicies | None) -> Any:
    def program_task(factory: ProgramFactory) -> Any:
        return run(factory())

    return task(name=name, retry_policy=retry)(cast(Any, program_task))


def _async_program_task(name: str, retry: RetryPolicies | None) -> Any:
    async def program_task(factory: ProgramFactory) -> Any:
        return await arun(factory())

    return task(name=name, retry_policy=retry)(cast(Any, program_task))


def direct(value: T) -> Program[T]:
    """A program that makes no call and returns ``value`` (for hooks that return plainly).

    Example:
        ```python
        assert run(direct(3)) == 3
        ```

    """
    return value
    yield  # a generator function  # pragma: no cover
