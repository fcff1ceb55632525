"""A scripted OpenAI-compatible server: on an ``httpx.MockTransport`` or on real loopback HTTP.

The real ``ChatOpenAI`` client talks to it: every ``POST .../chat/completions`` is
recorded and answered by the next reply of the script. A reply is a string (the
assistant's text), `Structured` (a JSON object given as the message content for
``response_format`` requests and as a tool call when the request offers tools), `Calls`
(calls of tools by name), `Fail`
(an HTTP error), `Hang` (stream a little, or send nothing, then never finish: a model
call in flight), `Drop` (start the answer, then close the connection: a server that
dies mid-answer), `Raw` (a body sent as it is, e.g. empty or not JSON), `Cut` (text
that ends at the token cap: ``finish_reason`` ``"length"``) or `Unfinished` (an answer
that ends without any finish reason: a server busy with another request). Streaming
requests (``"stream": true``) get server-sent events, written chunk by chunk when served
over HTTP.

Options make it behave like particular servers:

- ``usage_when_asked=True``: a stream carries its token usage only when the request
  asks for it (``stream_options.include_usage``), as OpenAI's API does;
- ``llama_cpp=True``: like llama-cpp-python's server, ``response_format`` of type
  ``json_schema`` is refused with HTTP 500 and `LLAMA_CPP_REFUSAL` (before any reply of
  the script is used), a streamed tool call repeats its id, type
  and name in every chunk of its arguments, and ``POST /extras/tokenize/count`` counts
  a text's tokens (here: one per 4 characters, at least 1; never recorded as a request);
- ``ollama_models=[...]``: answers Ollama's model list at ``GET /api/tags``;
- ``model_ids=[...]``: the models ``GET /v1/models`` lists (default: ``scripted``);
- ``cached_tokens=N``: the usage says N of the prompt tokens were read from the
  server's prompt cache (``prompt_tokens_details.cached_tokens``);
- ``record_to=PATH``: also appends every request to PATH, one JSON object a line
  (for a server that runs in another process);
- ``prefix_cache=True``: a provider's prompt cache. The usage is then counted from the
  request instead of being fixed: the prompt is the text `prompt_text` makes of the
  request (its tools, its ``response_format`` and its messages, one JSON object each, in
  that order), a token is a chunk of `CHARS_PER_TOKEN` characters of it (the last one
  may be shorter), and ``usage.prompt_tokens_details.cached_tokens`` is the number of
  whole tokens of the longest prefix that this prompt shares with a prompt seen earlier
  (with ``cache_per_model=True``, the default, only earlier prompts for the same
  ``model``, so an agent and a judge on one server do not share a cache). The reply's
  tokens are counted the same way. A real provider caches in blocks (OpenAI: 128 tokens
  once a prompt has 1,024); this cache has a block of one token.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx


@dataclass(frozen=True)
class Structured:
    """A structured answer: JSON content, or a call of the request's first tool.

    ``value`` is a dict (sent as JSON) or a string of JSON text sent as it is, for
    replies Python's ``json`` would not write (``{"score": 1e400}``).
    """

    value: dict[str, Any] | str


@dataclass(frozen=True)
class Calls:
    """Calls of the request's tools by name, e.g. ``Calls(("write_file", {"file_path": ...}))``."""

    calls: tuple[tuple[str, dict[str, Any]], ...]

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        object.__setattr__(self, "calls", calls)


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error."""

    status: int = 500
    message: str = "scripted server error"


@dataclass(frozen=True)
class Hang:
    """Stream ``text`` (for a streaming request), then hang until the server stops.

    A request that is not streamed gets nothing at all, not even the status line: the
    server is still working on it.
    """

    text: str = ""


@dataclass(frozen=True)
class Drop:
    """Start the answer, then close the connection: the server died or the link broke.

    A streaming request gets ``text`` in server-sent events, then the connection is
    closed short of the length the headers announced; a request that is not streamed
    gets nothing before the connection closes.
    """

    text: str = ""


@dataclass(frozen=True)
class Raw:
    """Answer with ``body`` as it is (e.g. empty, or not JSON), whatever was asked."""

    body: bytes = b""
    content_type: str = "application/json"
    status: int = 200


@dataclass(frozen=True)
class Cut:
    """Answer with ``text`` cut off at the token cap: ``finish_reason`` is ``"length"``."""

    text: str


@dataclass(frozen=True)
class Unfinished:
    """End the answer without a finish reason, as a llama.cpp server busy with another request.

    A streaming request gets the role chunk, ``text`` (if any) and ``[DONE]``, and never a
    finish reason; one not streamed gets a completion whose one choice has ``finish_reason``
    null, or (``choices=False``) no choice at all.
    """

    text: str = ""
    choices: bool = True


Reply = str | Structured | Calls | Fail | Hang | Drop | Raw | Cut | Unfinished

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}

LLAMA_CPP_REFUSAL = {
    "error": {
        "message": (
            "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
            "\"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': "
            "{'expected': \"'text' or 'json_object'\"}}]"
        ),
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
"""llama-cpp-python 0.3.36's answer (HTTP 500) to ``response_format`` of type ``json_schema``:
its request model allows ``'text'`` or ``'json_object'`` only; FastAPI's validation error
reaches its route handler, which wraps any exception's text as an ``internal_server_error``
(``llama_cpp/server/errors.py``)."""

CHARS_PER_TOKEN = 4
"""The prefix cache's tokens: chunks of this many characters of `prompt_text`."""


def prompt_text(body: dict[str, Any]) -> str:
    """The text a request's prompt is tokenised from: tools, response format, messages.

    One JSON object a line (keys sorted), in the order a provider puts them before the
    model: the tools, the ``response_format``, then every message.
    """
    parts = [body.get("tools"), body.get("response_format"), *body.get("messages", [])]
    return "".join(json.dumps(part, sort_keys=True) + "\n" for part in parts if part)


def tokens(text: str) -> int:
    """How many tokens ``text`` is for the prefix cache (chunks of `CHARS_PER_TOKEN`)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass
class _Answer:
    status: int
    content_type: str
    parts: list[bytes] = field(default_factory=list)
    hang: bool = False
    drop: bool = False
    length: int | None = None
    """The content-length to announce when it is not the parts' (a `Drop`)."""


class _CountingServer(ThreadingHTTPServer):
    """A threading HTTP server that knows whether any connection is open or waiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._open = 0

    def get_request(self) -> Any:
        with self._lock:  # accepted and counted at once: `idle` never sees it in between
            request = super().get_request()
            self._open += 1
        return request

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._lock:
            self._open -= 1

    def idle(self) -> bool:
        """No connection open and none waiting to be accepted (Linux: the listen queue)."""
        with self._lock:
            return self._open == 0 and _waiting(self.server_address[1]) == 0


def _waiting(port: int) -> int:
    """Connections waiting to be accepted on a listening TCP ``port`` (0 when unknown)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return 0
    for line in lines:
        fields = line.split()
        # a listening socket (state 0A) shows its accept queue's length as rx_queue
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return int(fields[4].split(":")[1], 16)
    return 0


class ScriptedOpenAI:
    """Answers chat-completion requests from a script and records them."""

    def __init__(
        self,
        replies: Iterable[Reply],
        *,
        usage_when_asked: bool = False,
        llama_cpp: bool = False,
        ollama_models: Sequence[str] | None = None,
        record_to: Path | None = None,
        prefix_cache: bool = False,
        cache_per_model: bool = True,
        cached_tokens: int = 0,
        model_ids: Sequence[str] = ("scripted",),
    ) -> None:
        self._replies = iter(replies)
        self.usage: dict[str, Any] = dict(USAGE)
        if cached_tokens:
            self.usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.usage_when_asked = usage_when_asked
        self.llama_cpp = llama_cpp
        self.ollama_models = list(ollama_models) if ollama_models is not None else None
        self.model_ids = list(model_ids)
        self.record_to = record_to
        self.prefix_cache = prefix_cache
        self.cache_per_model = cache_per_model
        self._seen: dict[str, list[str]] = {}
        """The prompts seen so far, by model (all under ``""`` without `cache_per_model`)."""
        self.usages: list[dict[str, Any]] = []
        """The usage of each chat-completion reply, in the order answered (also for a
        stream that did not ask for it, which is sent without it)."""
        self.hanging = threading.Event()
        """Set when a `Hang` reply has sent what it streams and hangs."""
        self._served: _CountingServer | None = None
        self.abandoned = threading.Event()
        """Set when the client hung up on a `Hang` reply while it hung: the request
        was still in flight when the client went away."""

    def wait_idle(self, timeout: float) -> None:
        """Wait until the served script has no connection left: none open, none waiting.

        After a client process is killed, a request it had sent may still be on its way
        in (waiting to be accepted, or being read); once the server is idle, every such
        request has been counted in `requests`, and no more can come from it.

        Raises:
            AssertionError: still busy after ``timeout`` seconds (a hang).
        """
        server = self._served
        assert server is not None, "wait_idle needs serve()"
        deadline = time.monotonic() + timeout
        while not server.idle():
            assert time.monotonic() < deadline, f"the scripted server is busy after {timeout} s"
            time.sleep(0.05)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._mock)

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=self.transport(), base_url="https://scripted.invalid")

    def client(self) -> httpx.Client:
        return httpx.Client(transport=self.transport(), base_url="https://scripted.invalid")

    def _mock(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            answer = self._get(request.url.path)
        else:
            answer = self._answer(request.url.path, request.content)
        if answer.hang or answer.drop:
            raise NotImplementedError("Hang and Drop replies need the HTTP server: use serve()")
        return httpx.Response(
            answer.status,
            headers={"content-type": answer.content_type},
            content=b"".join(answer.parts),
        )

    @contextmanager
    def serve(self, port: int = 0) -> Iterator[str]:
        """Serve the script over real HTTP on loopback (a free port); yield the base URL.

        For programs in a subprocess, which reach it through ``OPENAI_BASE_URL``.
        """
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(script._get(self.path))

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                self._send(script._answer(self.path, self.rfile.read(length)))

            def _send(self, answer: _Answer) -> None:
                try:
                    if answer.parts or not (answer.hang or answer.drop):
                        self._head(answer)
                        for part in answer.parts:
                            self.wfile.write(part)
                            self.wfile.flush()
                    if answer.hang:
                        self._hang()
                    elif answer.drop:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (e.g. it was interrupted)

            def _head(self, answer: _Answer) -> None:
                self.send_response(answer.status)
                self.send_header("content-type", answer.content_type)
                if answer.length is not None:
                    self.send_header("content-length", str(answer.length))
                elif answer.content_type != "text/event-stream":
                    self.send_header("content-length", str(sum(map(len, answer.parts))))
                self.end_headers()

            def _hang(self) -> None:
                """Wait until the server stops, noting a client that hangs up meanwhile."""
                script.hanging.set()
                while not script._stopped.wait(0.05):
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    if not readable:
                        continue
                    try:  # the client sends nothing more on this request: EOF or reset
                        data = self.connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        data = b""
                    if not data:
                        script.abandoned.set()
                        return

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = _CountingServer(("127.0.0.1", port), Handler)
        self._served = server
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            self._served = None
            self._stopped.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    # -- answers --------------------------------------------------------------------------

    def _get(self, path: str) -> _Answer:
        if path.rstrip("/") == "/api/tags" and self.ollama_models is not None:
            listed = [{"name": name, "model": name} for name in self.ollama_models]
            return _json(200, {"models": listed})
        if path.rstrip("/").endswith("/models"):
            listed = [{"id": model, "object": "model"} for model in self.model_ids]
            return _json(200, {"object": "list", "data": listed})
        return _json(404, {"error": {"message": f"no {path}"}})

    def _answer(self, path: str, content: bytes) -> _Answer:
        if self.llama_cpp and path.rstrip("/") == "/extras/tokenize/count":
            text = str(json.loads(content).get("input", ""))
            return _json(200, {"count": max(1, len(text) // 4)})
        if not path.endswith("/chat/completions"):
            return _json(404, {"error": {"message": f"no {path}"}})
        body = json.loads(content)
        with self._lock:
            self.requests.append(body)
            if self.record_to is not None:
                with self.record_to.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(body) + "\n")
            if self.llama_cpp and (body.get("response_format") or {}).get("type") == "json_schema":
                return _json(500, LLAMA_CPP_REFUSAL)  # refused before the model is asked
            reply = self._next_reply(body)
            completion_id = f"chatcmpl-{next(self._ids)}"
            cached = self._cached_tokens(body)
        if reply is None:
            return _json(500, {"error": {"message": "script exhausted"}})
        if isinstance(reply, Fail):
            return _json(reply.status, {"error": {"message": reply.message}})
        if isinstance(reply, Raw):
            return _Answer(reply.status, reply.content_type, [reply.body])
        stream = bool(body.get("stream"))
        if isinstance(reply, Hang | Drop):
            if not stream:  # nothing before the status line
                return _Answer(
                    200,
                    "application/json",
                    [],
                    hang=isinstance(reply, Hang),
                    drop=isinstance(reply, Drop),
                )
            message = {"role": "assistant", "content": reply.text}
            whole = _sse(completion_id, body["model"], message, None, self.llama_cpp)
            parts = whole[:-2]  # without the finish chunk and [DONE]
            if isinstance(reply, Hang):
                return _Answer(200, "text/event-stream", parts, hang=True)
            # announce the whole body and send less: the client sees the link break
            return _Answer(200, "text/event-stream", parts, drop=True, length=sum(map(len, whole)))
        if isinstance(reply, Unfinished):
            message = {"role": "assistant", "content": reply.text}
            if stream:  # the role chunk, the text, [DONE]: no finish chunk
                parts = _sse(completion_id, body["model"], message, None)
                return _Answer(200, "text/event-stream", [*parts[:-2], parts[-1]])
            choice = {"index": 0, "message": message, "finish_reason": None}
            return _json(
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [choice] if reply.choices else [],
                },
            )
        message = self._message(reply, body)
        usage = self._usage(body, message, cached)
        if stream:
            asked = bool((body.get("stream_options") or {}).get("include_usage"))
            if self.usage_when_asked and not asked:
                usage = None
            parts = _sse(
                completion_id, body["model"], message, usage, self.llama_cpp, _finish(reply)
            )
            return _Answer(200, "text/event-stream", parts)
        return _json(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": _finish(reply)
                        or ("tool_calls" if "tool_calls" in message else "stop"),
                    }
                ],
                "usage": usage,
            },
        )

    def _cached_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's tokens found in the prefix cache; remember the prompt (under the lock)."""
        if not self.prefix_cache:
            return 0
        prompt = prompt_text(body)
        seen = self._seen.setdefault(str(body.get("model")) if self.cache_per_model else "", [])
        shared = max((len(os.path.commonprefix([prompt, old])) for old in seen), default=0)  # noqa: RUF071 (characters)
        seen.append(prompt)
        if shared == len(prompt):  # the whole prompt again, its last chunk included
            return tokens(prompt)
        return shared // CHARS_PER_TOKEN

    def _usage(self, body: dict[str, Any], message: dict[str, Any], cached: int) -> dict[str, Any]:
        """The usage reported for a reply: fixed, or counted with the prefix cache."""
        if not self.prefix_cache:
            usage: dict[str, Any] = dict(self.usage)
        else:
            prompt = tokens(prompt_text(body))
            answer = message.get("content") or json.dumps(message.get("tool_calls"))
            completion = tokens(answer)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
        with self._lock:
            self.usages.append(usage)
        return usage

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        """The reply to a chat-completion request (``None``: the script is exhausted)."""
        return next(self._replies, None)

    @staticmethod
    def _message(reply: Structured | Cut | str, body: dict[str, Any]) -> dict[str, Any]:
        if isinstance(reply, str):
            return {"role": "assistant", "content": reply}
        if isinstance(reply, Cut):
            return {"role": "assistant", "content": reply.text}
        if isinstance(reply, Calls):
            calls = [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for n, (name, arguments) in enumerate(reply.calls, 1)
            ]
            return {"role": "assistant", "content": None, "tool_calls": calls}
        if isinstance(reply.value, str):
            arguments = reply.value
        else:
            arguments = json.dumps(reply.value, ensure_ascii=False)
        tools = body.get("tools") or []
        if tools:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": tools[0]["function"]["name"], "arguments": arguments},
                    }
                ],
            }
        return {"role": "assistant", "content": arguments}


def _finish(reply: Reply) -> str | None:
    """The finish reason a reply forces (``None``: the usual one)."""
    return "length" if isinstance(reply, Cut) else None


def _json(status: int, value: Any) -> _Answer:
    return _Answer(status, "application/json", [json.dumps(value).encode()])


def _sse(
    completion_id: str,
    model: str,
    message: dict[str, Any],
    usage: dict[str, Any] | None,
    repeat_tool_names: bool = False,
    finish: str | None = None,
) -> list[bytes]:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        # a lone surrogate (half an emoji) is sent as its JSON escape, as real servers do
        text = f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        return text.encode("utf-8", "backslashreplace")

    parts = [event({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    for start in range(0, len(content), 8):
        parts.append(event({"content": content[start : start + 8]}))
    for index, call in enumerate(message.get("tool_calls", [])):
        if not repeat_tool_names:
            parts.append(event({"tool_calls": [{"index": index, **call}]}))
            continue
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), 8):  # llama.cpp: the name in every chunk
            piece = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": arguments[start : start + 8],
                },
            }
            parts.append(event({"tool_calls": [piece]}))
    parts.append(event({}, finish or ("tool_calls" if message.get("tool_calls") else "stop")))
    final = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
    }
    if usage is not None:
        final["usage"] = usage
        parts.append(f"data: {json.dumps(final)}\n\n".encode())
    parts.append(b"data: [DONE]\n\n")
    return parts
