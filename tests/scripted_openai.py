"""A scripted OpenAI-compatible server: on an ``httpx.MockTransport`` or on real loopback HTTP.

The real ``ChatOpenAI`` client talks to it: every ``POST .../chat/completions`` is
recorded and answered by the next reply of the script. A reply is a string (the
assistant's text), `Structured` (a JSON object given as the message content for
``response_format`` requests and as a tool call when the request offers tools), `Fail`
(an HTTP error) or `Hang` (stream a little, then never finish: a model call in flight).
Streaming requests (``"stream": true``) get server-sent events, written chunk by chunk
when served over HTTP.

Options make it behave like particular servers:

- ``usage_when_asked=True``: a stream carries its token usage only when the request
  asks for it (``stream_options.include_usage``), as OpenAI's API does;
- ``llama_cpp=True``: like llama-cpp-python's server, ``response_format`` of type
  ``json_schema`` fails with HTTP 500, and a streamed tool call repeats its id, type
  and name in every chunk of its arguments;
- ``ollama_models=[...]``: answers Ollama's model list at ``GET /api/tags``;
- ``record_to=PATH``: also appends every request to PATH, one JSON object a line
  (for a server that runs in another process).
"""

from __future__ import annotations

import itertools
import json
import threading
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
class Fail:
    """Answer with an HTTP error."""

    status: int = 500
    message: str = "scripted server error"


@dataclass(frozen=True)
class Hang:
    """Stream ``text`` (for a streaming request), then hang until the server stops."""

    text: str = ""


Reply = str | Structured | Fail | Hang

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@dataclass
class _Answer:
    status: int
    content_type: str
    parts: list[bytes] = field(default_factory=list)
    hang: bool = False


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
    ) -> None:
        self._replies = iter(replies)
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.usage_when_asked = usage_when_asked
        self.llama_cpp = llama_cpp
        self.ollama_models = list(ollama_models) if ollama_models is not None else None
        self.record_to = record_to
        self.hanging = threading.Event()
        """Set when a `Hang` reply has sent what it streams and hangs."""

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
        if answer.hang:
            raise NotImplementedError("Hang replies need the HTTP server: use serve()")
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
                self.send_response(answer.status)
                self.send_header("content-type", answer.content_type)
                streamed = answer.content_type == "text/event-stream"
                if not streamed:
                    self.send_header("content-length", str(sum(map(len, answer.parts))))
                self.end_headers()
                try:
                    for part in answer.parts:
                        self.wfile.write(part)
                        self.wfile.flush()
                    if answer.hang:
                        script.hanging.set()
                        script._stopped.wait()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (e.g. it was interrupted)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
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
            return _json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        return _json(404, {"error": {"message": f"no {path}"}})

    def _answer(self, path: str, content: bytes) -> _Answer:
        if not path.endswith("/chat/completions"):
            return _json(404, {"error": {"message": f"no {path}"}})
        body = json.loads(content)
        with self._lock:
            self.requests.append(body)
            if self.record_to is not None:
                with self.record_to.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(body) + "\n")
            reply = self._next_reply(body)
            completion_id = f"chatcmpl-{next(self._ids)}"
        if reply is None:
            return _json(500, {"error": {"message": "script exhausted"}})
        if self.llama_cpp and (body.get("response_format") or {}).get("type") == "json_schema":
            return _json(
                500, {"error": {"message": "response_format json_schema is not supported"}}
            )
        if isinstance(reply, Fail):
            return _json(reply.status, {"error": {"message": reply.message}})
        stream = bool(body.get("stream"))
        if isinstance(reply, Hang):
            message = {"role": "assistant", "content": reply.text}
            parts = _sse(completion_id, body["model"], message, None, self.llama_cpp)[:-2]
            if not stream:
                parts = []
            return _Answer(200, "text/event-stream" if stream else "application/json", parts, True)
        message = self._message(reply, body)
        if stream:
            asked = bool((body.get("stream_options") or {}).get("include_usage"))
            usage = USAGE if asked or not self.usage_when_asked else None
            parts = _sse(completion_id, body["model"], message, usage, self.llama_cpp)
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
                        "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                    }
                ],
                "usage": USAGE,
            },
        )

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        """The reply to a chat-completion request (``None``: the script is exhausted)."""
        return next(self._replies, None)

    @staticmethod
    def _message(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        if isinstance(reply, str):
            return {"role": "assistant", "content": reply}
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


def _json(status: int, value: Any) -> _Answer:
    return _Answer(status, "application/json", [json.dumps(value).encode()])


def _sse(
    completion_id: str,
    model: str,
    message: dict[str, Any],
    usage: dict[str, int] | None,
    repeat_tool_names: bool = False,
) -> list[bytes]:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()

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
    parts.append(event({}, "tool_calls" if message.get("tool_calls") else "stop"))
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
