"""A scripted OpenAI-compatible server on an ``httpx.MockTransport`` (no network).

The real ``ChatOpenAI`` client talks to it: every ``POST .../chat/completions`` is
recorded and answered by the next reply of the script. A reply is a string (the
assistant's text) or `Structured` (a JSON object given as the message content for
``response_format`` requests and as a tool call when the request offers tools).
Streaming requests (``"stream": true``) get server-sent events.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass(frozen=True)
class Structured:
    """A structured answer: JSON content, or a call of the request's first tool.

    ``value`` is a dict (sent as JSON) or a string of JSON text sent as it is, for
    replies Python's ``json`` would not write (``{"score": 1e400}``).
    """

    value: dict[str, Any] | str


Reply = str | Structured


class ScriptedOpenAI:
    """Answers chat-completion requests from a script and records them."""

    def __init__(self, replies: Iterable[Reply]) -> None:
        self._replies = iter(replies)
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=self.transport(), base_url="https://scripted.invalid")

    def client(self) -> httpx.Client:
        return httpx.Client(transport=self.transport(), base_url="https://scripted.invalid")

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the script over real HTTP on a free loopback port; yield the base URL.

        For programs in a subprocess, which reach it through ``OPENAI_BASE_URL``.
        """
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                request = httpx.Request(
                    "POST", f"http://127.0.0.1{self.path}", content=self.rfile.read(length)
                )
                response = script._handle(request)
                self.send_response(response.status_code)
                self.send_header("content-type", response.headers["content-type"])
                self.send_header("content-length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": f"no {request.url.path}"}})
        body = json.loads(request.content)
        self.requests.append(body)
        try:
            reply = next(self._replies)
        except StopIteration:
            return httpx.Response(500, json={"error": {"message": "script exhausted"}})
        message = self._message(reply, body)
        completion_id = f"chatcmpl-{next(self._ids)}"
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if body.get("stream"):
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=_sse(completion_id, body["model"], message, usage),
            )
        return httpx.Response(
            200,
            json={
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
                "usage": usage,
            },
        )

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


def _sse(completion_id: str, model: str, message: dict[str, Any], usage: dict[str, int]) -> bytes:
    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    parts = [event({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    for start in range(0, len(content), 8):
        parts.append(event({"content": content[start : start + 8]}))
    for index, call in enumerate(message.get("tool_calls", [])):
        parts.append(event({"tool_calls": [{"index": index, **call}]}))
    parts.append(event({}, "tool_calls" if message.get("tool_calls") else "stop"))
    final = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    parts.append(f"data: {json.dumps(final)}\n\n")
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()
