"""Errors as feedback: an agent failure the model caused becomes feedback for the next attempt.

Infrastructure errors (`is_transient_error`) go to the retry policy (`default_retry_policy`);
any other error ends the loop. See docs/loop-control.md.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any, Literal, TypeAlias

from langchain.agents.structured_output import StructuredOutputError
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage
from langchain_core.tools import ToolException
from langgraph.types import RetryPolicy
from pydantic import ValidationError

from loop_agents.controls.options import check_count
from loop_agents.loop.protocol import AgentCall, Attempt, LoopControl, Outcome, Progress, Stage
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.time_limits import LoopTimeoutError

OnAgentError: TypeAlias = Literal["raise", "feedback"]
"""`AgentErrors`' ``on_agent_error``: ``"feedback"`` (the default) or ``"raise"``."""

MAX_ERROR_CHARS = 2000
"""The most characters of an error's text kept in its record and feedback."""

_TRANSIENT_NAMES = frozenset(
    {
        "RateLimitError",
        "APIConnectionError",
        "APITimeoutError",
        "InternalServerError",
        "ServiceUnavailableError",
        "OverloadedError",
    }
)


def is_model_error(error: BaseException) -> bool:
    """Whether ``error`` is one the model caused (fed back by `AgentErrors`).

    Output that does not validate (pydantic, LangChain's parsers, ``create_agent``'s
    structured output) or a tool error.

    Example:
        ```python
        assert is_model_error(ToolException("no such file"))
        ```
    """
    model_caused = (OutputParserException, ValidationError, ToolException, StructuredOutputError)
    return isinstance(error, model_caused) and not is_transient_error(error)


def _status_of(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient_error(error: BaseException) -> bool:
    """Whether ``error`` is an infrastructure failure worth retrying.

    The loop's `LoopTimeoutError`, httpx transport errors, ``ConnectionError`` and
    ``TimeoutError``, an HTTP status 429 or 5xx, and errors named as OpenAI's rate-limit,
    connection, timeout and server errors (of any SDK).

    Example:
        ```python
        assert is_transient_error(httpx.ConnectError("refused"))
        ```
    """
    import httpx

    if isinstance(error, LoopTimeoutError | httpx.TransportError | ConnectionError | TimeoutError):
        return True
    status = _status_of(error)
    if status is not None:
        return status == 429 or status >= 500
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__)


def default_retry_policy(
    max_attempts: int = 4, *, initial_interval: float = 1.0, max_interval: float = 30.0
) -> RetryPolicy:
    """A LangGraph ``RetryPolicy`` for infrastructure errors only (`is_transient_error`).

    ``max_attempts`` counts the first; the waits grow from ``initial_interval`` to at most
    ``max_interval`` seconds, with jitter. The recommended policy with `AgentErrors`.

    Example:
        ```python
        retries = Retries(agent_retry_policy=default_retry_policy())
        ```
    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1; got {max_attempts!r}")
    return RetryPolicy(
        initial_interval=initial_interval,
        max_interval=max_interval,
        max_attempts=max_attempts,
        retry_on=is_transient_error,
    )


def _refusal(answer: AIMessage) -> str | None:
    refusal = answer.additional_kwargs.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return refusal.strip()
    if isinstance(answer.content, list):
        for block in answer.content:
            if isinstance(block, dict) and block.get("type") == "refusal":
                text = block.get("refusal") or block.get("text") or ""
                return str(text).strip() or "(no reason given)"
    return None


def answer_problem(produced: Sequence[Any]) -> str | None:
    """Why the agent's answer (its last AI message) failed: a refusal or malformed tool calls.

    Example:
        ```python
        refusal = AIMessage("", additional_kwargs={"refusal": "I can't help with that."})
        answer_problem([refusal])  # "the model refused: I can't help with that."
        ```
    """
    answer = next((m for m in reversed(produced) if isinstance(m, AIMessage)), None)
    if answer is None:
        return None
    refusal = _refusal(answer)
    if refusal is not None:
        return f"the model refused: {refusal}"
    if answer.invalid_tool_calls:
        call = answer.invalid_tool_calls[0]
        name = call.get("name") or "(no name)"
        detail = call.get("error") or f"arguments {call.get('args')!r:.200} do not parse"
        return f"the tool call {name!r} is malformed: {detail}"
    return None


def error_text(error: BaseException) -> str:
    """``error`` as ``"Type: text"``, at most `MAX_ERROR_CHARS`, for its record and feedback."""
    text = str(error).strip() or "(no message)"
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + " ..."
    return f"{type(error).__name__}: {text}"


def failure_feedback(problem: str) -> str:
    """The feedback the agent reads after a failed attempt (``problem`` says what failed)."""
    return (
        f"Your previous attempt failed and produced no usable answer: {problem}\n"
        f"Answer the request again, avoiding this error."
    )


def failures_in_a_row(records: Sequence[IterationRecord]) -> int:
    """How many of the last ``records`` in a row are failed agent calls."""
    answered = [i for i, record in enumerate(records) if "error" not in record]
    return len(records) - 1 - answered[-1] if answered else len(records)


class AgentErrors(LoopControl):
    """Errors as feedback: a failed attempt the model caused is fed back, not raised.

    Args:
        on_agent_error: ``"feedback"`` (the default) or ``"raise"`` (as without it).
        count_failed_attempts: Whether a failed attempt counts toward ``max_iterations``.
        max_agent_errors: Failed attempts in a row that end the loop
            (``stop_reason="agent_errors"``), or ``None``.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 5, controls=[AgentErrors(max_agent_errors=2)])
        ```
    """

    name = "agent_errors"
    stage = Stage.AGENT_ERRORS
    claims = frozenset({"agent_errors"})

    def __init__(
        self,
        on_agent_error: OnAgentError = "feedback",
        count_failed_attempts: bool = True,
        max_agent_errors: int | None = 3,
    ) -> None:
        if on_agent_error not in ("raise", "feedback"):
            raise ValueError(
                f"on_agent_error must be 'raise' (an agent error ends the loop) or 'feedback' "
                f"(an error the model caused becomes feedback for the next attempt); got "
                f"{on_agent_error!r:.40}"
            )
        self.mode = on_agent_error
        if max_agent_errors is not None:
            meaning = "failed attempts in a row; None: no limit"
            check_count("max_agent_errors", max_agent_errors, meaning)
        if not isinstance(count_failed_attempts, bool):
            raise TypeError(
                f"count_failed_attempts must be True or False; got {count_failed_attempts!r}"
            )
        if self.mode == "raise" and not count_failed_attempts:
            raise ValueError(
                "count_failed_attempts=False applies to failed attempts that are fed back; "
                "pass on_agent_error='feedback' too (with 'raise' an agent error ends the loop)"
            )
        if self.mode == "feedback" and not count_failed_attempts and max_agent_errors is None:
            raise ValueError(
                "count_failed_attempts=False with max_agent_errors=None would let an agent "
                "that always fails loop forever; give max_agent_errors=N (failures in a row)"
            )
        self.count_failed_attempts = count_failed_attempts
        self.max_agent_errors = max_agent_errors if self.mode == "feedback" else None

    def around_agent(self, call: AgentCall) -> Generator[Any, Any, Any]:
        """A model-caused failure of the call becomes a failed `Attempt`."""
        if self.mode == "raise":  # the loop's own behaviour: every error ends the loop
            return (yield call)
        try:
            attempt = yield call
        except Exception as error:  # model-caused errors only; others go on up
            if not is_model_error(error):
                raise
            return Attempt(None, error_text(error), candidate=call.candidate)
        if isinstance(attempt, Attempt):
            problem = answer_problem(attempt.produced or [])
            if problem is not None:
                return replace(attempt, produced=None, error=problem)
        return attempt

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """An iteration with no answer gets its error as the feedback."""
        if outcome.selected is None:
            errors = [j.attempt.error or "the agent call failed" for j in outcome.judged]
            if len(outcome.judged) > 1:
                errors = [
                    f"candidate {j.attempt.candidate}: {e}"
                    for j, e in zip(outcome.judged, errors, strict=True)
                ]
            outcome.error = "; ".join(errors)
            outcome.failure_feedback = failure_feedback(outcome.error)
            outcome.counted = self.count_failed_attempts
        return outcome

    def stop_reason(self, progress: Progress) -> str | None:
        """``"agent_errors"`` after ``max_agent_errors`` failures in a row."""
        limit = self.max_agent_errors
        failed = limit is not None and failures_in_a_row(progress.records) >= limit
        return "agent_errors" if failed else None

    def agent_calls_at_most(self, max_iterations: int) -> int:
        """Failed attempts that do not count add agent calls."""
        if not self.count_failed_attempts and self.max_agent_errors is not None:
            # at most max_agent_errors - 1 uncounted failures before each counted attempt
            return max_iterations * self.max_agent_errors
        return max_iterations
