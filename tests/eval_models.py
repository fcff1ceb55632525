"""Scripted models for the eval tests: replies computed from each request.

`ReactiveOpenAI` is a `ScriptedOpenAI` whose reply to each chat-completion request is
computed by a function of the request body (so that concurrent tasks and arms get the
right replies whatever order they arrive in). The real ``ChatOpenAI`` client talks to
it, in process (an ``httpx.MockTransport``) or over loopback HTTP (``serve()``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from langchain_openai import ChatOpenAI

from tests.scripted_openai import Reply, ScriptedOpenAI, Structured

Responder = Callable[[dict[str, Any]], "Reply | httpx.Response"]


class _Replies(Iterator[Reply]):
    def __init__(self, owner: ReactiveOpenAI) -> None:
        self.owner = owner

    def __next__(self) -> Reply:
        return self.owner.pending


class ReactiveOpenAI(ScriptedOpenAI):
    """Answers each request with ``respond(body)``; an ``httpx.Response`` is sent as is."""

    def __init__(self, respond: Responder) -> None:
        super().__init__(())
        self.respond = respond
        self._replies = _Replies(self)
        self._lock = threading.Lock()
        self.pending: Reply = ""

    def _handle(self, request: httpx.Request) -> httpx.Response:
        import json

        with self._lock:
            if request.url.path.endswith("/chat/completions"):
                body = json.loads(request.content)
                reply = self.respond(body)
                if isinstance(reply, httpx.Response):
                    self.requests.append(body)
                    return reply
                self.pending = reply
            return super()._handle(request)

    def chat_model(self, **options: Any) -> ChatOpenAI:
        """A ``ChatOpenAI`` on this server, in process, without the client's own retries."""
        return ChatOpenAI(
            model="scripted",
            api_key="sk-test",
            max_retries=0,
            http_client=self.client(),
            http_async_client=self.async_client(),
            **options,
        )


def user_text(body: dict[str, Any]) -> str:
    """The first user message of a request (the task's prompt)."""
    for message in body["messages"]:
        if message["role"] == "user":
            return str(message["content"])
    return ""


def is_judge(body: dict[str, Any]) -> bool:
    """Whether a request is the judge's (it offers a tool or asks for a JSON schema)."""
    return bool(body.get("tools") or body.get("response_format"))


def after_feedback(body: dict[str, Any]) -> bool:
    """Whether the request carries feedback on an earlier answer (an assistant turn)."""
    return any(m["role"] == "assistant" for m in body["messages"])


def verdict(score: float, feedback: str = "Revise it.") -> Structured:
    """A judge's verdict."""
    return Structured({"feedback": feedback, "score": score})
