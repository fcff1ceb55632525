"""The loop's options as controls: what ``create_loop_agent``'s keywords build.

`loop_controls` turns the keyword options into the controls that implement them, in the
order their hooks run (`loop_agents.loop.controls.base`), leaving out every control whose
option is at its default (so the loop runs no hook it does not need), then appends the
user's own ``controls=[...]``. `create_loop_agent` and `LoopMiddleware` build their
controls with it, so an option means the same in both.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.runnables import Runnable

from loop_agents.loop.agents import AgentLike
from loop_agents.loop.controls.advice import Advisor, ScoreThreshold
from loop_agents.loop.controls.agent_errors import AgentErrors, OnAgentError
from loop_agents.loop.controls.base import LoopControl
from loop_agents.loop.controls.budgets import Budgets, Prices
from loop_agents.loop.controls.candidates import Candidates
from loop_agents.loop.controls.criteria import Criteria
from loop_agents.loop.controls.feedback_format import FeedbackStyle
from loop_agents.loop.controls.history import History
from loop_agents.loop.controls.plateau import Plateau
from loop_agents.loop.controls.retries import Retries
from loop_agents.loop.controls.selection import AnswerSelection, Selection
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat
from loop_agents.loop.graph import check_controls
from loop_agents.loop.history.policies import HistoryPolicy
from loop_agents.loop.steps import RetryPolicies


def loop_controls(
    evaluator: Evaluator,
    *,
    agent: AgentLike | None = None,
    agent_retry_policy: RetryPolicies | None = None,
    evaluator_retry_policy: RetryPolicies | None = None,
    agent_timeout: float | timedelta | None = None,
    evaluator_timeout: float | timedelta | None = None,
    select: Selection = "last",
    patience: int | None = None,
    min_delta: float = 0.0,
    token_budget: int | None = None,
    time_budget: float | timedelta | None = None,
    history: HistoryPolicy = "full",
    feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT,
    candidates: int = 1,
    candidate_temperature: float | Sequence[float] | None = None,
    threshold: float | None = None,
    advisor: Runnable[Any, Any] | None = None,
    show_criteria: bool = False,
    criteria: str | None = None,
    request_budget: int | None = None,
    cost_budget: float | None = None,
    prices: Prices | None = None,
    on_agent_error: OnAgentError = "raise",
    count_failed_attempts: bool = True,
    max_agent_errors: int | None = 3,
    controls: Sequence[LoopControl] = (),
) -> list[LoopControl]:
    """The controls that the options build, active ones only, then ``controls``.

    Each option is checked by the control it builds (a bad value raises there, naming
    the option). The arguments are those of `create_loop_agent`, which documents them;
    ``agent`` is the loop's agent, needed only by ``candidates`` > 1.

    Returns:
        The controls in the order their hooks run: criteria, history, threshold,
        candidates, agent errors, advisor, feedback format, budgets, plateau, selection,
        retries; then the user's ``controls``.

    Raises:
        TypeError: an option of the wrong type, or ``controls`` that are not
            `LoopControl` objects.
        ValueError: an option out of range, or options that do not fit together.

    Example:
        ```python
        parts = loop_controls(judge, select="best", patience=2)
        assert [part.name for part in parts] == ["plateau", "select"]
        ```

    """
    built: list[Any] = [
        Criteria(show_criteria, criteria=criteria, evaluator=evaluator),
        History(history, feedback_format=feedback_format),
        ScoreThreshold(threshold),
        Candidates(candidates, temperature=candidate_temperature, agent=agent),
        AgentErrors(on_agent_error, count_failed_attempts, max_agent_errors),
        Advisor(advisor, threshold=threshold),
        FeedbackStyle(feedback_format),
        Budgets(
            token_budget=token_budget,
            time_budget=time_budget,
            request_budget=request_budget,
            cost_budget=cost_budget,
            prices=prices,
        ),
        Plateau(patience, min_delta=min_delta),
        AnswerSelection(select),
        Retries(
            agent_retry_policy=agent_retry_policy,
            evaluator_retry_policy=evaluator_retry_policy,
            agent_timeout=agent_timeout,
            evaluator_timeout=evaluator_timeout,
        ),
    ]
    return [part for part in built if part.active] + check_controls(controls)


CONTROL_OPTIONS = frozenset(
    name
    for name, parameter in inspect.signature(loop_controls).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
)
"""The names of the options `loop_controls` takes (a factory passes its own by name)."""
