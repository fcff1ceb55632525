"""An httpx transport that smooths llama-cpp-python's deviations from OpenAI's API.

Every chat model the package makes talks through it (`http_clients`); it changes nothing
for servers that follow the API. What it does, and why, is in docs/local-model.md (its
table, and "The transport"): bounded numbers and strings in a forced tool call, each
streamed tool name once, a stream read once, an answer without a finish reason refused.

Example:
    ```python
    client = httpx.AsyncClient(transport=LlamaCppTransport())
    model = ChatOpenAI(base_url=url, api_key="-", http_async_client=client)
    ```
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.request
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from loop_agents_cli.models.llama_cpp_extras import StreamWatch, chat_body, chat_request

_ARGUMENT_OVERHEAD_TOKENS = 24  # a forced call's JSON punctuation, keys and numbers
_TOKENS_PER_CHARACTER = 3  # the most one character may take (a byte-fallback CJK one)
_MOST_CHOICES = 1001  # more alternatives would slow the server's grammar


class IncompleteAnswerError(httpx.RemoteProtocolError):
    """A chat completion ended without a finish reason: a transport error, retried as one.

    Example:
        ```python
        try:
            model.invoke("Say hello.")
        except (IncompleteAnswerError, openai.APIConnectionError):
            ...  # the server stopped answering mid-way: ask again
        ```
    """

    def __init__(self, url: str, what: str) -> None:
        super().__init__(
            f"the model server at {url} ended {what} without a finish reason, so the answer "
            "is incomplete, not an answer (a llama.cpp server busy with another request sends "
            "such a stream); it is treated as a lost connection, and retried where retries "
            "are on. If it keeps happening, send the server one request at a time, or read "
            "its log"
        )


class LlamaCppTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport (sync and async) for OpenAI-compatible servers, llama.cpp's above all.

    ``transport`` and ``async_transport`` are wrapped (default: httpx's own);
    ``llama_cpp_server``: the server is llama-cpp-python's (the bundled one): count streamed
    answers' tokens and name a prompt over its context (`llama_cpp_extras`).

    Example:
        ```python
        client = httpx.Client(transport=LlamaCppTransport())
        ```
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        *,
        llama_cpp_server: bool = False,
    ) -> None:
        self._transport = transport
        self._async_transport = async_transport
        self.llama_cpp_server = llama_cpp_server

    def _watch(self, request: httpx.Request) -> StreamWatch | None:
        body = chat_request(request)
        return None if body is None else StreamWatch(request, body, self.llama_cpp_server)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` synchronously (see the module docstring)."""
        if self._transport is None:
            self._transport = httpx.HTTPTransport()
        request = bound_forced_tool(request)
        response = self._transport.handle_request(request)
        if _is_completion(request, response):
            response.read()
            return _finished(request, response)
        if not _is_event_stream(response):
            return response
        assert isinstance(response.stream, httpx.SyncByteStream)
        lines = _SyncLines(response.stream, self._watch(request), self._transport)
        return _with_stream(response, lines)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` asynchronously (see the module docstring)."""
        if self._async_transport is None:
            self._async_transport = httpx.AsyncHTTPTransport()
        request = bound_forced_tool(request)
        response = await self._async_transport.handle_async_request(request)
        if _is_completion(request, response):
            await response.aread()
            return _finished(request, response)
        if not _is_event_stream(response):
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        lines = _AsyncLines(response.stream, self._watch(request), self._async_transport)
        return _with_stream(response, lines)

    def close(self) -> None:
        """Close the wrapped sync transport."""
        if self._transport is not None:
            self._transport.close()

    async def aclose(self) -> None:
        """Close the wrapped async transport."""
        if self._async_transport is not None:
            await self._async_transport.aclose()


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (a loopback address)."""
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def http_clients(
    base_url: str | None, *, llama_cpp_server: bool = False
) -> tuple[httpx.Client, httpx.AsyncClient]:
    """A sync and an async client for ``base_url`` (``None``: OpenAI), sharing one transport.

    The transport takes the environment's proxy for ``base_url`` (`proxy_for`).

    Example:
        ```python
        sync_client, async_client = http_clients("http://127.0.0.1:8080/v1")
        ```
    """
    proxy = proxy_for(base_url or "https://api.openai.com/v1")
    transport = LlamaCppTransport(
        httpx.HTTPTransport(proxy=proxy),
        httpx.AsyncHTTPTransport(proxy=proxy),
        llama_cpp_server=llama_cpp_server,
    )
    return (
        httpx.Client(transport=transport, trust_env=False),
        httpx.AsyncClient(transport=transport, trust_env=False),
    )


def proxy_for(url: str) -> str | None:
    """The proxy the environment sets for ``url`` (``https_proxy``, ...); none for loopback.

    Example:
        ```python
        proxy_for("http://127.0.0.1:8080/v1")  # None
        ```
    """
    parts = urlsplit(url)
    if is_loopback(url) or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


# -- requests: bound the numbers and strings of a forced tool call -----------------------


def bound_forced_tool(request: httpx.Request) -> httpx.Request:
    """``request`` with its forced tool's bounded numbers and unbounded strings constrained.

    A number with ``minimum`` and ``maximum`` gets an ``enum`` (`number_choices`): llama.cpp
    enforces that, not the bounds. With ``max_tokens`` set, a string without a bound gets
    a ``maxLength`` that lets the arguments close within the cap. Other requests pass.

    Example:
        ```python
        request = bound_forced_tool(request)
        ```
    """
    body = chat_body(request)
    choice = body.get("tool_choice") if body is not None else None
    if body is None or not isinstance(choice, dict):
        return request
    name, cap = (choice.get("function") or {}).get("name"), body.get("max_tokens")
    changed = False
    for tool in body.get("tools") or []:
        function = tool.get("function") or {} if isinstance(tool, dict) else {}
        parameters = function.get("parameters")
        if function.get("name") != name or not isinstance(parameters, dict):
            continue
        for schema in _subschemas(parameters):
            low, high = schema.get("minimum"), schema.get("maximum")
            if (
                schema.get("type") in ("number", "integer")
                and not {"enum", "const"} & set(schema)
                and _is_finite(low)
                and _is_finite(high)
            ):
                integer = schema["type"] == "integer"
                if choices := number_choices(schema["minimum"], schema["maximum"], integer=integer):
                    schema["enum"] = choices
                    changed = True
        strings = [
            schema
            for schema in _subschemas(parameters)
            if schema.get("type") == "string"
            and not {"maxLength", "enum", "const", "pattern", "format"} & set(schema)
        ]
        if isinstance(cap, int) and strings:
            room = (cap - _ARGUMENT_OVERHEAD_TOKENS) // (_TOKENS_PER_CHARACTER * len(strings))
            for schema in strings:
                schema["maxLength"] = max(1, room)
            changed = True
    if not changed:
        return request
    content = json.dumps(body).encode()
    headers = httpx.Headers(request.headers)
    headers["content-length"] = str(len(content))
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )


def number_choices(low: float, high: float, *, integer: bool) -> list[int | float]:
    """The values a number from ``low`` to ``high`` may take in a constrained reply.

    Every integer for an integer (empty beyond 1,001); for a number, the multiples of a power
    of ten that split the range into 100 to 1,000 steps.

    Example:
        ```python
        number_choices(0, 1, integer=False)[:3]  # [0, 0.01, 0.02]
        ```
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        return []
    if integer:
        first, last = math.ceil(low), math.floor(high)
        return list(range(first, last + 1)) if 0 <= last - first < _MOST_CHOICES else []
    if high == low:
        return [_plain_number(low)]
    scale = 10.0 ** -math.floor(math.log10((high - low) / 100))  # i / scale: exact decimals
    first, last = math.ceil(low * scale - 1e-9), math.floor(high * scale + 1e-9)
    return [_plain_number(i / scale) for i in range(first, last + 1)]


def _plain_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object in ``schema``, itself included, depth first."""
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _subschemas(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _subschemas(item)


def _is_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- responses: a finished answer, each streamed tool call's name once ----------------------


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


def _is_completion(request: httpx.Request, response: httpx.Response) -> bool:
    """Whether ``response`` is a successful answer to a chat completion not streamed."""
    body = chat_body(request)
    content_type = str(response.headers.get("content-type", ""))
    return (
        body is not None
        and body.get("stream") is not True
        and response.is_success
        and content_type.startswith("application/json")
    )


def _finished(request: httpx.Request, response: httpx.Response) -> httpx.Response:
    """``response`` (read) if each choice has a finish reason, else `IncompleteAnswerError`.

    A body that is not a completion (not JSON, an error) passes, for the client to report.
    """
    try:
        answer = json.loads(response.content)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "error" not in answer:
        choices = answer.get("choices")
        url = str(request.url).removesuffix("/chat/completions")
        if not isinstance(choices, list) or not choices:
            raise IncompleteAnswerError(url, "its answer with no choice at all")
        for index, choice in enumerate(choices):
            if not (isinstance(choice, dict) and choice.get("finish_reason")):
                raise IncompleteAnswerError(url, f"its answer (choice {index})")
    headers = httpx.Headers(response.headers)
    for name in ("content-encoding", "content-length"):  # the content is decoded now
        headers.pop(name, None)
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=response.content,
        extensions=response.extensions,
    )


def _with_stream(response: httpx.Response, stream: Any) -> httpx.Response:
    headers = httpx.Headers(response.headers)
    headers.pop("content-length", None)
    return httpx.Response(
        response.status_code, headers=headers, stream=stream, extensions=response.extensions
    )


def dedupe_streamed_tool_names(event: Any, named: set[tuple[int, int]]) -> bool:
    """Drop a streamed chunk's repeated tool-call name, id and type; say if it changed.

    ``named`` holds the ``(choice, tool call)`` indexes already named in this stream.

    Example:
        ```python
        named: set[tuple[int, int]] = set()
        for event in events:
            dedupe_streamed_tool_names(event, named)
        ```
    """
    changed = False
    choices = event.get("choices") if isinstance(event, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        position = choice.get("index", 0)
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                continue
            key = (position, call.get("index", 0))
            function = call.get("function")
            if key in named:
                for field in ("id", "type"):
                    changed |= call.pop(field, None) is not None
                if isinstance(function, dict):
                    changed |= function.pop("name", None) is not None
            elif isinstance(function, dict) and function.get("name"):
                named.add(key)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and legacy.get("name"):
            if (position, -1) in named:
                del legacy["name"]
                changed = True
            else:
                named.add((position, -1))
    return changed


_Step = bytes | list[httpx.Request]
"""A step of a stream's rewriting: bytes to pass on, or requests whose responses it needs."""


def _rewritten(watch: StreamWatch | None) -> Generator[_Step, Any, None]:
    """A stream's bytes rewritten line by line, for the sync and the async driver alike.

    It is sent each chunk of the server's bytes, then ``None`` at the end; it yields the
    bytes to pass on, or requests to send (the driver sends back their responses, or
    throws the `httpx.HTTPError` sending raised). ``data: [DONE]`` waits for the end, so
    that a usage line can go before it.
    """
    named: set[tuple[int, int]] = set()
    buffer, done = b"", False
    while (chunk := (yield b"")) is not None:
        *lines, buffer = (buffer + chunk).split(b"\n")
        if watch is not None and b"data: [DONE]" in lines:
            lines.remove(b"data: [DONE]")
            done = True
        yield b"".join(_line(line, watch, named) + b"\n" for line in lines)
    if buffer:
        yield _line(buffer, watch, named)
    if watch is None:
        return
    if not watch.saw_data and watch.llama_cpp_server:  # an empty stream: ask why, not streamed
        (response,) = yield [watch.diagnosis_request()]
        if (error := watch.error_of(response)) is not None:
            raise error
    elif watch.saw_data and not watch.finish_reasons:  # data, but the answer never ended
        url = str(watch.request.url).removesuffix("/chat/completions")
        text = len("".join(watch.parts))
        raise IncompleteAnswerError(
            url, f"a streamed answer ({watch.chunks} chunks, {text} characters of text)"
        )
    elif watch.needs_usage:
        with contextlib.suppress(httpx.HTTPError):
            counts = yield list(watch.count_requests())
            yield watch.usage_line(counts)
    if done:
        yield b"data: [DONE]\n\n"


def _line(line: bytes, watch: StreamWatch | None, named: set[tuple[int, int]]) -> bytes:
    payload = line[5:].strip() if line.startswith(b"data:") else b""
    if not payload.startswith(b"{"):
        return line
    try:
        event = json.loads(payload)
    except ValueError:
        return line
    if watch is not None:
        watch.take(event)
    if not dedupe_streamed_tool_names(event, named):
        return line
    return b"data: " + json.dumps(event, ensure_ascii=False).encode()


def _advance(
    steps: Generator[_Step, Any, None], sent: bytes | list[httpx.Response] | Exception | None
) -> _Step | None:
    """`steps` advanced with ``sent``; ``None`` once it is over."""
    try:
        return steps.throw(sent) if isinstance(sent, Exception) else steps.send(sent)
    except StopIteration:
        return None


class _SyncLines(httpx.SyncByteStream):
    """A streamed answer rewritten (`_rewritten`); read once: a second read goes on from it."""

    def __init__(
        self,
        stream: httpx.SyncByteStream,
        watch: StreamWatch | None,
        transport: httpx.BaseTransport,
    ) -> None:
        self.stream, self.watch, self.transport = stream, watch, transport
        self.lines = self._lines()

    def __iter__(self) -> Iterator[bytes]:
        return self.lines

    def _lines(self) -> Iterator[bytes]:
        steps = _rewritten(self.watch)
        next(steps)
        for chunk in self.stream:
            out = steps.send(chunk)
            next(steps)
            if isinstance(out, bytes) and out:
                yield out
        sent: bytes | list[httpx.Response] | Exception | None = None
        while (step := _advance(steps, sent)) is not None:
            if isinstance(step, bytes):
                yield step
                sent = b""
            else:
                try:
                    sent = [self.transport.handle_request(request) for request in step]
                    for response in sent:
                        response.read()
                except httpx.HTTPError as exc:
                    sent = exc

    def close(self) -> None:
        self.stream.close()


class _AsyncLines(httpx.AsyncByteStream):
    """`_SyncLines` for the async client."""

    def __init__(
        self,
        stream: httpx.AsyncByteStream,
        watch: StreamWatch | None,
        transport: httpx.AsyncBaseTransport,
    ) -> None:
        self.stream, self.watch, self.transport = stream, watch, transport
        self.lines = self._lines()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.lines

    async def _lines(self) -> AsyncIterator[bytes]:
        steps = _rewritten(self.watch)
        next(steps)
        async for chunk in self.stream:
            out = steps.send(chunk)
            next(steps)
            if isinstance(out, bytes) and out:
                yield out
        sent: bytes | list[httpx.Response] | Exception | None = None
        while (step := _advance(steps, sent)) is not None:
            if isinstance(step, bytes):
                yield step
                sent = b""
            else:
                try:
                    sent = [await self.transport.handle_async_request(r) for r in step]
                    for response in sent:
                        await response.aread()
                except httpx.HTTPError as exc:
                    sent = exc

    async def aclose(self) -> None:
        await self.stream.aclose()
