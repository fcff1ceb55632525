"""Errors as feedback: an agent failure the model caused becomes feedback for the next attempt.

With ``create_loop_agent(..., controls=[AgentErrors()])`` a failure of the agent call
that the *model* caused does not end the loop: it is recorded (an `IterationRecord`
with ``error`` and no answer) and its description goes to the agent as feedback,
fenced like any other, so the next attempt can avoid it. Model-caused failures
(`is_model_error`, `answer_problem`):

- a structured-output answer that does not validate: pydantic's ``ValidationError``,
  LangChain's ``OutputParserException``, ``create_agent``'s ``StructuredOutputError``;
- a tool error that reached the loop (LangChain's ``ToolException``);
- a refusal: an answer whose ``additional_kwargs`` or content blocks carry a
  ``refusal`` (OpenAI's structured outputs);
- an answer with malformed tool calls (``invalid_tool_calls``).

Infrastructure errors (`is_transient_error`: the loop's `LoopTimeoutError`, rate
limits, connection errors and timeouts, HTTP 429 and 5xx) are never fed back: they
propagate to the call's retry policy (`default_retry_policy` retries exactly these),
and a retried call does not use up an iteration. Every other error (a bug in your
agent, a wrong configuration) ends the loop as before.

``count_failed_attempts`` (default ``True``) says whether a failed attempt counts
toward ``max_iterations``; ``max_agent_errors`` (default 3) ends the loop with
``stop_reason="agent_errors"`` after that many failures in a row, so a model that
always fails cannot loop forever.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any, Literal, TypeAlias

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage
from langchain_core.tools import ToolException
from langgraph.types import RetryPolicy
from pydantic import ValidationError

from loop_agents.loop.protocol import AgentCall, Attempt, LoopControl, Outcome, Progress, Stage
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.time_limits import LoopTimeoutError

OnAgentError: TypeAlias = Literal["raise", "feedback"]
"""`AgentErrors`' ``on_agent_error``: feed a model-caused agent error back to the agent
(``"feedback"``, the default) or end the loop on it (``"raise"``)."""

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


def _structured_output_errors() -> tuple[type[BaseException], ...]:
    try:
        from langchain.agents.structured_output import StructuredOutputError
    except ImportError:  # pragma: no cover - langchain is a dependency
        return ()
    return (StructuredOutputError,)


def is_model_error(error: BaseException) -> bool:
    """Whether ``error`` is one the model caused (fed back by `AgentErrors`).

    Example:
        ```python
        from pydantic import BaseModel, ValidationError

        try:
            BaseModel.model_validate(42)
        except ValidationError as error:
            assert is_model_error(error)
        ```

    """
    if is_transient_error(error):
        return False
    model_caused = (
        OutputParserException,
        ValidationError,
        ToolException,
        *_structured_output_errors(),
    )
    return isinstance(error, model_caused)


def _status_of(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient_error(error: BaseException) -> bool:
    """Whether ``error`` is an infrastructure failure worth retrying.

    True for the loop's `LoopTimeoutError`, httpx transport errors (connection,
    read/write timeouts), OpenAI-style ``RateLimitError``, ``APIConnectionError``,
    ``APITimeoutError``, ``InternalServerError`` (and same-named errors of other
    SDKs), any error carrying an HTTP status 429 or 5xx, and ``ConnectionError`` /
    ``TimeoutError``.

    Example:
        ```python
        import httpx

        assert is_transient_error(httpx.ConnectError("refused"))
        assert not is_transient_error(ValueError("bad input"))
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
    """A retry policy for infrastructure errors only (`is_transient_error`).

    The recommended ``Retries(agent_retry_policy=...)`` (and ``evaluator_retry_policy``)
    with `AgentErrors`: rate limits, timeouts and server errors are retried
    with exponential backoff and jitter (the retried call does not use up an
    iteration), while model-caused errors become feedback and bugs end the loop.

    Args:
        max_attempts: Attempts in all, the first included (>= 1).
        initial_interval: Seconds before the first retry.
        max_interval: The longest wait between two attempts, in seconds.

    Example:
        ```python
        loop = create_loop_agent(
            agent, judge, 5,
            controls=[AgentErrors(), Retries(agent_retry_policy=default_retry_policy())],
        )
        ```

    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1; got {max_attempts!r}")
    return RetryPolicy(
        initial_interval=initial_interval,
        max_interval=max_interval,
        max_attempts=max_attempts,
        retry_on=_retry_on,
    )


def _retry_on(error: Exception) -> bool:
    return is_transient_error(error)


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
    """What makes the agent's answer a model-caused failure, or ``None`` when it is fine.

    The answer (the last AI message) fails when the model refused or its tool calls
    are malformed.

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
    """A short description of ``error`` for its record and the agent's feedback.

    Example:
        ```python
        error_text(ToolException("no such file"))  # 'ToolException: no such file'
        ```

    """
    text = str(error).strip() or "(no message)"
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + " ..."
    return f"{type(error).__name__}: {text}"


def failure_feedback(problem: str) -> str:
    """The feedback the agent reads after a failed attempt.

    Example:
        ```python
        failure_feedback("the model refused: no")
        ```

    """
    return (
        f"Your previous attempt failed and produced no usable answer: {problem}\n"
        f"Answer the request again, avoiding this error."
    )


def failures_in_a_row(records: Sequence[IterationRecord]) -> int:
    """How many of the last ``records`` in a row are failed agent calls.

    Example:
        ```python
        failures_in_a_row(result["records"])  # 0 when the last attempt answered
        ```

    """
    count = 0
    for record in reversed(records):
        if "error" not in record:
            break
        count += 1
    return count


class AgentErrors(LoopControl):
    """Errors as feedback: a failed attempt the model caused is fed back, not raised.

    See the module docstring.

    Args:
        on_agent_error: ``"feedback"`` (the default) or ``"raise"`` (an agent error
            ends the loop, as without the control).
        count_failed_attempts: Whether a failed attempt counts toward
            ``max_iterations``.
        max_agent_errors: Failed attempts in a row that end the loop
            (``stop_reason="agent_errors"``), or ``None``.

    Raises:
        TypeError: an option of the wrong type.
        ValueError: options that do not fit together.

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
        """Check the options."""
        if on_agent_error not in ("raise", "feedback"):
            raise ValueError(
                f"on_agent_error must be 'raise' (an agent error ends the loop) or 'feedback' (an "
                f"error the model caused becomes feedback for the next attempt); got "
                f"{on_agent_error!r:.40}"
            )
        self.mode = on_agent_error
        if max_agent_errors is not None and (
            isinstance(max_agent_errors, bool) or not isinstance(max_agent_errors, int)
        ):
            raise TypeError(
                f"max_agent_errors must be an int >= 1 (failed attempts in a row) or None; "
                f"got {type(max_agent_errors).__name__} {max_agent_errors!r:.40}"
            )
        if isinstance(max_agent_errors, int) and max_agent_errors < 1:
            raise ValueError(
                f"max_agent_errors must be >= 1 (None: no limit); got {max_agent_errors}"
            )
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
        if self.max_agent_errors is not None and (
            failures_in_a_row(progress.records) >= self.max_agent_errors
        ):
            return "agent_errors"
        return None

    def agent_calls_at_most(self, max_iterations: int) -> int:
        """Failed attempts that do not count add agent calls."""
        if not self.count_failed_attempts and self.max_agent_errors is not None:
            # at most max_agent_errors - 1 uncounted failures before each counted attempt
            return max_iterations * self.max_agent_errors
        return max_iterations
