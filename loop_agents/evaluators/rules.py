"""Rule checks as evaluators: a check of the context, a predicate on the answer's text.

And `todos_complete`, which goes on while the agent's own plan (its ``todos``, kept by
LangChain's ``TodoListMiddleware``) has open items (docs/evaluators.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

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
    """An evaluator from a check ``(LoopContext) -> (ok, feedback)``, sync or async.

    A passing check says stop (accept, or in ``all_of`` go on); a failing one sends its
    feedback to the agent. A sync check works under ``invoke`` and ``ainvoke``; an async
    one needs ``ainvoke``. ``name`` defaults to the function's; ``description`` (the
    ``criteria`` shown with ``Criteria()``) to the first paragraph of its docstring.

    Example:
        ```python
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
        result: Any = None if is_async else check(context)
        if is_async or inspect.isawaitable(result):  # a sync check returning one is async too
            if callable(getattr(result, "close", None)):
                result.close()
            raise TypeError(
                f"rule {label!r} is async; run the loop with ainvoke()/astream() instead of "
                f"invoke()/stream()"
            )
        return _verdict(label, result)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        result: Any = check(context) if is_async else await run_in_executor(config, check, context)
        return _verdict(label, await result if inspect.isawaitable(result) else result)

    return make_evaluator(label, evaluate, aevaluate, criteria=criteria)


def text_rule(
    predicate: Callable[[str], bool],
    feedback: str | Callable[[str], str],
    *,
    name: str | None = None,
    description: str | None = None,
) -> LoopEvaluatorRunnable:
    """An evaluator from a predicate on the answer's text (``True``: it passes).

    ``feedback`` is a text or a function of the answer's text. ``description`` defaults
    to the predicate's docstring, else a fixed ``feedback``.

    Example:
        ```python
        short = text_rule(lambda text: len(text) <= 280, "Keep it to 280 characters.")
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
    return rule(check, name=label, description=criteria)


def todos_complete(
    *, todos_key: str = "todos", require_plan: bool = False, name: str = "todos_complete"
) -> LoopEvaluatorRunnable:
    """Accept when every item of the agent's plan (its state's ``todos``) is completed.

    Otherwise the feedback lists the open items; the score is the share completed. An
    attempt without a plan is accepted, unless ``require_plan=True``.

    Example:
        ```python
        loop = create_loop_agent(create_deep_agent(model=model), todos_complete(), 5)
        ```
    """
    if not isinstance(todos_key, str) or not todos_key:
        raise TypeError(f"todos_key must be a non-empty string; got {todos_key!r}")

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return _plan_verdict((context.get("agent_state") or {}).get(todos_key), require_plan)

    criteria = "Every item of your plan (your todo list) is completed."
    return make_evaluator(name, evaluate, None, criteria=criteria)


def _plan_verdict(todos: Any, require_plan: bool) -> LoopEvaluation:
    if not todos:
        if not require_plan:
            return {"stop": True, "score": 1.0}
        feedback = "Make a plan first: write the steps as a todo list, then do them."
        return {"stop": False, "feedback": feedback, "score": 0.0}
    problem = None
    if not isinstance(todos, Sequence) or isinstance(todos, str):
        problem = f"the plan is {type(todos).__name__}, not a list of items"
    else:
        odd = [
            i for i in todos if not (isinstance(i, Mapping) and isinstance(i.get("content"), str))
        ]
        problem = f"a plan item has no 'content' text: {odd[0]!r:.80}" if odd else None
    if problem is not None:
        return {"stop": False, "feedback": f"The plan cannot be read: {problem}.", "score": 0.0}
    status = [(item["content"], str(item.get("status") or "pending")) for item in todos]
    left = [(content, state) for content, state in status if state != "completed"]
    if not left:
        return {"stop": True, "score": 1.0}
    done = len(todos) - len(left)
    listed = "\n".join(f"- {content} ({state})" for content, state in left)
    feedback = (
        f"{done} of {len(todos)} items of your plan are completed. Not done yet:\n{listed}\n"
        f"Carry on with them, and mark each completed when it is."
    )
    return {"stop": False, "feedback": feedback, "score": done / len(todos)}
