"""Agents of your own as arms: a factory ``(task, model, settings) -> agent``.

The factory is called once per task with the task, the eval's chat model (already at
the arm's temperature) and the eval's `ArmSettings` (K is ``settings.iterations``). It
returns the agent to run: a `create_loop_agent` graph, an agent built with
``create_agent(..., middleware=[...])``, or any other runnable (a chat model, a chain).
The agent is sent the task once, as every arm is (`task_messages`: the task kind's
system message and the request): a graph as ``{"messages": [...]}``, anything else as
the list of messages. Its answer is graded like every arm's; its attempts are read from
its output where they can be (`loop_agents.evals.agent_output`).

The factory keeps to the budget: a loop should get ``settings.iterations`` as its
``max_iterations`` (the report shows the answers each arm wrote). To judge answers by
the task's visible tests or checks, as the built-in loops do, give the loop
`visible_checks(task)`.

Example:
    ```python
    def fresh_log(task, model, settings):
        return create_loop_agent(model, visible_checks(task), settings.iterations,
                                 history="feedback_log")

    report = await arun_eval("code", model, arms={"resample": "resample", "mine": fresh_log})
    ```
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Any, TypeAlias

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import merge_configs
from langgraph.pregel import Pregel
from langgraph.pregel.protocol import PregelProtocol

from loop_agents.evals.agent_output import read_output
from loop_agents.evals.arm_protocol import ArmRun, EvalArm, Ran, describe_value
from loop_agents.evals.arm_settings import ArmSettings
from loop_agents.evals.task_evaluator import task_messages
from loop_agents.evals.tasks import Task
from loop_agents.loop.agents import describe

__all__ = ["ArmFactory", "ArmFactoryError", "FactoryArm", "check_factory"]

ArmFactory: TypeAlias = Callable[[Task, BaseChatModel, ArmSettings], Any]
"""``(task, model, settings) -> agent`` (or an awaitable of one)."""

SIGNATURE = "(task, model, settings) -> agent"


class ArmFactoryError(TypeError):
    """An arm factory returned something that is not an agent."""


def check_factory(factory: object, *, where: str = "the arm factory") -> None:
    """Raise `TypeError` unless ``factory`` can be called as ``factory(task, model, settings)``.

    Example:
        ```python
        check_factory(lambda task, model, settings: model)  # fine
        ```
    """
    if isinstance(factory, type) or not callable(factory):
        raise TypeError(
            f"{where} must be a function {SIGNATURE}; got {type(factory).__name__} {factory!r:.60}"
        )
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a signature that cannot be read: found out when called
        return
    try:
        signature.bind(None, None, None)
    except TypeError as exc:
        raise TypeError(
            f"{where} {describe(factory)!r} cannot be called as {SIGNATURE}: its signature "
            f"is {signature} ({exc})"
        ) from None


class FactoryArm(EvalArm):
    """An arm whose agent a factory builds for each task (see the module docstring).

    Args:
        factory: ``(task, model, settings) -> agent``, sync or async.

    Raises:
        TypeError: ``factory`` cannot be called that way.

    Example:
        ```python
        arm = FactoryArm(lambda task, model, settings: model)  # one answer, opaque
        ```
    """

    takes_first_answer = False  # the agent sends its own first request

    def __init__(self, factory: ArmFactory) -> None:
        check_factory(factory)
        self.factory = factory

    def identity(self) -> dict[str, Any]:
        """``{"kind": "factory", "factory": "module:qualname"}`` (see `describe_value`)."""
        return {"kind": "factory", "factory": describe_value(self.factory)}

    async def build(
        self, task: Task, model: BaseChatModel, settings: ArmSettings, *, name: str
    ) -> Runnable[Any, Any]:
        """Call the factory; check that what it returned is an agent.

        Raises:
            ArmFactoryError: it raised, or returned something else; the message names
                the arm.
        """
        try:
            made = self.factory(task, model, settings)
            if inspect.isawaitable(made):
                made = await made
        except Exception as exc:
            raise ArmFactoryError(
                f"the factory {describe(self.factory)!r} of arm {name!r} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(made, Runnable):
            raise ArmFactoryError(
                f"the factory {describe(self.factory)!r} of arm {name!r} returned "
                f"{type(made).__name__} {made!r:.60}; it must return an agent: a "
                f"create_loop_agent graph, a create_agent graph or any Runnable (e.g. the "
                f"model it was given)"
            )
        return made

    async def run(self, run: ArmRun) -> Ran:
        """Build the agent, send it the task, read its answer and its attempts."""
        agent = await self.build(run.task, run.model, run.settings, name=run.name)
        messages = task_messages(run.task)
        graph = isinstance(agent, Pregel | PregelProtocol)
        config = merge_configs(
            run.config, {"configurable": {"thread_id": f"eval-{run.name}-{uuid.uuid4().hex}"}}
        )
        output = await agent.ainvoke({"messages": messages} if graph else messages, config)
        read = read_output(output, arm=run.name)
        run.attempts.answers[:] = read.steps
        run.attempts.transcript[:] = read.transcript
        run.attempts.cut_off = read.cut_off
        written = sum(1 for made in read.transcript if made.get("answer") is not None)
        steps = 1 if read.opaque else max(run.settings.iterations, len(read.steps))
        return Ran(read.answer, written, steps=steps, opaque=read.opaque)
