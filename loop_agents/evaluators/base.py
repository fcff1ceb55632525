"""What the ready-made evaluators share: one runnable with a sync and an async path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from loop_agents.loop.agents import describe
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.steps import Call, Program, arun, run
from loop_agents.runtime.usage import NO_USAGE


def make_evaluator(
    name: str,
    func: Callable[[LoopContext, RunnableConfig], LoopEvaluation],
    afunc: Callable[[LoopContext, RunnableConfig], Awaitable[LoopEvaluation]] | None,
    *,
    criteria: str | None = None,
) -> LoopEvaluatorRunnable:
    """An evaluator: ``func`` on ``invoke``; ``afunc`` (else ``func``, threaded) on ``ainvoke``."""
    evaluator = LoopEvaluatorRunnable(func, afunc=afunc, name=name)
    evaluator.criteria = criteria
    return evaluator


def stepped_evaluator(
    name: str,
    program: Callable[[LoopContext, RunnableConfig], Program[LoopEvaluation]],
    *,
    criteria: str | None = None,
) -> LoopEvaluatorRunnable:
    """An evaluator whose calls are the `step` effects of ``program``, run either way."""

    async def arun_program(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return await arun(program(context, config))

    return make_evaluator(
        name, lambda context, config: run(program(context, config)), arun_program, criteria=criteria
    )


def step(name: str, sync: Any, async_: Any, input: Any, config: RunnableConfig) -> Call:
    """One call of an evaluator's program: ``sync(input, config)`` or its ``async_`` twin."""
    # the loop counts the evaluator's model calls: a count of the call's own would hide them
    return Call(name, sync, async_, input, config, counted=lambda _: NO_USAGE)


def check_name(name: object, default: str) -> str:
    """Return ``name`` (or ``default`` for ``None``) after checking it is a usable name."""
    if name is None:
        return default
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty string; got {type(name).__name__} {name!r}")
    return name


def unique_names(members: Sequence[object]) -> list[str]:
    """The members' names, numbered when several share one: ``['llm_judge', 'llm_judge#2']``."""
    names: list[str] = []
    for member in members:
        base = describe(member)
        name, number = base, 1
        while name in names:
            number += 1
            name = f"{base}#{number}"
        names.append(name)
    return names


def merge_feedback(labelled: Iterable[tuple[str, str]]) -> str:
    """Join several evaluators' feedback, each under its evaluator's name."""
    return "\n\n".join(f"[{name}]\n{text.strip()}" for name, text in labelled if text.strip())


def format_score(value: float) -> str:
    """A score as people write it: ``81`` rather than ``81.0``, ``72.5`` as is."""
    return f"{value:g}"
