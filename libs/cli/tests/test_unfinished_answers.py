"""An answer that never finished is a transport error, retried like one, never an answer.

A llama-cpp-python server busy with another request answered a streamed request with a
role chunk and ``[DONE]``: no text and no finish reason. The loop took it for an empty
answer and sent it to the judge. Every chat model the package makes (an endpoint's,
`ModelSettings.chat_model`'s, the bundled server's) talks through `LlamaCppTransport`,
which raises `IncompleteAnswerError` (an ``httpx.TransportError``) for a stream that ends
without a finish reason and for a completion with no choice or a choice without one. Here
on a scripted OpenAI-compatible server and on the fake bundled server, over loopback HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import Retries
from loop_agents.controls.agent_errors import default_retry_policy, is_transient_error
from loop_agents_cli.models.endpoints import resolve_endpoint
from loop_agents_cli.models.llama_cpp_http import IncompleteAnswerError
from loop_agents_cli.models.local_model import LocalModelServer
from loop_agents_cli.models.settings import Environment, ModelSettings
from tests.scripted_openai import ScriptedOpenAI, Unfinished

HANG = 600
"""Seconds after which a wait is a hang, not a slow machine."""


def _settings_model(url: str, **options: Any) -> ChatOpenAI:
    return ModelSettings(base_url=url, model="scripted").chat_model(**options)


def _endpoint_model(url: str, **options: Any) -> ChatOpenAI:
    environment = Environment({"LOOP_AGENTS_OLLAMA_URL": "off"})
    endpoint = resolve_endpoint(base_url=url, model="scripted", environment=environment)
    return endpoint.chat_model(**options)


MAKERS = {"settings": _settings_model, "endpoint": _endpoint_model}


def _said_unfinished(error: BaseException) -> IncompleteAnswerError:
    """The `IncompleteAnswerError` that ``error`` is or was raised from."""
    while not isinstance(error, IncompleteAnswerError):
        assert error.__cause__ is not None, f"not an unfinished answer: {error!r}"
        error = error.__cause__
    return error


def _stream(model: ChatOpenAI, mode: str) -> str:
    """The streamed answer's text, read with the sync or the async client."""
    if mode == "sync":
        return "".join(chunk.text for chunk in model.stream("Say hello."))

    async def read() -> str:
        return "".join([chunk.text async for chunk in model.astream("Say hello.")])

    return asyncio.run(read())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("maker", list(MAKERS))
@pytest.mark.parametrize("text", ["", "Hel"], ids=["role chunk only", "some text"])
def test_a_stream_without_a_finish_reason_is_a_transport_error(maker, mode, text):
    server = ScriptedOpenAI([Unfinished(text), "Hello."])
    with server.serve() as url:
        model = MAKERS[maker](url, max_retries=0)
        with pytest.raises(Exception) as caught:
            _stream(model, mode)
        assert is_transient_error(caught.value), repr(caught.value)
        error = _said_unfinished(caught.value)
        assert str(error).startswith(
            f"the model server at {url} ended a streamed answer ({2 if text else 1} chunks, "
            f"{len(text)} characters of text) without a finish reason, so the answer is "
            "incomplete, not an answer"
        )
        assert _stream(model, mode) == "Hello."  # asked again: a finished answer


@pytest.mark.parametrize("maker", list(MAKERS))
@pytest.mark.parametrize("choices", [True, False], ids=["no finish reason", "no choice"])
def test_a_completion_without_a_finish_reason_is_a_transport_error(maker, choices):
    server = ScriptedOpenAI([Unfinished("Hel", choices=choices)] * 2 + ["Hello."])
    with server.serve() as url:
        model = MAKERS[maker](url, max_retries=0)
        with pytest.raises(openai.APIConnectionError) as caught:
            model.invoke("Say hello.")
        assert is_transient_error(caught.value)
        where = "(choice 0)" if choices else "with no choice at all"
        assert f"ended its answer {where} without a finish reason" in str(
            _said_unfinished(caught.value)
        )
        # the client's own retries ask again, as for a lost connection
        retried = MAKERS[maker](url, max_retries=1)
        assert retried.invoke("Say hello.").text == "Hello."
    assert len(server.requests) == 3


def _judge_seeing(answers: list[str]) -> Callable[[LoopContext], LoopEvaluation]:
    def judge(context: LoopContext) -> LoopEvaluation:
        answers.append(context["last_response"].text)
        return {"stop": True, "feedback": "Fine."}

    return judge


def test_the_loop_retries_an_unfinished_stream_and_the_judge_never_sees_it():
    """The defect as met: the judge was sent the empty answer of a busy server."""
    server = ScriptedOpenAI([Unfinished(), "Hello."])
    judged: list[str] = []
    with server.serve() as url:
        model = _settings_model(url, streaming=True, max_retries=0)
        loop = create_loop_agent(
            model,
            _judge_seeing(judged),
            2,
            controls=[Retries(agent_retry_policy=default_retry_policy(initial_interval=0.01))],
        )
        result = loop.invoke({"messages": [HumanMessage("Say hello.")]})
    assert judged == ["Hello."]
    assert result["last_response"].text == "Hello."
    assert result["iteration"] == 1  # the retried call used no iteration
    assert len(server.requests) == 2


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not streamed"])
def test_the_bundled_server_busy_with_another_request_is_asked_again(
    fake_llama, monkeypatch, stream
):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "busy-once")
    with LocalModelServer(fake_llama, startup_timeout=HANG) as server:
        model = server.chat_model(streaming=stream, max_retries=0)
        with pytest.raises(Exception) as caught:
            model.invoke("Say hello.")
        assert is_transient_error(caught.value)
        assert "without a finish reason" in str(_said_unfinished(caught.value))
        assert model.invoke("Say hello.").text == "An answer."
