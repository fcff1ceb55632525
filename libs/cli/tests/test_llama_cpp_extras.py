"""The bundled server's clients: usage of streamed answers counted, a prompt over the context named.

llama-cpp-python's server is played by an ``httpx.MockTransport`` that answers as it does
(measured with 0.3.36): streamed answers without usage, ``/extras/tokenize/count``, and an
empty stream for a prompt over the context, whose non-streamed twin gets a 400.
"""

from __future__ import annotations

import json

import httpx
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from loop_agents_cli.models.llama_cpp_extras import (
    TEMPLATE_TOKENS_FOR_REPLY,
    TEMPLATE_TOKENS_PER_MESSAGE,
    ContextWindowExceeded,
)
from loop_agents_cli.models.llama_cpp_http import LlamaCppTransport

WINDOW = 64
WORDS = ["Hello", " there", "!"]


def words(text: str) -> int:
    """The fake tokenizer: one token per space-separated word."""
    return len(text.split())


class FakeLlamaCpp:
    """Answers like llama-cpp-python's server; remembers what it was asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        body = json.loads(request.content)
        if request.url.path == "/extras/tokenize/count":
            return httpx.Response(200, json={"count": words(body["input"])})
        prompt = sum(words(m["content"]) for m in body["messages"])
        if prompt > WINDOW:
            if body.get("stream"):
                return httpx.Response(200, headers={"content-type": "text/event-stream"})
            message = (
                f"This model's maximum context length is {WINDOW} tokens. However, you "
                f"requested {prompt + body['max_tokens']} tokens ({prompt} in the messages, "
                f"{body['max_tokens']} in the completion). Please reduce the length."
            )
            error = {"message": message, "code": "context_length_exceeded"}
            return httpx.Response(400, json={"error": error})
        chunks = [
            {"id": "c", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            for delta, finish in [*(({"content": w}, None) for w in WORDS), ({}, "stop")]
        ]  # fmt: skip
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=events.encode()
        )


def model(fake: FakeLlamaCpp, *, llama_cpp_server: bool = True) -> ChatOpenAI:
    transport = LlamaCppTransport(
        httpx.MockTransport(fake), httpx.MockTransport(fake), llama_cpp_server=llama_cpp_server
    )
    return ChatOpenAI(
        model="m",
        base_url="http://127.0.0.1:1/v1",
        api_key="-",
        stream_usage=True,
        http_client=httpx.Client(transport=transport),
        http_async_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    )


MESSAGES = [SystemMessage("Be brief please."), HumanMessage("Say hello to me.")]
PROMPT = 7 + 2 * TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS_FOR_REPLY
ANSWER = words("".join(WORDS))


async def test_a_streamed_answer_carries_its_token_counts():
    fake = FakeLlamaCpp()
    final = None
    async for chunk in model(fake).astream(MESSAGES):
        final = chunk if final is None else final + chunk
    assert final is not None
    assert final.text == "Hello there!"
    usage = final.usage_metadata
    assert usage is not None
    assert (usage["input_tokens"], usage["output_tokens"]) == (PROMPT, ANSWER)
    assert fake.paths.count("/extras/tokenize/count") == 2


def test_the_sync_stream_counts_too():
    final = None
    for chunk in model(FakeLlamaCpp()).stream(MESSAGES):
        final = chunk if final is None else final + chunk
    assert final is not None
    assert final.usage_metadata is not None
    assert final.usage_metadata["output_tokens"] == ANSWER


async def test_other_servers_are_not_asked_to_count():
    fake = FakeLlamaCpp()
    final = None
    async for chunk in model(fake, llama_cpp_server=False).astream(MESSAGES):
        final = chunk if final is None else final + chunk
    assert final is not None
    assert not final.usage_metadata  # none sent: unknown, not invented
    assert "/extras/tokenize/count" not in fake.paths


async def test_a_failed_count_adds_no_usage():
    fake = FakeLlamaCpp()

    def no_counts(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/extras/tokenize/count":
            return httpx.Response(404, json={"detail": "Not Found"})
        return fake(request)

    transport = LlamaCppTransport(
        httpx.MockTransport(no_counts), httpx.MockTransport(no_counts), llama_cpp_server=True
    )
    chat = ChatOpenAI(
        model="m", base_url="http://127.0.0.1:1/v1", api_key="-", stream_usage=True,
        http_async_client=httpx.AsyncClient(transport=transport),
    )  # fmt: skip
    final = None
    async for chunk in chat.astream(MESSAGES):
        final = chunk if final is None else final + chunk
    assert final is not None
    assert final.text == "Hello there!"
    assert not final.usage_metadata


async def _read_async(chat: ChatOpenAI, messages: list[HumanMessage]) -> None:
    async for _ in chat.astream(messages):
        pass


def _read_sync(chat: ChatOpenAI, messages: list[HumanMessage]) -> None:
    for _ in chat.stream(messages):
        pass


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_a_prompt_over_the_context_is_named_with_the_numbers(mode):
    chat, long_task = model(FakeLlamaCpp()), [HumanMessage("word " * 100)]
    if mode == "async":
        with pytest.raises(ContextWindowExceeded) as raised:
            await _read_async(chat, long_task)
    else:
        with pytest.raises(ContextWindowExceeded) as raised:
            _read_sync(chat, long_task)
    assert (raised.value.prompt_tokens, raised.value.window) == (100, WINDOW)
    assert "the prompt is 100 tokens" in str(raised.value)
    assert "context of 64 tokens (36 tokens over it)" in str(raised.value)
    assert "shorten the task" in str(raised.value)


class _CountingEndpoint:
    """What `check_prompt_size` reads of an endpoint: its context, cap and tokenizer."""

    def __init__(self, window: int | None, cap: int | None) -> None:
        from loop_agents_cli.models.endpoints import EndpointSpec

        self.context_window = window
        self.spec = EndpointSpec("local", "m", max_tokens=cap)

    def count_tokens(self, text: str) -> int:
        return words(text)


def _spec(task: str, rubric: str | None):
    from loop_agents_cli.models.endpoints import EndpointSpec
    from loop_agents_cli.spec import RunSpec

    return RunSpec(task, rubric, None, 60.0, 80.0, 3, "Answer it.", "/", EndpointSpec("local", "m"))


def test_a_task_too_long_for_the_context_is_refused_before_any_call_with_the_numbers():
    from loop_agents_cli.errors import UsageError
    from loop_agents_cli.prompt_size import check_prompt_size

    endpoint = _CountingEndpoint(window=4096, cap=256)
    check_prompt_size(_spec("word " * 100, "Good."), endpoint)  # fits
    with pytest.raises(UsageError) as raised:
        check_prompt_size(_spec("word " * 200_000, "Good."), endpoint)
    message = str(raised.value)
    assert message.startswith("the task is 200,000 tokens long, too long for the model's ")
    assert "context of 4,096 tokens" in message
    assert "(256 tokens each, --max-tokens), a task may have at most 3," in message
    assert "Shorten it by about 196," in message
    # unknown context or no cap: nothing to check (a server at a URL)
    check_prompt_size(_spec("word " * 200_000, "Good."), _CountingEndpoint(None, 256))
    check_prompt_size(_spec("word " * 200_000, None), _CountingEndpoint(4096, None))


def test_the_command_says_the_prompt_is_too_long_and_offers_no_resume():
    from loop_agents_cli.failures import context_overflow, describe_error
    from loop_agents_cli.models.endpoints import Endpoint, EndpointSpec

    endpoint = Endpoint(EndpointSpec("server", "m", "http://127.0.0.1:1/v1"), source="test")
    overflow = ContextWindowExceeded(5000, 4096, "http://127.0.0.1:1/v1")
    wrapped = RuntimeError("the agent failed")
    wrapped.__cause__ = overflow
    assert context_overflow(wrapped) is overflow
    line = describe_error(wrapped, endpoint)
    assert line.startswith("the prompt is 5,000 tokens, but the model at http://127.0.0.1:1/v1")
    assert "(904 tokens over it)" in line
    assert "empty reply" not in line
    assert context_overflow(ValueError("No generations found in stream.")) is None
