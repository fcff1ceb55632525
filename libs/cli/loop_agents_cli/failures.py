"""What the command says when a run fails: one line naming the server and the fix it offers.

A failure mid-run becomes one line on stderr, never a traceback; where an option of the
command may fix it (``--structured-output``, ``--model``) the line names that option.
A bundled server process that died is the error instead (its role, exit, log and fix).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import openai

from loop_agents.evaluators.judge import REFUSALS, JudgeError, refusal
from loop_agents_cli.errors import one_line
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.models.llama_cpp_extras import ContextWindowExceeded
from loop_agents_cli.parser import STRUCTURED_OUTPUT_METHODS

OPENAI_URL = "https://api.openai.com/v1"
JUDGE_INVALID = "judge_invalid"
"""The stop reason of a run whose judge gave no valid verdict within its retries."""
ERROR = "error"
"""The stop reason of a run that failed for any other reason."""

_VALUE_PROBLEMS = ("outside the scale", "not a finite number", "not a number")
"""How `llm_judge` words a verdict that parsed but whose score is unusable."""
_LOST = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
_NOT_JSON = "Unexpected response type from OpenAI-compatible endpoint"  # langchain-openai's
_EMPTY_STREAM = "No generations found in stream"  # langchain-core's


@dataclass(frozen=True)
class Failure:
    """A failed run, as the command reports it.

    Attributes:
        error: One line: what went wrong, the server by URL, the fix.
        reason: The stop reason reported: `JUDGE_INVALID` or `ERROR`.
        resumable: Whether a resume could go on (not for a prompt over the context).
        method: The ``--structured-output`` to resume with, when the server refused the
            run's (else ``None``: resume as saved).
    """

    error: str
    reason: str = ERROR
    resumable: bool = True
    method: str | None = None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def context_overflow(exc: BaseException) -> ContextWindowExceeded | None:
    """The prompt-over-the-context error that ``exc`` is or was raised from, if any.

    Example:
        ```python
        if context_overflow(exc) is not None:
            print("shorten the task")
        ```
    """
    return next((e for e in _causes(exc) if isinstance(e, ContextWindowExceeded)), None)


def other_methods(method: str) -> list[str]:
    """The ``--structured-output`` values to try instead of ``method``, likeliest first.

    Example:
        ```python
        other_methods("json_schema")  # ['function_calling', 'json_mode', 'text']
        ```
    """
    order = ("function_calling", "json_mode", "json_schema", "text")
    return [m for m in order if m != method and m in STRUCTURED_OUTPUT_METHODS]


def refused_everything(exc: BaseException) -> bool:
    """Whether ``exc`` is a judge's error for a server that refused every structured output."""
    problems = exc.problems if isinstance(exc, JudgeError) else []
    return bool(problems) and all(any(w in p.lower() for w in REFUSALS) for p in problems)


def explain(exc: BaseException, endpoint: Endpoint) -> Failure:
    """The `Failure` of a run that ``exc`` stopped, for a run on ``endpoint``.

    Example:
        ```python
        failure = explain(exc, endpoint)
        print(f"loop-agents: error: {failure.error}")
        ```
    """
    method = endpoint.spec.structured_output_method
    fix = None
    if refused_everything(exc):
        fix = "text"
    elif any(refusal(e) is not None for e in _causes(exc)):
        fix = other_methods(method)[0]
    reason = JUDGE_INVALID if isinstance(exc, JudgeError) else ERROR
    return Failure(describe_error(exc, endpoint), reason, context_overflow(exc) is None, fix)


def describe_error(exc: BaseException, endpoint: Endpoint) -> str:
    """One line saying what went wrong; the server is named by URL.

    Example:
        ```python
        describe_error(openai.APIConnectionError(request=request), endpoint)
        # 'cannot reach the model server at http://127.0.0.1:9/v1: ...'
        ```
    """
    died = endpoint.server_failure()
    if died is not None:  # the cause of whatever the client saw
        return died
    if (overflow := context_overflow(exc)) is not None:
        return one_line(str(overflow))
    url = _server_url(exc, endpoint)
    method = endpoint.spec.structured_output_method
    causes = _causes(exc)[1:]
    if isinstance(exc, openai.APITimeoutError):
        text = f"the model server at {url} did not answer in time"
    elif isinstance(exc, openai.APIConnectionError):
        lost = [c for c in causes if isinstance(c, _LOST)]
        if lost:
            text = f"the connection to the model server at {url} was lost: {lost[0]}"
        else:  # the innermost cause says why: "[Errno 111] Connection refused"
            reason = next((c for c in reversed(causes) if str(c)), exc)
            text = f"cannot reach the model server at {url}: {reason}"
    elif isinstance(exc, openai.APIStatusError):
        text = f"the model server at {url} answered HTTP {exc.status_code}: {exc.message}"
        if refusal(exc) is not None:
            text = (
                f"{one_line(text, limit=300)}; it does not take structured output as "
                f"{method}: use --structured-output {other_methods(method)[0]}"
            )
    elif isinstance(exc, openai.APIResponseValidationError):
        text = f"the model server at {url} sent a reply that is not a chat completion: {exc}"
    elif isinstance(exc, json.JSONDecodeError) or _says(exc, _NOT_JSON):
        why = (
            f" ({exc.msg} at character {exc.pos})" if isinstance(exc, json.JSONDecodeError) else ""
        )
        text = (
            f"the model server at {url} sent a reply that is not valid JSON{why}; check "
            f"that {url} is an OpenAI-compatible API (its base URL usually ends in /v1)"
        )
    elif _says(exc, _EMPTY_STREAM):
        text = (
            f"the model server at {url} sent an empty reply (a stream without a single "
            f"answer chunk); check that {url} is an OpenAI-compatible API"
        )
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        text = f"the connection to the model server at {url} was lost: {exc}"
    elif isinstance(exc, JudgeError):
        text = judge_message(exc, method)
    elif isinstance(exc, httpx.HTTPError):
        text = f"the connection to the model server at {url} failed: {type(exc).__name__}: {exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return one_line(text)


def _says(exc: BaseException, text: str) -> bool:
    return isinstance(exc, ValueError) and str(exc).startswith(text)


def _server_url(exc: BaseException, endpoint: Endpoint) -> str:
    """The base URL of the server that ``exc`` came from (the judge's may differ)."""
    for error in _causes(exc):
        try:  # openai's errors and httpx's carry the request (httpx's may raise: not set)
            url = getattr(getattr(error, "request", None), "url", None)
        except RuntimeError:
            url = None
        found = endpoint.base_url_of(str(url)) if url is not None else None
        if found is not None:
            return found
    return endpoint.base_url or OPENAI_URL


def judge_message(exc: JudgeError, method: str) -> str:
    """A short line for a judge that gave no valid verdict, with what the command offers.

    Example:
        ```python
        judge_message(JudgeError("...", ["the score 2018 is off the scale"]), "json_schema")
        ```
    """
    problems: Sequence[str] = exc.problems or [str(exc)]
    if refused_everything(exc):
        return (
            "the judge's server refused every way of asking for structured output "
            f"(last: {one_line(problems[-1], limit=160)}); use --structured-output text "
            "(a 'Score: N' reply), or a model or server that takes structured output"
        )
    where = f" at iteration {exc.iteration}" if exc.iteration is not None else ""
    last = one_line(problems[-1], limit=160)
    if all(any(kind in p for kind in _VALUE_PROBLEMS) for p in problems):
        fix = "a stronger model (--model) may keep to the scale"
    else:
        fix = f"try --structured-output {other_methods(method)[0]} or a stronger model (--model)"
    return (
        f"the judge gave no usable verdict{where} after {len(problems)} attempts "
        f"(last: {last}); {fix}"
    )
