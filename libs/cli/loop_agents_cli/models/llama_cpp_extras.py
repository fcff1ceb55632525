"""What llama-cpp-python's own server offers beyond OpenAI's API, used for the bundled model.

Its streamed answers carry no usage: `StreamWatch` counts the tokens with the server's
tokenizer (``POST /extras/tokenize/count``) at the end of the stream. A prompt over the
context gets an empty stream: the request is sent again, not streamed, and the server's
answer becomes `ContextWindowExceeded`. Details in docs/local-model.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

TEMPLATE_TOKENS_PER_MESSAGE = 5
"""ChatML's markup around one message: ``<|im_start|>``, the role, ``<|im_end|>``, newlines."""
TEMPLATE_TOKENS_FOR_REPLY = 3
"""ChatML's opening of the reply: ``<|im_start|>``, ``assistant`` and a newline."""

_EXCEEDED = re.compile(
    r"maximum context length is (?P<window>\d+) tokens\. However, you requested "
    r"(?P<requested>\d+) tokens \((?P<prompt>\d+) in the messages"
)


class ContextWindowExceeded(ValueError):
    """The prompt does not fit the model's context (``prompt_tokens`` of ``window``)."""

    def __init__(self, prompt_tokens: int, window: int, url: str) -> None:
        self.prompt_tokens = prompt_tokens
        self.window = window
        over = prompt_tokens - window
        by = f"{over:,} tokens over it" if over > 0 else "it leaves no room for the answer"
        super().__init__(
            f"the prompt is {prompt_tokens:,} tokens, but the model at {url} has a context "
            f"of {window:,} tokens ({by}): shorten the task (or the conversation: fewer "
            f"iterations), or use a model with a longer context"
        )


def chat_body(request: httpx.Request) -> dict[str, Any] | None:
    """The JSON body of a ``POST .../chat/completions`` request, else ``None``."""
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return None
    try:
        body = json.loads(request.content)
    except (ValueError, httpx.RequestNotRead):
        return None
    return body if isinstance(body, dict) else None


def chat_request(request: httpx.Request) -> dict[str, Any] | None:
    """The body of a streamed chat-completion request, else ``None``."""
    body = chat_body(request)
    return body if body is not None and body.get("stream") is True else None


class StreamWatch:
    """What one streamed answer said: its text, finish reasons, whether it had usage or data.

    Args:
        request: The streamed chat-completion request.
        body: Its JSON body.
        llama_cpp_server: The server is llama-cpp-python's own: its usage is counted and
            an empty stream is diagnosed.
    """

    def __init__(
        self, request: httpx.Request, body: dict[str, Any], llama_cpp_server: bool = True
    ) -> None:
        self.request = request
        self.body = body
        self.llama_cpp_server = llama_cpp_server
        self.parts: list[str] = []
        self.chunks = 0
        self.finish_reasons: list[str] = []
        self.saw_data = self.saw_usage = False
        options = body.get("stream_options")
        self.wants_usage = isinstance(options, dict) and options.get("include_usage") is True

    def take(self, event: Any) -> None:
        """Note one streamed event (a parsed ``data:`` line)."""
        self.saw_data = True
        self.chunks += 1
        if not isinstance(event, dict):
            return
        self.saw_usage |= bool(event.get("usage"))
        for choice in event.get("choices") or []:
            if isinstance(choice, dict) and choice.get("finish_reason"):
                self.finish_reasons.append(str(choice["finish_reason"]))
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.parts.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    self.parts.append(function["arguments"])

    @property
    def needs_usage(self) -> bool:
        """Whether a usage event should be added (asked for, and llama.cpp sent none)."""
        return self.llama_cpp_server and self.wants_usage and self.saw_data and not self.saw_usage

    def _follow_up(self, url: httpx.URL, body: dict[str, Any]) -> httpx.Request:
        # the stream's own time limit (the client's read timeout) bounds what it asks next
        timeout = self.request.extensions.get("timeout")
        return httpx.Request("POST", url, json=body, extensions={"timeout": timeout or {}})

    def count_requests(self) -> tuple[httpx.Request, httpx.Request]:
        """The two token counts to ask the server: the prompt's text and the answer's."""
        path = self.request.url.path.removesuffix("/chat/completions").removesuffix("/v1")
        url = self.request.url.copy_with(path=path + "/extras/tokenize/count", query=None)
        return (
            self._follow_up(url, {"input": _prompt_text(self.body)}),
            self._follow_up(url, {"input": "".join(self.parts)}),
        )

    def usage_line(self, counts: list[httpx.Response]) -> bytes:
        """The ``data:`` line with the usage counted, or ``b""`` if a count failed."""
        numbers: list[int] = []
        for response in counts:
            try:
                count = json.loads(response.read()).get("count") if response.is_success else None
            except ValueError:
                count = None
            if not isinstance(count, int):
                return b""
            numbers.append(count)
        messages = [m for m in self.body.get("messages") or [] if isinstance(m, dict)]
        prompt = numbers[0] + TEMPLATE_TOKENS_PER_MESSAGE * len(messages)
        prompt += TEMPLATE_TOKENS_FOR_REPLY
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": numbers[1],
            "total_tokens": prompt + numbers[1],
        }
        event = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
        if "model" in self.body:
            event["model"] = self.body["model"]
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    def diagnosis_request(self) -> httpx.Request:
        """The same request, not streamed and capped at one token (to learn why it failed)."""
        body = {k: v for k, v in self.body.items() if k not in ("stream", "stream_options")}
        return self._follow_up(self.request.url, body | {"stream": False, "max_tokens": 1})

    def error_of(self, response: httpx.Response) -> ContextWindowExceeded | None:
        """The error the not-streamed answer names, if the prompt is over the context."""
        try:
            text = response.read().decode("utf-8", "replace")
        except httpx.HTTPError:
            return None
        found = _EXCEEDED.search(text)
        if found is None:
            return None
        url = str(self.request.url).removesuffix("/chat/completions")
        return ContextWindowExceeded(int(found["prompt"]), int(found["window"]), url)


def _prompt_text(body: dict[str, Any]) -> str:
    """The text of a request's messages (and its tools' schemas), one after the other."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        value = message.get("content")
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts += [p["text"] for p in value if isinstance(p, dict) and "text" in p]
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts += [str(function.get("name", "")), str(function.get("arguments", ""))]
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], ensure_ascii=False))
    return "\n".join(parts)
