"""loop_as_tool: a loop offered to a tool-calling agent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.loop.events import is_loop_event
from loop_agents_cli.models.settings import ModelSettings
from loop_agents_cli.serving.tool import loop_as_tool
from tests.fakes import FakeChat
from tests.scripted_openai import ScriptedOpenAI, Structured

DESCRIPTION = "Write a haiku and revise it until the haiku judge accepts it."


def until(n: int):
    def judge(context: LoopContext) -> LoopEvaluation:
        return {
            "stop": context["iteration"] >= n,
            "feedback": f"judge {context['iteration']}",
            "score": 10.0 * context["iteration"],
        }

    return judge


def never(context: LoopContext) -> LoopEvaluation:
    return {"stop": False, "feedback": f"still weak after {context['iteration']}"}


def call(request: str) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": "haiku", "args": {"request": request}, "id": "call-1"}]
    )


def haiku_tool(judge=None, max_iterations: int = 3, **options: Any):
    poet = FakeChat.of(*(f"haiku {i}" for i in range(1, 1001)))
    loop = create_loop_agent(poet, judge or until(2), max_iterations, name="haiku_loop", **options)
    return poet, loop_as_tool(loop, name="haiku", description=DESCRIPTION)


def tool_message(result: dict[str, Any]) -> ToolMessage:
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return message


def test_agent_calls_the_loop_and_gets_its_final_answer():
    poet, haiku = haiku_tool()
    chat = FakeChat.of(call("A haiku about rain."), "Here is your haiku.")
    result = create_agent(chat, [haiku]).invoke({"messages": [HumanMessage("Rain haiku?")]})

    # the loop ran on the request the model wrote, alone
    assert [m.text for m in poet.calls[0]] == ["A haiku about rain."]
    assert len(poet.calls) == 2
    message = tool_message(result)
    assert message.name == "haiku"
    assert message.content == "haiku 2"
    assert message.artifact == {
        "stop_reason": "accepted",
        "iteration": 2,
        "scores": [10.0, 20.0],
        "feedback": ["judge 1", "judge 2"],
    }
    # the calling model read the tool's result, then answered
    assert chat.calls[1][-1].content == "haiku 2"
    assert result["messages"][-1].text == "Here is your haiku."


def test_name_description_and_argument_reach_the_model():
    _, haiku = haiku_tool()
    server = ScriptedOpenAI([Structured({"request": "A haiku about snow."}), "Done."])
    model = ModelSettings(api_key="sk-test").chat_model(http_client=server.client())
    result = create_agent(model, [haiku]).invoke({"messages": [HumanMessage("Snow haiku?")]})

    offered = server.requests[0]["tools"][0]["function"]
    assert offered["name"] == "haiku"
    assert offered["description"] == DESCRIPTION
    assert offered["parameters"]["required"] == ["request"]
    assert list(offered["parameters"]["properties"]) == ["request"]
    assert tool_message(result).content == "haiku 2"
    assert server.requests[1]["messages"][-1] == {
        "role": "tool",
        "content": "haiku 2",
        "tool_call_id": "call_1",
    }


def test_unaccepted_answer_is_flagged_to_the_calling_model():
    _, haiku = haiku_tool(never, max_iterations=2)
    chat = FakeChat.of(call("A haiku about rain."), "Sorry.")
    message = tool_message(create_agent(chat, [haiku]).invoke({"messages": [HumanMessage("?")]}))
    assert message.content == (
        "haiku 2\n\n[Not accepted by the evaluator: the loop stopped (max_iterations) after "
        "2 attempt(s). Last feedback: still weak after 2]"
    )
    assert message.artifact["stop_reason"] == "max_iterations"


def test_calling_agents_recursion_limit_ends_the_loop_cleanly():
    _, haiku = haiku_tool(never, max_iterations=50)
    chat = FakeChat.of(call("A haiku about rain."), "Best I could do.")
    result = create_agent(chat, [haiku]).invoke(
        {"messages": [HumanMessage("?")]}, {"recursion_limit": 12}
    )
    message = tool_message(result)
    assert message.artifact["stop_reason"] == "recursion_limit"
    assert 1 <= message.artifact["iteration"] < 50
    assert "the loop stopped (recursion_limit)" in message.content
    assert result["messages"][-1].text == "Best I could do."


async def test_async_agent_with_an_async_loop():
    async def judge(context: LoopContext) -> LoopEvaluation:
        await asyncio.sleep(0)
        return until(3)(context)

    _, haiku = haiku_tool(judge)
    chat = FakeChat.of(call("A haiku about rain."), "Done.")
    result = await create_agent(chat, [haiku]).ainvoke({"messages": [HumanMessage("?")]})
    assert tool_message(result).content == "haiku 3"
    # the sync form says what to use instead
    with pytest.raises(TypeError, match=r"evaluator 'judge' is async; .*ainvoke"):
        haiku.invoke({"request": "x"})


async def test_loop_tokens_and_events_stream_under_the_tool_namespace():
    _, haiku = haiku_tool()
    chat = FakeChat.of(call("A haiku about rain."), "Done.")
    agent = create_agent(chat, [haiku])
    chunks = [
        chunk
        async for chunk in agent.astream(
            {"messages": [HumanMessage("?")]}, stream_mode=["messages", "custom"], subgraphs=True
        )
    ]
    tokens = "".join(
        data[0].text
        for ns, mode, data in chunks
        if mode == "messages" and data[1]["langgraph_node"] == "invoke_agent"
    )
    assert tokens == "haiku 1haiku 2"
    namespaces = {
        ns[0].split(":")[0] for ns, mode, data in chunks if mode == "custom" and is_loop_event(data)
    }
    assert namespaces == {"tools"}
    finished = [
        data for _, mode, data in chunks if mode == "custom" and data["type"] == "loop_finished"
    ]
    assert [(e["loop"], e["stop_reason"]) for e in finished] == [("haiku_loop", "accepted")]


def test_messages_only_loop_as_a_tool():
    _, haiku = haiku_tool(output_mode="last_message")
    message = haiku.invoke(
        {"type": "tool_call", "name": "haiku", "args": {"request": "rain"}, "id": "c9"}
    )
    assert isinstance(message, ToolMessage)
    assert (message.content, message.artifact) == ("haiku 2", {})


def test_direct_call_returns_the_answer_text():
    _, haiku = haiku_tool()
    assert haiku.invoke({"request": "rain"}) == "haiku 2"


def test_bad_arguments():
    loop = create_loop_agent(FakeChat.of("x"), until(1))
    with pytest.raises(TypeError, match=r"needs a compiled loop .*got RunnableLambda"):
        loop_as_tool(RunnableLambda(lambda x: x), name="t", description="d")  # type: ignore[arg-type]
    for name in ["", "has space", "x" * 65, None]:
        with pytest.raises(ValueError, match="letters, digits"):
            loop_as_tool(loop, name=name, description="d")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tool 'refine' needs a description \(got '  '\)"):
        loop_as_tool(loop, name="refine", description="  ")
