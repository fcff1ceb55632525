"""An HTTP transport that smooths three deviations of llama-cpp-python's server from OpenAI's API.

Measured with llama-cpp-python 0.3.36 and langchain-openai 1.x:

1. **Unbounded numbers in structured output.** llama.cpp turns a forced tool's JSON
   schema into a grammar that constrains the reply while it is generated, but its
   converter ignores ``minimum`` and ``maximum``: a judge asked for a score from 0 to 100
   could write ``316098``. When a request forces a tool (``tool_choice`` names a
   function), the transport gives every number of that tool's parameters that has both
   bounds an ``enum`` of the values between them (the integers for an ``integer``;
   about a hundred steps of the range for a ``number``: 0, 1, ..., 100 on 0-100, 0, 0.1,
   ..., 10 on 0-10), which the converter does enforce, as a choice of alternatives. The
   score is then always a number on the scale.
2. **Cut-off structured output.** A small model may keep writing inside a JSON string
   until the token cap (``max_tokens``) cuts the arguments off, and cut-off JSON does
   not parse (the structured-output parser then returns ``None``). When a request both
   forces a tool and sets ``max_tokens``, the transport adds a ``maxLength`` to every
   unbounded string of that tool's parameters, so the arguments close within the cap
   (counting up to 3 tokens per character).
3. **Repeated tool names when streaming.** The server repeats the function's name (and
   the call's id and type) in every streamed chunk; OpenAI sends them once. LangChain
   joins the chunks' names (``ReviewReviewReview...``), so a streamed structured-output
   call finds no tool of the expected name. The transport drops the repeats.

For every server it also refuses an answer that never finished: a chat completion that
ends without a finish reason (a stream of a role chunk and ``[DONE]``, which a
llama-cpp-python server busy with another request sent; a response with no choice, or a
choice without ``finish_reason``) raises `IncompleteAnswerError`, a transport error that
the loop's retries treat like a lost connection, instead of passing an empty answer on.

With ``llama_cpp_server=True`` (the bundled server's clients) it also counts the tokens of
streamed answers and names a prompt over the context (see
`loop_agents_cli.models.llama_cpp_extras`). Every other request and response passes
unchanged. Every chat model the package makes uses it (`http_clients`): the endpoints',
`loop_agents_cli.models.settings.ModelSettings.chat_model`'s and the bundled server's
(`loop_agents_cli.models.local_model.LocalModelServer`: ``http_async_client()``,
``chat_model()``).

Example:
    ```python
    import httpx
    from langchain_openai import ChatOpenAI
    from loop_agents_cli.models.llama_cpp_http import LlamaCppTransport

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
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import httpx

from loop_agents_cli.models.llama_cpp_extras import StreamWatch, chat_body, chat_request

__all__ = [
    "IncompleteAnswerError",
    "LlamaCppTransport",
    "bound_forced_tool",
    "dedupe_streamed_tool_names",
    "http_clients",
    "number_choices",
    "proxy_for",
]

_ARGUMENT_OVERHEAD_TOKENS = 24
"""Tokens kept for a forced call's JSON punctuation, keys and numbers."""
_TOKENS_PER_CHARACTER = 3
"""The most tokens one character may take (a byte-fallback CJK character)."""
_MOST_CHOICES = 1001
"""The most values a bounded number is given as alternatives (more would slow the grammar)."""


class IncompleteAnswerError(httpx.RemoteProtocolError):
    """A chat completion ended without a finish reason: cut off, neither empty nor finished.

    An ``httpx.TransportError`` (a ``RemoteProtocolError``), so the loop's retries
    (``default_retry_policy``) retry it like a lost connection. For an answer that is not
    streamed the OpenAI client retries it itself (``max_retries``), then raises an
    ``APIConnectionError`` from it; a streamed one reaches the caller as that error too.

    Example:
        ```python
        try:
            model.invoke("Say hello.")
        except (IncompleteAnswerError, openai.APIConnectionError):
            ...  # the server stopped answering mid-way: ask again
        ```
    """

    def __init__(self, url: str, what: str) -> None:
        """Say that the server at ``url`` ended ``what`` without a finish reason."""
        super().__init__(
            f"the model server at {url} ended {what} without a finish reason, so the answer "
            "is incomplete, not an answer (a llama.cpp server busy with another request sends "
            "such a stream); it is treated as a lost connection, and retried where retries "
            "are on. If it keeps happening, send the server one request at a time, or read "
            "its log"
        )


class LlamaCppTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport (sync and async) for llama-cpp-python's OpenAI-compatible server.

    See the module docstring for what it changes and why.

    Args:
        transport: The sync transport to wrap; default ``httpx.HTTPTransport()``.
        async_transport: The async transport to wrap; default
            ``httpx.AsyncHTTPTransport()``.
        llama_cpp_server: The server is llama-cpp-python's own (the bundled one): count
            the tokens of streamed answers with its tokenizer, and turn the empty stream
            it sends for a prompt over its context into a
            `loop_agents_cli.models.llama_cpp_extras.ContextWindowExceeded` error.

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
        """Wrap ``transport`` and ``async_transport`` (created on first use if ``None``)."""
        self._transport = transport
        self._async_transport = async_transport
        self.llama_cpp_server = llama_cpp_server

    def _watch(self, request: httpx.Request) -> StreamWatch | None:
        body = chat_request(request)
        if body is None:
            return None
        return StreamWatch(request, body, llama_cpp_server=self.llama_cpp_server)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send a request synchronously (see the module docstring for the changes)."""
        if self._transport is None:
            self._transport = httpx.HTTPTransport()
        request = bound_forced_tool(request)
        response = self._transport.handle_request(request)
        if _is_completion(request, response):
            response.read()
            return _finished(request, response)
        if not _is_event_stream(response):
            return response
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)
        return _with_stream(response, _SyncLines(stream, self._watch(request), self._transport))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send a request asynchronously (see the module docstring for the changes)."""
        if self._async_transport is None:
            self._async_transport = httpx.AsyncHTTPTransport()
        request = bound_forced_tool(request)
        response = await self._async_transport.handle_async_request(request)
        if _is_completion(request, response):
            await response.aread()
            return _finished(request, response)
        if not _is_event_stream(response):
            return response
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        watch = self._watch(request)
        return _with_stream(response, _AsyncLines(stream, watch, self._async_transport))

    def close(self) -> None:
        """Close the wrapped sync transport."""
        if self._transport is not None:
            self._transport.close()

    async def aclose(self) -> None:
        """Close the wrapped async transport."""
        if self._async_transport is not None:
            await self._async_transport.aclose()


def http_clients(
    base_url: str | None, *, llama_cpp_server: bool = False
) -> tuple[httpx.Client, httpx.AsyncClient]:
    """A sync and an async client for the server at ``base_url``, through `LlamaCppTransport`.

    Both share one transport, with the environment's proxy for ``base_url`` (`proxy_for`;
    none on loopback). ``None`` is OpenAI's API.

    Example:
        ```python
        sync_client, async_client = http_clients("http://127.0.0.1:8080/v1")
        model = ChatOpenAI(base_url=url, http_client=sync_client, http_async_client=async_client)
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
    host = parts.hostname or ""
    if host in ("localhost", "::1") or host.startswith("127.") or not host:
        return None
    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


# -- requests: bound the numbers and strings of a forced tool call -----------------------


def bound_forced_tool(request: httpx.Request) -> httpx.Request:
    """The request with the forced tool's bounded numbers and unbounded strings constrained.

    Only ``POST .../chat/completions`` requests whose ``tool_choice`` names a function
    change. A number of that tool's parameters with both ``minimum`` and ``maximum`` gets
    an ``enum`` of its values (`number_choices`); with ``max_tokens`` set, every string
    without a bound gets ``maxLength`` ``(max_tokens - 24) // (3 * number_of_strings)``
    (at least 1).

    Example:
        ```python
        request = bound_forced_tool(request)
        ```
    """
    body = chat_body(request)
    if body is None:
        return request
    cap, choice = body.get("max_tokens"), body.get("tool_choice")
    if not isinstance(choice, dict):
        return request
    name = (choice.get("function") or {}).get("name")
    changed = False
    for tool in body.get("tools") or []:
        function = tool.get("function") or {} if isinstance(tool, dict) else {}
        if function.get("name") != name or not isinstance(function.get("parameters"), dict):
            continue
        for schema in _bounded_numbers(function["parameters"]):
            choices = number_choices(
                schema["minimum"], schema["maximum"], integer=schema.get("type") == "integer"
            )
            if choices:
                schema["enum"] = choices
                changed = True
        strings = list(_unbounded_strings(function["parameters"]))
        if not isinstance(cap, int) or not strings:
            continue
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

    For an integer, every integer in the range; for a number, the multiples of a power
    of ten that splits the range into 100 to 1,000 steps (0-100: the integers; 0-10:
    tenths; 0-1: hundredths). Empty when the range is not finite, is empty, or would
    need more than 1,001 integers.

    Example:
        ```python
        number_choices(0, 100, integer=True)[-3:]  # [98, 99, 100]
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
    exponent = math.floor(math.log10((high - low) / 100))
    scale = 10.0**-exponent  # values are i / scale (exact in decimal, unlike i * step)
    first, last = math.ceil(low * scale - 1e-9), math.floor(high * scale + 1e-9)
    return [_plain_number(i / scale) for i in range(first, last + 1)]


def _plain_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _bounded_numbers(schema: Any) -> Iterator[dict[str, Any]]:
    """The number schemas in ``schema`` with a finite ``minimum`` and ``maximum``."""
    for found in _subschemas(schema):
        if (
            found.get("type") in ("number", "integer")
            and not ({"enum", "const"} & set(found))
            and all(_is_finite(found.get(key)) for key in ("minimum", "maximum"))
        ):
            yield found


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


def _unbounded_strings(schema: Any) -> Iterator[dict[str, Any]]:
    """The string schemas in ``schema`` with no length, enum, const, pattern or format."""
    for found in _subschemas(schema):
        if found.get("type") == "string" and not (
            {"maxLength", "enum", "const", "pattern", "format"} & set(found)
        ):
            yield found


# -- responses: a finished answer, each streamed tool call's name once ----------------------


def _is_event_stream(response: httpx.Response) -> bool:
    content_type = str(response.headers.get("content-type", ""))
    return content_type.startswith("text/event-stream")


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
    """``response`` (read) as it came, if each choice of its answer has a finish reason.

    Raises:
        IncompleteAnswerError: it has no choice, or one without a ``finish_reason``. A body
            that is not a completion at all (not JSON, an error) passes, for the client to
            report as it is.
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


class _Deduper:
    """Rewrites server-sent event lines; remembers which tool calls were named already."""

    def __init__(self, watch: StreamWatch | None = None) -> None:
        self.named: set[tuple[int, int]] = set()
        self.buffer = b""
        self.watch = watch
        self.held_done = False
        """Whether ``data: [DONE]`` was held back (to add the usage before it)."""

    def feed(self, chunk: bytes) -> bytes:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        if self.watch is not None and b"data: [DONE]" in lines:
            lines.remove(b"data: [DONE]")
            self.held_done = True
        return b"".join(self._line(line) + b"\n" for line in lines)

    def flush(self) -> bytes:
        rest, self.buffer = self.buffer, b""
        return self._line(rest) if rest else b""

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if not payload.startswith(b"{"):
            return line
        try:
            event = json.loads(payload)
        except ValueError:
            return line
        if self.watch is not None:
            self.watch.take(event)
        if not dedupe_streamed_tool_names(event, self.named):
            return line
        return b"data: " + json.dumps(event, ensure_ascii=False).encode()


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
            key = (position, -1)
            if key in named:
                del legacy["name"]
                changed = True
            else:
                named.add(key)
    return changed


_Stream = TypeVar("_Stream")
_Transport = TypeVar("_Transport")
_Step = bytes | list[httpx.Request]
"""One step of a stream's ending: bytes to pass on, or requests whose responses it needs."""


def _ending(deduper: _Deduper, watch: StreamWatch | None) -> Generator[_Step, Any, None]:
    """The end of a streamed answer, written once for the sync and the async stream.

    It yields the bytes to pass on, or a list of requests to send: the driver sends back
    their responses, or throws the `httpx.HTTPError` that sending raised.
    """
    if out := deduper.flush():
        yield out
    if watch is None or watch.finished:
        return
    watch.finished = True  # once, even if the stream is read again
    if not watch.saw_data and watch.llama_cpp_server:  # an empty stream: ask again, not
        (response,) = yield [watch.diagnosis_request()]  # streamed, for the reason
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
    if deduper.held_done:
        yield b"data: [DONE]\n\n"


def _next_step(
    ending: Generator[_Step, Any, None], sent: list[httpx.Response] | httpx.HTTPError | None
) -> _Step | None:
    """Advance `ending` with what the driver got (None to start); None once it is over."""
    try:
        if isinstance(sent, httpx.HTTPError):
            return ending.throw(sent)
        return ending.send(sent)
    except StopIteration:
        return None


class _Lines(Generic[_Stream, _Transport]):
    """A streamed answer's bytes, rewritten line by line, and the transport that sent it."""

    def __init__(
        self, stream: _Stream, watch: StreamWatch | None = None, transport: _Transport | None = None
    ) -> None:
        self.stream = stream
        self.deduper = _Deduper(watch)
        self.watch = watch if transport is not None else None
        self.transport = transport


class _SyncLines(_Lines[httpx.SyncByteStream, httpx.BaseTransport], httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            if out := self.deduper.feed(chunk):
                yield out
        ending = _ending(self.deduper, self.watch)
        sent: list[httpx.Response] | httpx.HTTPError | None = None
        while (step := _next_step(ending, sent)) is not None:
            if isinstance(step, bytes):
                yield step
            sent = None if isinstance(step, bytes) else self._send(step)

    def _send(self, requests: list[httpx.Request]) -> list[httpx.Response] | httpx.HTTPError:
        assert self.transport is not None  # requests are asked for only with one
        try:
            responses = [self.transport.handle_request(request) for request in requests]
            for response in responses:
                response.read()
        except httpx.HTTPError as exc:
            return exc
        return responses

    def close(self) -> None:
        self.stream.close()


class _AsyncLines(_Lines[httpx.AsyncByteStream, httpx.AsyncBaseTransport], httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            if out := self.deduper.feed(chunk):
                yield out
        ending = _ending(self.deduper, self.watch)
        sent: list[httpx.Response] | httpx.HTTPError | None = None
        while (step := _next_step(ending, sent)) is not None:
            if isinstance(step, bytes):
                yield step
            sent = None if isinstance(step, bytes) else await self._send(step)

    async def _send(self, requests: list[httpx.Request]) -> list[httpx.Response] | httpx.HTTPError:
        assert self.transport is not None  # requests are asked for only with one
        try:
            responses = [await self.transport.handle_async_request(r) for r in requests]
            for response in responses:
                await response.aread()
        except httpx.HTTPError as exc:
            return exc
        return responses

    async def aclose(self) -> None:
        await self.stream.aclose()
