"""Retries and time limits of the calls: `Retries`.

Retries are LangGraph's own ``RetryPolicy``: on the node that makes the call, or, when
the node makes several paid calls as LangGraph tasks (several candidates), on each task,
so that a retry of one candidate never runs the others again. A time limit applies to
each agent call and each evaluation: at its deadline the loop stops waiting for the call
and raises `LoopTimeoutError` (see `loop_agents.runtime.time_limits` for what happens to
a call that does not stop).
"""

from __future__ import annotations

from datetime import timedelta

from loop_agents.loop.protocol import CallName, LoopControl, Stage
from loop_agents.runtime.steps import RetryPolicies
from loop_agents.runtime.time_limits import check_retry_policy, check_timeout


class Retries(LoopControl):
    """Retry policies and time limits of the agent calls and the evaluations.

    Args:
        agent_retry_policy: LangGraph's ``RetryPolicy`` (or a sequence of them, the
            first whose ``retry_on`` matches applies) for each agent call.
        evaluator_retry_policy: The same for each evaluation.
        agent_timeout: A limit, in seconds or as a ``timedelta``, on each agent call.
        evaluator_timeout: The same for each evaluation.

    Raises:
        TypeError: a policy or a limit of the wrong type.
        ValueError: a limit that is not a positive, finite number of seconds.

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
        """Check the policies and the limits."""
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
