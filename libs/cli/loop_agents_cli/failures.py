"""What the command says when a run fails: one line that names the server and a fix it offers.

A failure mid-run (a server error, a lost connection, a reply that is not JSON, a judge
that never gave a valid verdict) becomes one line on stderr, never a traceback. The line
names the server by URL (the judge's when the judge's request failed), and where the
command has an option that may fix the problem (``--structured-output``, ``--model``) it
names that option, not a library parameter. When a bundled llama.cpp server process died,
that is the error instead: its role, how it ended, the end of its log and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import httpx
import openai

from loop_agents.evaluators.judge import JudgeError
from loop_agents_cli.errors import one_line
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.models.llama_cpp_extras import ContextWindowExceeded
from loop_agents_cli.parser import STRUCTURED_OUTPUT_METHODS

OPENAI_URL = "https://api.openai.com/v1"

JUDGE_INVALID = "judge_invalid"
"""The stop reason of a run whose judge gave no valid verdict within its retries."""

ERROR = "error"
"""The stop reason of a run that failed for any other reason."""

_UNSUPPORTED = re.compile(
    r"not supported|unsupported|not implemented|does ?n[o']t support|not available", re.I
)
_STRUCTURED = re.compile(
    r"response_format|json_schema|json_object|json schema|structured|tool", re.I
)
_VALUE_PROBLEMS = ("outside the scale", "not a finite number", "not a number")
"""How `llm_judge` words a verdict that parsed but whose score is unusable."""

_PROBLEM_LIMIT = 160

_LOST = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""A connection that was made, then broke (the server died, or closed it mid-answer)."""

_NOT_JSON = "Unexpected response type from OpenAI-compatible endpoint"
"""langchain-openai's ``ValueError`` for a reply body that is not JSON (e.g. HTML)."""

_EMPTY_STREAM = "No generations found in stream"
"""langchain-core's ``ValueError`` for a streamed reply without a single chunk."""


def _causes(exc: BaseException) -> list[BaseException]:
    """What ``exc`` was raised from, and what that was raised from, ..., outermost first."""
    chain: list[BaseException] = []
    current = exc.__cause__ or exc.__context__
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _says(exc: BaseException, text: str) -> bool:
    return isinstance(exc, ValueError) and str(exc).startswith(text)


def context_overflow(exc: BaseException) -> ContextWindowExceeded | None:
    """The prompt-over-the-context error that ``exc`` is or was raised from, if any.

    A run stopped by it would fail the same way when resumed.

    Example:
        ```python
        if context_overflow(exc) is not None:
            print("shorten the task")
        ```
    """
    for error in (exc, *_causes(exc)):
        if isinstance(error, ContextWindowExceeded):
            return error
    return None


def failure_reason(exc: BaseException) -> str:
    """The stop reason a failed run reports: `JUDGE_INVALID` or `ERROR`.

    Example:
        ```python
        failure_reason(JudgeError("no verdict", ["off the scale"]))  # 'judge_invalid'
        ```
    """
    return JUDGE_INVALID if isinstance(exc, JudgeError) else ERROR


def other_methods(method: str) -> list[str]:
    """The ``--structured-output`` values to try instead of ``method``, likeliest first.

    Example:
        ```python
        other_methods("json_schema")  # ['function_calling', 'json_mode', 'text']
        ```
    """
    order = ("function_calling", "json_mode", "json_schema", "text")
    return [m for m in order if m != method and m in STRUCTURED_OUTPUT_METHODS]


def describe_error(exc: BaseException, endpoint: Endpoint) -> str:
    """One line saying what went wrong; the server is named by URL.

    Example:
        ```python
        describe_error(openai.APIConnectionError(request=request), endpoint)
        # 'cannot reach the model server at http://127.0.0.1:9/v1: ...'
        ```
    """
    died = endpoint.server_failure()
    if died is not None:  # the cause of whatever the client saw; never the model's size
        return died
    url = _server_url(exc, endpoint)
    method = endpoint.spec.structured_output_method
    overflow = context_overflow(exc)
    if overflow is not None:
        return one_line(str(overflow))
    if isinstance(exc, openai.APITimeoutError):
        text = f"the model server at {url} did not answer in time"
    elif isinstance(exc, openai.APIConnectionError):
        causes = _causes(exc)
        lost = [c for c in causes if isinstance(c, _LOST)]
        if lost:
            text = f"the connection to the model server at {url} was lost: {lost[0]}"
        else:  # the innermost cause says why: "[Errno 111] Connection refused"
            reason = next((c for c in reversed(causes) if str(c)), exc)
            text = f"cannot reach the model server at {url}: {reason}"
    elif isinstance(exc, openai.APIStatusError):
        text = f"the model server at {url} answered HTTP {exc.status_code}: {exc.message}"
        if _UNSUPPORTED.search(exc.message) and _STRUCTURED.search(exc.message):
            text = (
                f"{one_line(text, limit=300)}; the server does not take structured output "
                f"as {method}: try --structured-output {other_methods(method)[0]}"
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


def _server_url(exc: BaseException, endpoint: Endpoint) -> str:
    """The base URL of the server that ``exc`` came from (the judge's may differ)."""
    for error in (exc, *_causes(exc)):
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

    A score that parsed but is off the scale or not finite is the model's limit (a
    stronger model helps); a reply that did not parse may also be the way the verdict
    is asked for (another ``--structured-output``).

    Example:
        ```python
        judge_message(JudgeError("...", ["the score 2018.73 is outside the scale 0-100"],
                                 iteration=1), "json_schema")
        ```
    """
    problems: Sequence[str] = exc.problems or [str(exc)]
    where = f" at iteration {exc.iteration}" if exc.iteration is not None else ""
    last = one_line(problems[-1], limit=_PROBLEM_LIMIT)
    if all(any(kind in p for kind in _VALUE_PROBLEMS) for p in problems):
        fix = "a stronger model (--model) may keep to the scale"
    else:
        fix = f"try --structured-output {other_methods(method)[0]} or a stronger model (--model)"
    return (
        f"the judge gave no usable verdict{where} after {len(problems)} attempts "
        f"(last: {last}); {fix}"
    )
