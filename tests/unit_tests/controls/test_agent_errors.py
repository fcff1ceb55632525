"""Errors as feedback: model-caused agent failures become feedback; infrastructure errors retry."""

from __future__ import annotations

import httpx
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import ToolException
from pydantic import BaseModel

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AgentErrors, History, Retries
from loop_agents.controls.agent_errors import (
    answer_problem,
    default_retry_policy,
    failure_feedback,
    is_model_error,
    is_transient_error,
)
from loop_agents.loop.feedback import feedback_text, is_feedback
from loop_agents.loop.records import record_answer
from tests.fakes import FakeChat, review

REQUEST = HumanMessage("Give the release as JSON.")


class Release(BaseModel):
    name: str
    version: int


def accept(context: LoopContext) -> LoopEvaluation:
    return {"stop": True, "score": 1}


def json_agent(model: FakeChat):
    """An agent whose answer must validate as a `Release` (a structured-output agent)."""

    def agent(messages: list[AnyMessage]) -> AIMessage:
        reply = model.invoke(messages)
        Release.model_validate_json(reply.text)  # raises ValidationError on a bad answer
        return reply

    async def aagent(messages: list[AnyMessage]) -> AIMessage:
        reply = await model.ainvoke(messages)
        Release.model_validate_json(reply.text)
        return reply

    return agent, aagent


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_validation_error_becomes_feedback(call):
    model = FakeChat.of('{"name": "Aurora", "version": "two"}', '{"name": "Aurora", "version": 2}')
    agent, aagent = json_agent(model)
    loop = create_loop_agent(
        agent if call == "invoke" else aagent, accept, 3, controls=[AgentErrors("feedback")]
    )
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    assert (result["stop_reason"], result["iteration"]) == ("accepted", 2)
    failed, answered = result["records"]
    assert failed["answer_id"] is None
    assert failed["error"].startswith("ValidationError:")
    assert "version" in failed["error"]
    assert failed["feedback_from"] == "agent_error"
    assert failed["feedback"] == failure_feedback(failed["error"])
    # the second call read the error, fenced like any feedback, and no failed answer
    sent = model.calls[1]
    assert [m.type for m in sent] == ["human", "human"]
    assert is_feedback(sent[-1])
    assert sent[-1].text == review(failed["feedback"], 1)
    assert feedback_text(sent[-1]) == failed["feedback"]
    assert record_answer(answered, result).text == '{"name": "Aurora", "version": 2}'
    with pytest.raises(KeyError, match="its agent call failed"):
        record_answer(failed, result)


def test_tool_errors_and_refusals_are_fed_back():
    calls = iter(
        [
            ToolException("no such file: notes.txt"),
            AIMessage("", additional_kwargs={"refusal": "I can't share that."}),
            AIMessage(
                "",
                invalid_tool_calls=[
                    {
                        "name": "read",
                        "args": "{oops",
                        "id": "1",
                        "error": None,
                        "type": "invalid_tool_call",
                    }
                ],
            ),
            "done",
        ]
    )

    def agent(messages: list[AnyMessage]) -> object:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    loop = create_loop_agent(
        agent, accept, 5, controls=[AgentErrors("feedback", max_agent_errors=5)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    errors = [r.get("error") for r in result["records"]]
    assert errors[0] == "ToolException: no such file: notes.txt"
    assert errors[1] == "the model refused: I can't share that."
    assert errors[2].startswith("the tool call 'read' is malformed")
    assert errors[3] is None
    assert result["last_response"].text == "done"
    # the failed answers are not in the conversation
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["done"]


def test_infrastructure_errors_are_retried_and_use_no_iteration():
    attempts = 0

    def agent(messages: list[AnyMessage]) -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise httpx.ConnectError("connection refused")
        return "answer"

    loop = create_loop_agent(
        agent,
        accept,
        3,
        controls=[
            AgentErrors("feedback"),
            Retries(agent_retry_policy=default_retry_policy(initial_interval=0.01)),
        ],
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert attempts == 3
    assert result["iteration"] == 1
    assert "error" not in result["records"][0]


def test_infrastructure_errors_and_bugs_are_never_feedback():
    def unreachable(messages: list[AnyMessage]) -> str:
        raise httpx.ConnectError("connection refused")

    loop = create_loop_agent(unreachable, accept, 3, controls=[AgentErrors("feedback")])
    with pytest.raises(httpx.ConnectError):
        loop.invoke({"messages": [REQUEST]})

    def buggy(messages: list[AnyMessage]) -> str:
        return {}["missing"]

    loop = create_loop_agent(buggy, accept, 3, controls=[AgentErrors("feedback")])
    with pytest.raises(KeyError):
        loop.invoke({"messages": [REQUEST]})
    # and with the default, a model-caused error still ends the loop
    model = FakeChat.of("not json")
    agent, _ = json_agent(model)
    with pytest.raises(ValueError, match="validation error"):
        create_loop_agent(agent, accept, 3).invoke({"messages": [REQUEST]})


def test_uncounted_failures_and_the_limit_in_a_row():
    outcomes = iter([ToolException("a"), ToolException("b"), "fine"])

    def agent(messages: list[AnyMessage]) -> str:
        item = next(outcomes)
        if isinstance(item, Exception):
            raise item
        return item

    def again(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "more"}

    loop = create_loop_agent(
        agent, again, 1, controls=[AgentErrors("feedback", count_failed_attempts=False)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("max_iterations", 3)
    assert [r.get("counted") for r in result["records"]] == [False, False, None]
    assert result["last_response"].text == "fine"

    def always_failing(messages: list[AnyMessage]) -> str:
        raise ToolException("broken tool")

    loop = create_loop_agent(
        always_failing, again, 100, controls=[AgentErrors("feedback", max_agent_errors=4)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("agent_errors", 4)
    assert result["selected_iteration"] is None
    assert "last_response" not in result


def test_a_failure_after_an_answer_keeps_the_answer_as_the_loop_s():
    outcomes = iter(["first draft", ToolException("oops")])

    def agent(messages: list[AnyMessage]) -> str:
        item = next(outcomes)
        if isinstance(item, Exception):
            raise item
        return item

    def again(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "more", "score": 3}

    loop = create_loop_agent(
        agent, again, 2, controls=[History("last_attempt"), AgentErrors("feedback")]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "max_iterations"
    assert result["selected_iteration"] == 1
    assert result["last_response"].text == "first draft"
    assert result["messages"][-1].text == "first draft"  # a marked copy ends the conversation


def test_classification_and_option_errors():
    assert is_model_error(ToolException("x"))
    assert not is_model_error(httpx.ReadTimeout("slow"))
    assert is_transient_error(httpx.ReadTimeout("slow"))
    request = httpx.Request("POST", "http://127.0.0.1/v1")
    for status, transient in ((429, True), (503, True), (400, False)):
        error = httpx.HTTPStatusError(
            "x", request=request, response=httpx.Response(status, request=request)
        )
        assert is_transient_error(error) is transient
    assert answer_problem([AIMessage("fine")]) is None
    blocks = AIMessage(content=[{"type": "refusal", "refusal": "No."}])
    assert answer_problem([blocks]) == "the model refused: No."
    agent = FakeChat.of("a")
    with pytest.raises(ValueError, match="on_agent_error must be 'raise'"):
        create_loop_agent(agent, accept, controls=[AgentErrors("ignore")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count_failed_attempts=False applies"):
        create_loop_agent(
            agent, accept, controls=[AgentErrors("raise", count_failed_attempts=False)]
        )
    with pytest.raises(ValueError, match="loop forever"):
        create_loop_agent(
            agent,
            accept,
            controls=[AgentErrors("feedback", count_failed_attempts=False, max_agent_errors=None)],
        )
    with pytest.raises(ValueError, match="max_agent_errors must be >= 1"):
        create_loop_agent(agent, accept, controls=[AgentErrors("feedback", max_agent_errors=0)])
    with pytest.raises(ValueError, match="max_attempts must be an int >= 1"):
        default_retry_policy(0)


@pytest.mark.parametrize("call", ["stream", "astream"])
async def test_a_failed_attempt_is_an_agent_failed_event(call):
    model = FakeChat.of('{"name": "Aurora", "version": "two"}', '{"name": "Aurora", "version": 2}')
    agent, aagent = json_agent(model)
    loop = create_loop_agent(
        agent if call == "stream" else aagent, accept, 3, controls=[AgentErrors("feedback")]
    )
    inputs = {"messages": [REQUEST]}
    if call == "stream":
        events = list(loop.stream(inputs, stream_mode="custom"))
    else:
        events = [e async for e in loop.astream(inputs, stream_mode="custom")]
    failed = [e for e in events if e["type"] == "agent_failed"]
    assert len(failed) == 1
    assert failed[0]["iteration"] == 1
    assert failed[0]["error"].startswith("ValidationError:")
    # the failed attempt gives no answer; its error is the iteration's feedback
    assert [e["type"] for e in events] == [
        "iteration_started",
        "agent_failed",
        "evaluation_finished",
        "iteration_started",
        "agent_finished",
        "evaluation_finished",
        "loop_finished",
    ]
