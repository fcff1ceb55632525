"""Retries and time limits of the calls: `Retries` (docs/reliability.md).

Retries are LangGraph's ``RetryPolicy``, on the node or on each task of a node that makes
several paid calls; at a time limit the loop raises `LoopTimeoutError`.
"""

from __future__ import annotations

from datetime import timedelta

from loop_agents.loop.protocol import CallName, LoopControl, Stage
from loop_agents.runtime.steps import RetryPolicies
from loop_agents.runtime.time_limits import check_retry_policy, check_timeout


class Retries(LoopControl):
    """Retry policies and time limits of the agent calls and the evaluations.

    A policy is a LangGraph ``RetryPolicy`` or several (the first whose ``retry_on``
    matches applies); a limit is seconds or a ``timedelta``.

    Example:
        ```python
        retries = Retries(agent_retry_policy=RetryPolicy(max_attempts=3), agent_timeout=60)
        loop = create_loop_agent(agent, judge, 5, controls=[retries])
        ```
    """

    name = "retries"
    stage = Stage.CALLS
    claims = frozenset({"retries"})

    def __init__(
        self,
        *,
        agent_retry_policy: RetryPolicies | None = None,
        evaluator_retry_policy: RetryPolicies | None = None,
        agent_timeout: float | timedelta | None = None,
        evaluator_timeout: float | timedelta | None = None,
    ) -> None:
        self.policies: dict[CallName, RetryPolicies | None] = {
            "agent": check_retry_policy("agent_retry_policy", agent_retry_policy),
            "evaluator": check_retry_policy("evaluator_retry_policy", evaluator_retry_policy),
        }
        self.timeouts: dict[CallName, float | None] = {
            "agent": check_timeout("agent_timeout", agent_timeout),
            "evaluator": check_timeout("evaluator_timeout", evaluator_timeout),
        }

    def retry_policy(self, call: CallName) -> RetryPolicies | None:
        """The retry policy of each agent call or each evaluation."""
        return self.policies[call]

    def time_limit(self, call: CallName) -> float | None:
        """The time limit of each agent call or each evaluation, in seconds."""
        return self.timeouts[call]
