"""Rule checks as evaluators: a function of the context, or a predicate on the answer text.

A rule either passes (``stop=True``: accept, or in ``all_of`` go on to the next check) or
fails with feedback that tells the agent what to fix. Rules cost no model call, so they
go first in an ``all_of`` chain.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor

from loop_agents.evaluators.base import check_name, make_evaluator
from loop_agents.loop.agents import describe, is_async_callable
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation

RuleResult: TypeAlias = tuple[bool, str]
"""What a rule check returns: ``(ok, feedback)``; the feedback is required when not ok."""

RuleCheck: TypeAlias = (
    Callable[[LoopContext], RuleResult] | Callable[[LoopContext], Awaitable[RuleResult]]
)
"""A sync or async function of the `LoopContext` returning ``(ok, feedback)``."""


def _verdict(name: str, result: object) -> LoopEvaluation:
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], bool)
        or not isinstance(result[1], str)
    ):
        raise TypeError(
            f"rule {name!r} returned {result!r:.80}; a rule check returns a pair (ok, "
            f"feedback) such as (False, 'Name the source.') or (True, '')"
        )
    ok, feedback = result
    if not ok and not feedback.strip():
        raise ValueError(
            f"rule {name!r} failed without feedback; return (False, '...') saying what the "
            f"agent should fix"
        )
    return {"stop": ok, "feedback": feedback}


def _description(description: object, default: str | None) -> str | None:
    if description is None:
        return default
    if not isinstance(description, str) or not description.strip():
        raise TypeError(
            f"description must be a non-empty text (what the rule checks, shown to the "
            f"agent by a Criteria() control) or None; got {description!r:.60}"
        )
    return description.strip()


def _docstring(func: object) -> str | None:
    doc = inspect.getdoc(func)
    return doc.strip().split("\n\n")[0].strip() or None if doc else None


def rule(
    check: RuleCheck, *, name: str | None = None, description: str | None = None
) -> LoopEvaluatorRunnable:
    """Turn a check ``(LoopContext) -> (ok, feedback)`` into an evaluator.

    When the check passes the evaluator says stop (accept, or in ``all_of`` go on to
    the next evaluator); when it fails its feedback goes back to the agent. A sync check
    works with both ``invoke`` and ``ainvoke`` of the loop (in ``ainvoke`` it runs in a
    worker thread); an async check needs ``ainvoke``.

    Args:
        check: A sync or async function of the `LoopContext` returning ``(ok, feedback)``.
        name: The evaluator's name (default: the function's name).
        description: What the rule requires, for the agent: the evaluator's
            ``criteria`` (shown with ``create_loop_agent(..., controls=[Criteria()])``).
            Default: the first paragraph of the check's docstring, if it has one.

    Returns:
        A runnable evaluator.

    Raises:
        TypeError: ``check`` is not callable, or ``description`` is not a text.

    Example:
        ```python
        from loop_agents import LoopContext, rule


        def cites_a_source(context: LoopContext) -> tuple[bool, str]:
            ok = "http" in context["last_response"].text
            return ok, "" if ok else "Cite at least one source by its URL."


        loop = create_loop_agent(writer, rule(cites_a_source), max_iterations=3)
        ```

    """
    if not callable(check):
        raise TypeError(f"check must be a function of a LoopContext; got {check!r:.80}")
    label = check_name(name, describe(check))
    criteria = _description(description, _docstring(check))
    is_async = is_async_callable(check)

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if is_async:
            raise TypeError(
                f"rule {label!r} is async; run the loop with ainvoke()/astream() instead of "
                f"invoke()/stream()"
            )
        result: Any = check(context)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if callable(close):
                close()
            raise TypeError(
                f"rule {label!r} returned an awaitable; run the loop with ainvoke()/astream()"
            )
        return _verdict(label, result)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if is_async:
            result = await cast(Callable[[LoopContext], Awaitable[RuleResult]], check)(context)
        else:
            func = cast(Callable[[LoopContext], Any], check)
            result = await run_in_executor(config, func, context)
            if inspect.isawaitable(result):
                result = await result
        return _verdict(label, result)

    return make_evaluator(label, evaluate, aevaluate, criteria=criteria)


def text_rule(
    predicate: Callable[[str], bool],
    feedback: str | Callable[[str], str],
    *,
    name: str | None = None,
    description: str | None = None,
) -> LoopEvaluatorRunnable:
    """Turn a predicate on the answer's text into an evaluator.

    Args:
        predicate: A function of the latest answer's text; ``True`` means the answer
            passes.
        feedback: What the agent is told when the predicate fails: a text, or a
            function of the answer's text returning one.
        name: The evaluator's name (default: the predicate's name).
        description: What the rule requires, for the agent (the evaluator's
            ``criteria``). Default: the predicate's docstring, else ``feedback`` when
            it is a fixed text.

    Returns:
        A runnable evaluator.

    Raises:
        TypeError: ``predicate`` is not callable, ``feedback`` is neither a text nor
            a function, or ``description`` is not a text.

    Example:
        ```python
        from loop_agents import text_rule

        short = text_rule(
            lambda text: len(text) <= 280,
            lambda text: f"{len(text)} characters; keep it to 280.",
            name="fits_a_post",
        )
        ```

    """
    if not callable(predicate):
        raise TypeError(f"predicate must be a function of the answer text; got {predicate!r:.80}")
    if not (callable(feedback) or (isinstance(feedback, str) and feedback.strip())):
        raise TypeError(
            f"feedback must be a non-empty text or a function of the answer text; got "
            f"{feedback!r:.80}"
        )
    label = check_name(name, describe(predicate))
    criteria = _description(
        description,
        _docstring(predicate) or (feedback.strip() if isinstance(feedback, str) else None),
    )

    def check(context: LoopContext) -> RuleResult:
        text = context["last_response"].text
        verdict = predicate(text)
        if not isinstance(verdict, bool):
            raise TypeError(
                f"text rule {label!r} returned {verdict!r:.60}; the predicate must return "
                f"True or False"
            )
        if verdict:
            return True, ""
        return False, feedback(text) if callable(feedback) else feedback

    check.__name__ = label
    evaluator = rule(check, name=label)
    evaluator.criteria = criteria
    return evaluator
