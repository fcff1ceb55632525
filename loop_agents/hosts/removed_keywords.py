"""The keyword options removed in 0.3, and the control each one became.

A caller who still passes one gets Python's ``TypeError`` with the control to pass instead
(``select="best"``: ``removed in loop_agents 0.3; pass controls=[AnswerSelection('best')]``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

REMOVED_KEYWORDS: dict[str, str] = {
    "show_criteria": "Criteria()",
    "criteria": "Criteria({})",
    "history": "History({})",
    "candidates": "Candidates({})",
    "candidate_temperature": "Candidates(k, temperature={})",
    "on_agent_error": "AgentErrors({})",
    "count_failed_attempts": "AgentErrors(count_failed_attempts={})",
    "max_agent_errors": "AgentErrors(max_agent_errors={})",
    "threshold": "Advice({})",
    "advisor": "Advice(model={})",
    "feedback_format": "FeedbackStyle({})",
    **{
        name: f"Budgets({name}={{}})"
        for name in ("token_budget", "time_budget", "request_budget", "cost_budget", "prices")
    },
    "patience": "Plateau({})",
    "min_delta": "Plateau(N, min_delta={})",
    "select": "AnswerSelection({})",
    **{
        name: f"Retries({name}={{}})"
        for name in (
            "agent_retry_policy",
            "evaluator_retry_policy",
            "agent_timeout",
            "evaluator_timeout",
        )
    },
}
"""Each keyword option removed in 0.3, and the control (from `loop_agents.controls`) it
became, ``{}`` standing for the value given."""


def removed_keyword_hint(name: str, value: object) -> str | None:
    """What to pass instead of the removed keyword ``name=value`` (``None``: not one).

    Example:
        ```python
        removed_keyword_hint("select", "best")
        # "removed in loop_agents 0.3; pass controls=[AnswerSelection('best')]"
        ```

    """
    control = REMOVED_KEYWORDS.get(name)
    if control is None:
        return None
    shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
    return f"removed in loop_agents 0.3; pass controls=[{control.format(shown)}]"


def refuse_removed_keywords(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, refusing a removed keyword option with the control that replaces it.

    The ``TypeError`` Python would raise, with the hint (`removed_keyword_hint`); the
    signature stays ``function``'s.

    Example:
        ```python
        @refuse_removed_keywords
        def create(agent: object, *, name: str = "loop") -> object: ...
        ```

    """
    taken = set(inspect.signature(function).parameters)

    @functools.wraps(function)
    def refusing(*args: P.args, **kwargs: P.kwargs) -> R:
        for name, value in kwargs.items():
            hint = None if name in taken else removed_keyword_hint(name, value)
            if hint is not None:
                raise TypeError(
                    f"{function.__qualname__}() got an unexpected keyword argument {name!r}: {hint}"
                )
        return function(*args, **kwargs)

    return refusing


__all__ = ["REMOVED_KEYWORDS", "refuse_removed_keywords", "removed_keyword_hint"]
