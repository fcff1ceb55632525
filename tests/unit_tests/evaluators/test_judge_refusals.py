"""llm_judge on servers that refuse a structured-output method: it moves on, or says what to set.

The refusals are the servers' own words, as each sends them:

- llama-cpp-python 0.3.36 (`LLAMA_CPP_REFUSAL`, HTTP 500): its request model allows a
  ``response_format`` type of ``'text'`` or ``'json_object'`` only, and its route handler
  turns FastAPI's validation error into an ``internal_server_error``.
- vLLM before 0.5.5 (HTTP 400): the same pydantic literal error on ``response_format.type``,
  wrapped by vLLM's validation handler as ``{"object": "error", "message": ...,
  "type": "BadRequestError", "code": 400}``.
- vLLM's xgrammar backend (HTTP 400): ``The provided JSON schema contains features not
  supported by xgrammar.``, for a response format's schema and for tool parameters alike
  (vLLM 0.8's xgrammar took no ``minimum``/``maximum``, which the judge's schema has).
- Ollama (HTTP 400): ``<model> does not support tools`` for a model whose template has no
  tools, through its OpenAI layer's ``invalid_request_error``.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from loop_agents import JudgeError, create_loop_agent, llm_judge
from loop_agents.evaluators.judge import refusal
from tests.fakes import FakeChat
from tests.scripted_openai import LLAMA_CPP_REFUSAL, Fail, Raw, Reply, ScriptedOpenAI, Structured

REQUEST = HumanMessage("Write a haiku about rain.")
LITERAL_ERROR = LLAMA_CPP_REFUSAL["error"]["message"]
VLLM_OLD = {
    "object": "error",
    "message": LITERAL_ERROR,
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_XGRAMMAR = {
    "object": "error",
    "message": "The provided JSON schema contains features not supported by xgrammar.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
OLLAMA_NO_TOOLS = {
    "error": {
        "message": "registry.ollama.ai/library/gemma3:4b does not support tools",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}


class Refusing(ScriptedOpenAI):
    """A scripted server that refuses requests of some kinds with a server's own body."""

    def __init__(self, replies: list[Reply], refuses: dict[str, dict[str, Any]]) -> None:
        super().__init__(replies)
        self.refuses = refuses  # by kind: "json_schema", "json_object" or "tools"

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        kind = "tools" if body.get("tools") else (body.get("response_format") or {}).get("type")
        if kind in self.refuses:  # refused before the model is asked: no reply is used
            return Raw(json.dumps(self.refuses[kind]).encode(), status=400)
        return super()._next_reply(body)


def judge_model(server: ScriptedOpenAI) -> ChatOpenAI:
    # no client retries: each refusal is one request (the client would send a 500 three times)
    return ChatOpenAI(
        model="m",
        api_key="sk-test",
        max_retries=0,
        http_client=server.client(),
        http_async_client=server.async_client(),
    )


def context() -> dict[str, Any]:
    from langchain_core.messages import AIMessage

    answer = AIMessage("rain on the roof", id="a1")
    return {
        "iteration": 1,
        "init_messages": [REQUEST],
        "last_response": answer,
        "feedback": [],
        "messages": [REQUEST, answer],
    }


def kind(request: dict[str, Any]) -> str:
    if request.get("tools"):
        return "tools"
    return (request.get("response_format") or {}).get("type", "text")


VERDICTS = [
    Structured({"feedback": "Vivid.", "score": 82}),
    Structured({"feedback": "Flat.", "score": 40}),
]

SERVERS = {
    "llama.cpp": (lambda: ScriptedOpenAI(list(VERDICTS), llama_cpp=True), "json_schema",
                  ["json_schema", "tools", "tools"], "function_calling"),
    "vllm<0.5.5": (lambda: Refusing(list(VERDICTS), {"json_schema": VLLM_OLD}), "json_schema",
                   ["json_schema", "tools", "tools"], "function_calling"),
    "vllm xgrammar": (
        lambda: Refusing(list(VERDICTS), {"json_schema": VLLM_XGRAMMAR, "tools": VLLM_XGRAMMAR}),
        "json_schema", ["json_schema", "tools", "json_object", "json_object"], "json_mode",
    ),
    "ollama": (lambda: Refusing(list(VERDICTS), {"tools": OLLAMA_NO_TOOLS}), "function_calling",
               ["tools", "json_schema", "json_schema"], "json_schema"),
}  # fmt: skip


@pytest.mark.parametrize("server_name", list(SERVERS))
@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_refused_method_gives_way_to_one_the_server_takes(server_name, call):
    make, method, kinds, now = SERVERS[server_name]
    server = make()
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, method=method, retries=0)

    async def judged() -> dict[str, Any]:
        return judge.invoke(context()) if call == "invoke" else await judge.ainvoke(context())

    with pytest.warns(UserWarning, match=f'now uses method="{now}"') as caught:
        assert await judged() == {"stop": True, "feedback": "Vivid.\n\nScore: 82", "score": 82.0}
    [warning] = caught
    assert f'llm_judge(..., method="{now}")' in str(warning.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the second verdict warns no more
        assert (await judged())["score"] == 40.0
    # the refused method is asked once; the judge keeps the one that worked
    assert [kind(r) for r in server.requests] == kinds


def test_json_mode_is_told_the_schema_in_the_prompt():
    server = Refusing(list(VERDICTS), {"json_schema": VLLM_XGRAMMAR, "tools": VLLM_XGRAMMAR})
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    with pytest.warns(UserWarning, match="not supported by xgrammar"):
        judge.invoke(context())
    last = server.requests[-1]
    assert last["response_format"] == {"type": "json_object"}
    ask = last["messages"][-1]["content"]
    assert ask.startswith("Reply with only a JSON object of this JSON schema:")
    assert json.loads(ask.split("\n", 1)[1])["properties"]["score"]["maximum"] == 100


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_judge_in_a_loop_on_llama_cpp_switches_once(call):
    server = ScriptedOpenAI(
        [
            Structured({"feedback": "More rain.", "score": 55}),
            Structured({"feedback": "Yes.", "score": 91}),
        ],
        llama_cpp=True,
    )
    loop = create_loop_agent(
        FakeChat.of("dry haiku", "wet haiku"),
        llm_judge(judge_model(server), "Score.", threshold=75),
        3,
    )
    inputs = {"messages": [REQUEST]}
    with pytest.warns(UserWarning, match="Input should be 'text' or 'json_object'") as caught:
        result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    assert len([w for w in caught if "llm_judge" in str(w.message)]) == 1
    assert result["stop_reason"] == "accepted"
    assert [r["score"] for r in result["records"]] == [55.0, 91.0]
    assert [kind(r) for r in server.requests] == ["json_schema", "tools", "tools"]


def test_a_server_that_refuses_every_method_is_a_judge_error_naming_what_to_set():
    refused = {"json_schema": VLLM_OLD, "tools": OLLAMA_NO_TOOLS, "json_object": VLLM_XGRAMMAR}
    server = Refusing(list(VERDICTS), refused)
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, retries=2)
    with pytest.raises(JudgeError) as raised:
        judge.invoke(context())
    message = str(raised.value)
    assert "refused every structured-output method" in message
    assert "structured_output='text'" in message
    assert "does not support tools" in message
    assert "gave no usable verdict" not in message  # never hidden behind the parse retries
    assert len(raised.value.problems) == 3
    assert raised.value.iteration == 1
    assert [kind(r) for r in server.requests] == ["json_schema", "tools", "json_object"]


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_an_unrelated_server_error_is_raised_and_not_retried(call):
    server = ScriptedOpenAI([Fail(500, "CUDA error: out of memory"), *VERDICTS])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(openai.InternalServerError, match="out of memory"):
            judge.invoke(context()) if call == "invoke" else await judge.ainvoke(context())
        assert judge.invoke(context())["score"] == 82.0  # and the method is unchanged
    assert [kind(r) for r in server.requests] == ["json_schema", "json_schema"]


def test_refusal_reads_only_http_errors_with_the_servers_words():
    server = ScriptedOpenAI([Fail(500, "scripted server error")], llama_cpp=True)
    client = openai.OpenAI(
        api_key="k", base_url="https://scripted.invalid", http_client=server.client(), max_retries=0
    )
    errors = []
    for response_format in (
        {"type": "json_schema", "json_schema": {"name": "V", "schema": {}}},
        None,
    ):
        try:
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                **({"response_format": response_format} if response_format else {}),
            )
        except openai.InternalServerError as error:
            errors.append(error)
    refused, other = errors
    assert "'input': 'json_schema'" in (refusal(refused) or "")
    assert refusal(other) is None
    assert refusal(ValueError(LITERAL_ERROR)) is None  # no HTTP status: not a server's refusal
