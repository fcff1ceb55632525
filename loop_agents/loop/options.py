"""The options of `create_loop_agent`, checked at once before anything is built: `LoopOptions`.

`check_options` checks each option in the order of the signature and raises on the first
one that is wrong (a `TypeError` or `ValueError` naming the option, what was given and
what is expected); what it returns holds every option in the form the nodes and the graph
use. A new option of `create_loop_agent` is checked here, kept in `LoopOptions` and read
by the step that needs it (`loop_agents.loop.graph`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from langgraph.store.base import BaseStore

from loop_agents.loop.control.checks import LoopControls, check_controls
from loop_agents.loop.feedback import (
    DEFAULT_FEEDBACK_FORMAT,
    FeedbackFormat,
    check_feedback_format,
)
from loop_agents.loop.history.policies import HistoryPolicy, check_history
from loop_agents.loop.output import OutputMode, check_output_mode
from loop_agents.loop.selection import Selection, check_select
from loop_agents.loop.stopping import StopPolicy
from loop_agents.loop.storage import Storage, check_storage
from loop_agents.loop.thread_locking import ConcurrentRuns, check_concurrent_runs
from loop_agents.loop.timeouts import RetryPolicies, check_retry_policy, check_timeout


@dataclass(frozen=True)
class LoopOptions:
    """Every option of `create_loop_agent` but the agent, the evaluator and the checkpointer.

    Attributes:
        max_iterations: The most agent calls in one loop (>= 1).
        name: The graph's name.
        store: The LangGraph store, or ``None``.
        agent_retry_policy: The agent node's retry policy (or policies), or ``None``.
        evaluator_retry_policy: The evaluate node's.
        agent_timeout: The agent call's limit in seconds, or ``None``.
        evaluator_timeout: The evaluator call's.
        output_mode: What the loop returns.
        stop_policy: When the loop stops: the cap, patience, token and time budgets.
        select: Which attempt is the answer.
        history: What the agent is sent.
        feedback_format: How the feedback is put to the agent.
        concurrent_runs: What a run does while another holds its thread.
        busy_timeout: How long ``"wait"`` waits, in seconds (``None``: as long as it takes).
        storage: How checkpoints store the append-only keys (resolved against the
            checkpointer when the graph is built).
        controls: The loop controls: candidates, score-only verdicts and the advisor,
            criteria shown up front, prices, errors as feedback.
        max_agent_errors: Failed attempts in a row that end the loop (with
            ``on_agent_error="feedback"``), or ``None``.

    """

    max_iterations: int
    name: str
    store: BaseStore | None
    agent_retry_policy: RetryPolicies | None
    evaluator_retry_policy: RetryPolicies | None
    agent_timeout: float | None
    evaluator_timeout: float | None
    output_mode: OutputMode
    stop_policy: StopPolicy
    select: Selection
    history: HistoryPolicy
    feedback_format: FeedbackFormat
    concurrent_runs: ConcurrentRuns
    busy_timeout: float | None
    storage: Storage
    controls: LoopControls
    max_agent_errors: int | None

    @property
    def most_iterations(self) -> int:
        """The most agent calls a loop can make: failed attempts that do not count add some."""
        if (
            self.controls.on_agent_error == "feedback"
            and not self.controls.count_failed_attempts
            and self.max_agent_errors is not None
        ):
            # at most max_agent_errors - 1 uncounted failures before each counted attempt
            return self.max_iterations * self.max_agent_errors
        return self.max_iterations


def check_options(
    agent: object,
    evaluator: object,
    max_iterations: object = 100,
    *,
    name: object = "loop_agent",
    store: object = None,
    agent_retry_policy: object = None,
    evaluator_retry_policy: object = None,
    agent_timeout: float | timedelta | None = None,
    evaluator_timeout: float | timedelta | None = None,
    output_mode: object = "full_state",
    select: object = "last",
    patience: int | None = None,
    min_delta: float = 0.0,
    token_budget: int | None = None,
    time_budget: float | timedelta | None = None,
    history: object = "full",
    feedback_format: object = DEFAULT_FEEDBACK_FORMAT,
    concurrent_runs: object = "reject",
    busy_timeout: float | timedelta | None = None,
    storage: object = "auto",
    candidates: object = 1,
    candidate_temperature: float | Sequence[float] | None = None,
    threshold: object = None,
    advisor: object = None,
    show_criteria: object = False,
    criteria: object = None,
    request_budget: int | None = None,
    cost_budget: float | None = None,
    prices: object = None,
    on_agent_error: object = "raise",
    count_failed_attempts: object = True,
    max_agent_errors: int | None = 3,
) -> LoopOptions:
    """Check the options of `create_loop_agent`; raise on the first that is wrong.

    The arguments and their defaults are `create_loop_agent`'s (a test keeps them equal);
    its documentation says what each means.

    Args:
        agent: The agent (what ``candidate_temperature`` applies to).
        evaluator: The evaluator (whose criteria ``show_criteria`` shows).
        max_iterations: The most agent calls in one loop.
        name: The graph's name.
        store: A LangGraph store or ``None``.
        agent_retry_policy: A ``RetryPolicy``, a sequence of them, or ``None``.
        evaluator_retry_policy: The same for the evaluation.
        agent_timeout: Seconds or a ``timedelta``, or ``None``.
        evaluator_timeout: The same for the evaluation.
        output_mode: ``"full_state"``, ``"full_history"`` or ``"last_message"``.
        select: ``"last"`` or ``"best"``.
        patience: Scored iterations without improvement before a plateau stop.
        min_delta: The least gain that counts as an improvement.
        token_budget: Tokens after which the loop stops.
        time_budget: Seconds (or a ``timedelta``) after which the loop stops.
        history: A history policy's name, a function or a `StatefulHistory`.
        feedback_format: A template or a function.
        concurrent_runs: ``"reject"`` or ``"wait"``.
        busy_timeout: How long ``"wait"`` waits.
        storage: ``"auto"``, ``"delta"`` or ``"full"``.
        candidates: Answers per iteration.
        candidate_temperature: A temperature for every candidate, or one each.
        threshold: The score at which a score-only verdict accepts.
        advisor: A chat model that writes missing feedback.
        show_criteria: Whether the agent sees the criteria before its first attempt.
        criteria: The criteria text to show instead of the evaluator's.
        request_budget: Model calls after which the loop stops.
        cost_budget: Cost after which the loop stops (needs ``prices``).
        prices: Prices per million tokens by model name.
        on_agent_error: ``"raise"`` or ``"feedback"``.
        count_failed_attempts: Whether a failed attempt counts toward ``max_iterations``.
        max_agent_errors: Failed attempts in a row that end the loop, or ``None``.

    Returns:
        The options in the form the nodes and the graph use.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range or names nothing known.

    Example:
        ```python
        options = check_options(agent, judge, 3, select="best", patience=2)
        assert options.max_iterations == 3 and options.select == "best"
        ```

    """
    checked_max_iterations = _check_max_iterations(max_iterations)
    checked_name = _check_name(name)
    if store is not None and not isinstance(store, BaseStore):
        raise TypeError(
            f"store must be a LangGraph store (langgraph.store.base.BaseStore, e.g. "
            f"InMemoryStore()) or None; got {type(store).__name__} {store!r:.60}"
        )
    checked_concurrent_runs, busy_seconds = check_concurrent_runs(concurrent_runs, busy_timeout)
    checked_agent_retry = check_retry_policy("agent_retry_policy", agent_retry_policy)
    checked_evaluator_retry = check_retry_policy("evaluator_retry_policy", evaluator_retry_policy)
    agent_limit = check_timeout("agent_timeout", agent_timeout)
    evaluator_limit = check_timeout("evaluator_timeout", evaluator_timeout)
    checked_output_mode = check_output_mode(output_mode)
    controls = check_controls(
        agent,
        evaluator,
        candidates=candidates,
        candidate_temperature=candidate_temperature,
        threshold=threshold,
        advisor=advisor,
        show_criteria=show_criteria,
        criteria=criteria,
        cost_budget=cost_budget,
        prices=prices,
        on_agent_error=on_agent_error,
        count_failed_attempts=count_failed_attempts,
        max_agent_errors=max_agent_errors,
    )
    feeding_back = controls.on_agent_error == "feedback"
    stop_policy = StopPolicy.build(
        checked_max_iterations,
        patience=patience,
        min_delta=min_delta,
        token_budget=token_budget,
        time_budget=time_budget,
        request_budget=request_budget,
        cost_budget=cost_budget,
        max_agent_errors=max_agent_errors if feeding_back else None,
    )
    return LoopOptions(
        max_iterations=checked_max_iterations,
        name=checked_name,
        store=store,
        agent_retry_policy=checked_agent_retry,
        evaluator_retry_policy=checked_evaluator_retry,
        agent_timeout=agent_limit,
        evaluator_timeout=evaluator_limit,
        output_mode=checked_output_mode,
        stop_policy=stop_policy,
        select=check_select(select),
        history=check_history(history),
        feedback_format=check_feedback_format(feedback_format),
        concurrent_runs=checked_concurrent_runs,
        busy_timeout=busy_seconds,
        storage=check_storage(storage),
        controls=controls,
        max_agent_errors=max_agent_errors if feeding_back else None,
    )


def _check_max_iterations(max_iterations: object) -> int:
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
        raise TypeError(
            f"max_iterations must be an int >= 1; got {type(max_iterations).__name__} "
            f"{max_iterations!r}"
        )
    if max_iterations < 1:
        raise ValueError(
            f"max_iterations must be >= 1 (the agent is called at least once); got {max_iterations}"
        )
    return max_iterations


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise TypeError(
            f"name must be a non-empty string (the loop's name in traces, events and a "
            f"parent graph); got {type(name).__name__} {name!r:.60}"
        )
    return name
