"""Scripted models for the eval tests: replies computed from each request.

`ReactiveOpenAI` is a `ScriptedOpenAI` whose reply to each chat-completion request is
computed by a function of the request body (so that concurrent tasks and arms get the
right replies whatever order they arrive in). The real ``ChatOpenAI`` client talks to
it, in process (an ``httpx.MockTransport``) or over loopback HTTP (``serve()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from langchain_openai import ChatOpenAI

from loop_agents_evals.tasks import InstructionsTask, parse_task
from tests.scripted_openai import Fail, Reply, ScriptedOpenAI, Structured

Responder = Callable[[dict[str, Any]], "Reply | httpx.Response"]


class ReactiveOpenAI(ScriptedOpenAI):
    """Answers each request with ``respond(body)``; an ``httpx.Response`` is sent as is."""

    def __init__(self, respond: Responder, **options: Any) -> None:
        super().__init__((), **options)
        self.respond = respond

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        reply = self.respond(body)
        if isinstance(reply, httpx.Response):
            message = reply.json().get("error", {}).get("message", "scripted server error")
            return Fail(reply.status_code, message)
        return reply

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


def ok_tasks(count: int, prefix: str = "t") -> list[InstructionsTask]:
    """Tasks answered right by 'OK' (uppercase, one word) and wrong by anything else."""
    checks = [{"check": "case", "case": "upper"}, {"check": "word_count", "max": 1}]
    tasks = [
        parse_task(
            {
                "id": f"{prefix}{i}",
                "kind": "instructions",
                "prompt": f"Task {i}: reply OK in capitals.",
                "checks": checks,
            }
        )
        for i in range(count)
    ]
    return [task for task in tasks if isinstance(task, InstructionsTask)]
