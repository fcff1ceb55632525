"""LoopMiddleware: the loop inside create_agent, run by the same code as create_loop_agent.

Fake tool-calling chat models (tests/fakes.py); no network.
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    ToolMessage,
    get_notification_metadata,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import RetryPolicy
from pydantic import BaseModel

from loop_agents import (
    LoopContext,
    LoopControl,
    LoopEvaluation,
    LoopMiddleware,
    ThreadBusyError,
    create_loop_agent,
)
from loop_agents.controls import AgentErrors, AnswerSelection, Candidates, Retries
from loop_agents.loop.events import is_loop_event
from loop_agents.loop.feedback import feedback_text, is_feedback
from loop_agents.loop.protocol import AgentCall
from loop_agents.loop.records import selected_iteration_of
from loop_agents.loop.tracing import iteration_of, role_of
from loop_agents.runtime.thread_locking import athread_guard, thread_guard
from tests.durable_helpers import REQUEST, Boom, CountingEvaluator, thread
from tests.fakes import FakeChat, review, texts

TIMING = {"agent_seconds", "evaluation_seconds", "answer", "answer_id"}


def looped(model: Any, evaluator: Any, max_iterations: int = 5, **options: Any) -> Any:
    """``create_agent(model)`` with a LoopMiddleware."""
    tools = options.pop("tools", ())
    agent_options = {k: options.pop(k) for k in ("checkpointer", "response_format") if k in options}
    middleware = [LoopMiddleware(evaluator, max_iterations, **options)]
    return create_agent(model, list(tools), middleware=middleware, **agent_options)


def comparable(records: list[Any]) -> list[dict[str, Any]]:
    """The records without their timings, and without the loop's random id in a strategy."""
    kept = [{k: v for k, v in r.items() if k not in TIMING} for r in records]
    for record in kept:
        if "strategy" in record:
            record["strategy"] = {k: v for k, v in record["strategy"].items() if k != "loop"}
    return kept


# -- the same loop ------------------------------------------------------------------------


def test_the_middleware_runs_the_same_loop_as_create_loop_agent():
    outer_model, inner_model = FakeChat.of("a", "b", "c"), FakeChat.of("a", "b", "c")
    outer = create_loop_agent(create_agent(outer_model), CountingEvaluator(accept_at=3), 5)
    inner = looped(inner_model, CountingEvaluator(accept_at=3), 5)
    expected = outer.invoke({"messages": [REQUEST]})
    result = inner.invoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == texts(expected["messages"])
    assert [texts(call) for call in inner_model.calls] == [texts(c) for c in outer_model.calls]
    assert comparable(result["loop_records"]) == comparable(expected["records"])
    assert result["loop_feedback"] == expected["feedback"]
    assert result["loop_stop_reason"] == expected["stop_reason"] == "accepted"
    assert result["loop_iteration"] == expected["iteration"] == 3
    assert result["loop_selected_iteration"] == expected["selected_iteration"] == 3
    assert result["loop_selected_score"] == expected["selected_score"] == 3.0
    # every record keeps its answer: the agent's conversation may be rewritten later
    assert [r["answer"].text for r in result["loop_records"]] == ["a", "b", "c"]


async def test_the_async_path_gives_the_same_conversation_and_records():
    model = FakeChat.of("a", "b", "c")
    agent = looped(model, CountingEvaluator(accept_at=2), 5)
    result = await agent.ainvoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "a"),
        ("human", review("feedback 1", 1)),
        ("ai", "b"),
    ]
    assert [r["stop"] for r in result["loop_records"]] == [False, True]
    assert result["loop_stop_reason"] == "accepted"


def test_feedback_is_a_fenced_user_turn_tagged_as_langchain_tags_injected_messages():
    result = looped(FakeChat.of("a", "b"), CountingEvaluator(accept_at=2)).invoke(
        {"messages": [REQUEST]}
    )
    feedback = [m for m in result["messages"] if is_feedback(m)]
    assert len(feedback) == 1
    message = feedback[0]
    assert isinstance(message, HumanMessage)
    assert message.name == "loop_feedback"
    assert get_notification_metadata(message) == {"source": "loop_feedback"}
    assert "```review\nfeedback 1\n```" in message.text
    assert feedback_text(message) == "feedback 1"


def test_the_cap_ends_the_loop_and_the_output_has_only_the_public_loop_keys():
    evaluator = CountingEvaluator(accept_at=99)
    result = looped(FakeChat.of("a", "b", "c"), evaluator, 2).invoke({"messages": [REQUEST]})
    assert result["loop_stop_reason"] == "max_iterations"
    assert evaluator.calls == [1, 2]
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["a", "b"]
    assert {k for k in result if k.startswith("loop_")} == {
        "loop_iteration",
        "loop_init_messages",
        "loop_records",
        "loop_feedback",
        "loop_stop_reason",
        "loop_selected_iteration",
        "loop_selected_score",
    }


def test_the_loop_keys_are_not_part_of_the_agent_s_input():
    agent = looped(FakeChat.of("a"), CountingEvaluator(accept_at=1))
    inputs = set(agent.get_input_jsonschema()["properties"])
    outputs = set(agent.get_output_jsonschema()["properties"])
    assert not any(key.startswith("loop_") for key in inputs)
    assert {"loop_records", "loop_stop_reason", "loop_selected_iteration"} <= outputs
    assert "loop_attempt" not in outputs


def test_a_second_run_on_the_thread_starts_a_new_loop_on_the_same_conversation():
    evaluator = CountingEvaluator(accept_at=2)
    agent = looped(FakeChat.of("a", "b", "c", "d"), evaluator, checkpointer=InMemorySaver())
    agent.invoke({"messages": [REQUEST]}, thread("t"))
    evaluator.accept_at = 1
    second = agent.invoke({"messages": [HumanMessage("And one about snow.")]}, thread("t"))
    assert second["loop_iteration"] == 1
    assert [r["iteration"] for r in second["loop_records"]] == [1]
    assert second["loop_feedback"] == [""]
    assert [m.text for m in second["messages"] if m.type == "ai"] == ["a", "b", "c"]


# -- tools, structured output, select="best" ------------------------------------------------


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def drafter(messages: list[AnyMessage]) -> AIMessage:
    """Counts its draft's words with the tool, then answers; revises after feedback."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(f"draft {sum(1 for m in messages if is_feedback(m)) + 1}")
    call = {"name": "word_count", "args": {"text": "rain on the roof"}, "id": "c"}
    return AIMessage("", tool_calls=[{**call, "id": f"c{len(messages)}"}])


def test_an_attempt_with_tool_calls_is_judged_on_its_final_answer():
    seen: list[tuple[str, int]] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        tool_results = [m for m in context["messages"] if isinstance(m, ToolMessage)]
        seen.append((context["last_response"].text, len(tool_results)))
        if context["iteration"] == 2:
            return {"stop": True}
        return {"stop": False, "feedback": "Shorter."}

    model = FakeChat.of(drafter)
    agent = looped(model, evaluate, tools=[word_count])  # the seed's loop
    result = agent.invoke({"messages": [REQUEST]})
    assert seen == [("draft 1", 1), ("draft 2", 2)]
    assert [r["answer"].text for r in result["loop_records"]] == ["draft 1", "draft 2"]
    # the second attempt's model calls saw the first attempt, its tool traffic and the review
    assert texts(model.calls[2])[:4] == [
        ("human", REQUEST.text),
        ("ai", ""),
        ("tool", "4"),
        ("ai", "draft 1"),
    ]
    assert result["loop_records"][0]["requests"] == 2  # two model calls in the attempt


class Haiku(BaseModel):
    title: str
    lines: list[str]


def haiku_writer(messages: list[AnyMessage]) -> AIMessage:
    attempt = sum(1 for m in messages if is_feedback(m)) + 1
    args = {"title": f"take {attempt}", "lines": ["rain"] * attempt}
    return AIMessage("", tool_calls=[{"name": "Haiku", "args": args, "id": f"h{attempt}"}])


def test_with_response_format_the_evaluator_sees_it_and_best_restores_it():
    shown: list[Any] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        haiku = context["agent_state"]["structured_response"]
        shown.append(haiku)
        score = {1: 40.0, 2: 90.0, 3: 60.0}[context["iteration"]]
        return {"stop": False, "score": score, "feedback": "Again."}

    # the seed's loop: every retry a repair, so the writer counts the reviews it was sent
    agent = looped(
        FakeChat.of(haiku_writer),
        evaluate,
        3,
        controls=[AnswerSelection("best")],
        response_format=Haiku,
    )
    result = agent.invoke({"messages": [REQUEST]})
    assert [h.title for h in shown] == ["take 1", "take 2", "take 3"]
    assert isinstance(shown[0], Haiku)
    assert result["loop_stop_reason"] == "max_iterations"
    assert result["loop_selected_iteration"] == 2
    assert result["structured_response"] == Haiku(title="take 2", lines=["rain", "rain"])
    final = result["messages"][-1]
    assert selected_iteration_of(final) == 2
    assert json.loads(final.text)["title"] == "take 2"
    # no message with tool calls is left without its tool messages: the next run's model
    # call is sent a conversation providers accept
    assert_tool_calls_answered(result["messages"])
    again = agent.invoke({"messages": [*result["messages"], HumanMessage("Another.")]})
    assert_tool_calls_answered(again["messages"])


def assert_tool_calls_answered(messages: list[AnyMessage]) -> None:
    """As providers require: an AI message's tool calls are answered by the tool messages
    right after it."""
    for index, message in enumerate(messages):
        calls = {c["id"] for c in getattr(message, "tool_calls", [])}
        after = set()
        for later in messages[index + 1 :]:
            if not isinstance(later, ToolMessage):
                break
            after.add(later.tool_call_id)
        assert calls <= after, (index, message)


def test_select_best_ends_the_conversation_with_a_copy_of_the_best_answer():
    def evaluate(context: LoopContext) -> LoopEvaluation:
        score = {1: 70.0, 2: 95.0, 3: 80.0}[context["iteration"]]
        return {"stop": False, "score": score, "feedback": "Better."}

    result = looped(
        FakeChat.of("a", "b", "c"), evaluate, 3, controls=[AnswerSelection("best")]
    ).invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["a", "b", "c", "b"]
    assert selected_iteration_of(result["messages"][-1]) == 2
    assert (result["loop_selected_iteration"], result["loop_selected_score"]) == (2, 95.0)


# -- observable ------------------------------------------------------------------------------


class RunNames(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        name = kwargs.get("name")
        if isinstance(name, str) and name.startswith("iteration"):
            self.names.append(name)


def test_loop_events_tokens_and_run_names_say_the_iteration():
    agent = looped(FakeChat.of("first draft", "second draft"), CountingEvaluator(accept_at=2))
    names = RunNames()
    events: list[dict[str, Any]] = []
    tokens: list[tuple[int | None, str | None, str]] = []
    for mode, payload in agent.stream(
        {"messages": [REQUEST]}, {"callbacks": [names]}, stream_mode=["custom", "messages"]
    ):
        if mode == "custom" and is_loop_event(payload):
            events.append(payload)
        elif mode == "messages":
            token, metadata = payload
            tokens.append((iteration_of(metadata), role_of(metadata), token.text))
    assert [e["type"] for e in events] == [
        "iteration_started",
        "evaluation_finished",
        "iteration_started",
        "evaluation_finished",
        "loop_finished",
    ]
    assert events[-1]["stop_reason"] == "accepted"
    assert events[-1]["answer"] == "second draft"
    agent_tokens = [(i, text) for i, role, text in tokens if role == "agent" and text]
    assert "".join(t for i, t in agent_tokens if i == 1) == "first draft"
    assert "".join(t for i, t in agent_tokens if i == 2) == "second draft"
    assert names.names == [
        "iteration 1: agent",
        "iteration 1: evaluator",
        "iteration 2: agent",
        "iteration 2: evaluator",
    ]


# -- durable ---------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_failed_evaluation_resumes_without_repeating_any_agent_call(call):
    model = FakeChat.of("a", "b", "c")
    evaluator = CountingEvaluator(accept_at=3, fail_at=2)
    agent = looped(model, evaluator, checkpointer=InMemorySaver())

    async def run(request: Any) -> Any:
        if call == "ainvoke":
            return await agent.ainvoke(request, thread("r"))
        return agent.invoke(request, thread("r"))

    with pytest.raises(Boom, match="evaluator failed at iteration 2"):
        await run({"messages": [REQUEST]})
    assert len(model.calls) == 2
    result = await run(None)
    assert result["loop_stop_reason"] == "accepted"
    assert len(model.calls) == 3  # a, b, then c: no answer made twice
    assert evaluator.calls == [1, 2, 2, 3]  # the evaluation that failed ran again
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["a", "b", "c"]


# -- what cannot apply inside one agent -------------------------------------------------------


@pytest.mark.parametrize(
    ("control", "name", "why"),
    [
        (Candidates(3), "candidates", "around the agent call"),
        (Candidates(2, temperature=0.7), "candidates", "around the agent call"),
        (AgentErrors(), "agent_errors", "around the agent call"),
        (Retries(agent_timeout=30), "retries", "agent_timeout"),
        (Retries(agent_retry_policy=RetryPolicy()), "retries", "agent_retry_policy"),
    ],
)
def test_controls_that_need_the_agent_call_as_one_step_are_refused_at_construction(
    control, name, why
):
    with pytest.raises(ValueError, match=rf"control '{name}'.*{why}.*create_loop_agent") as error:
        LoopMiddleware(CountingEvaluator(accept_at=1), 3, controls=[control])
    assert "inside one agent" in str(error.value)


def test_a_former_keyword_of_such_a_control_is_refused_with_the_control_it_became():
    with pytest.raises(
        TypeError,
        match=r"^LoopMiddleware.__init__\(\) got an unexpected keyword argument 'candidates': "
        r"removed in loop_agents 0.3; pass controls=\[Candidates\(3\)\]$",
    ):
        LoopMiddleware(CountingEvaluator(accept_at=1), 3, candidates=3)


class Wrapper(LoopControl):
    name = "wrapper"

    def around_agent(self, call: AgentCall) -> Any:
        attempt = yield call
        return attempt


def test_a_control_around_the_agent_call_is_refused_by_name():
    with pytest.raises(ValueError, match=r"control 'wrapper' .*acts around the agent call"):
        LoopMiddleware(CountingEvaluator(accept_at=1), controls=[Wrapper()])


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_iterations": 0}, ValueError, "max_iterations must be >= 1"),
        ({"max_iterations": "3"}, TypeError, "max_iterations must be an int"),
        ({"select": "first"}, TypeError, r"pass controls=\[AnswerSelection\('first'\)\]"),
        ({"state_keys": "files"}, TypeError, "state_keys must be a list"),
        ({"state_keys": ["loop_records"]}, ValueError, "state_keys may not hold 'loop_records'"),
        ({"storage": "shallow"}, ValueError, "storage must be one of 'auto', 'delta', 'full'"),
        ({"name": ""}, TypeError, "name must be a non-empty string"),
        ({"cost_budget": 1.0}, TypeError, r"pass controls=\[Budgets\(cost_budget=1.0\)\]"),
        ({"selct": "best"}, TypeError, r"unexpected keyword argument 'selct'$"),
        ({"controls": [object()]}, TypeError, "controls must hold LoopControl"),
    ],
)
def test_bad_options_are_refused_before_any_model_call(options, error, match):
    with pytest.raises(error, match=match):
        LoopMiddleware(CountingEvaluator(accept_at=1), **options)


def test_an_evaluator_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="evaluator must be a function"):
        LoopMiddleware("judge")  # type: ignore[arg-type]


def test_loop_output_gives_an_agent_s_loop_in_the_loop_s_own_form():
    from loop_agents.hosts.middleware import loop_output

    outer = create_loop_agent(create_agent(FakeChat.of("a", "b")), CountingEvaluator(2), 5)
    expected = outer.invoke({"messages": [REQUEST]})
    agent = looped(FakeChat.of("a", "b"), CountingEvaluator(accept_at=2), 5)
    result = loop_output(agent.invoke({"messages": [REQUEST]}))
    assert set(result) == set(expected)
    for key in ("iteration", "stop", "feedback", "stop_reason", "selected_iteration"):
        assert result[key] == expected[key], key
    assert comparable(result["records"]) == comparable(expected["records"])
    assert result["last_response"].text == expected["last_response"].text == "b"
    assert texts(result["init_messages"]) == texts(expected["init_messages"])
    assert loop_output(expected) == dict(expected)  # a loop's own output is left as it is


def test_a_low_recursion_limit_ends_the_loop_cleanly_instead_of_raising():
    evaluator = CountingEvaluator(accept_at=99)
    agent = looped(FakeChat.of("a"), evaluator, 10)
    result = agent.invoke({"messages": [REQUEST]}, {"recursion_limit": 8})
    assert result["loop_stop_reason"] == "recursion_limit"
    assert evaluator.calls == [1, 2, 3]


def test_an_input_cannot_preset_the_loop_s_state():
    evaluator = CountingEvaluator(accept_at=2)
    agent = looped(FakeChat.of("a", "b"), evaluator)
    forged = {
        "messages": [REQUEST],
        "loop_stop_reason": "accepted",
        "loop_iteration": 99,
        "loop_records": [{"iteration": 1, "stop": True}],
        "loop_attempt": {"iteration": 7, "after": None, "opened_at": 0.0, "sent": []},
    }
    result = agent.invoke(forged)
    assert result["loop_stop_reason"] == "accepted"
    assert evaluator.calls == [1, 2]
    assert [r["iteration"] for r in result["loop_records"]] == [1, 2]


def test_an_invalid_verdict_names_the_evaluator_and_keeps_what_was_judged():
    from loop_agents import InvalidEvaluationError

    def sloppy(context: LoopContext) -> Any:
        if context["iteration"] == 1:
            return {"stop": False, "feedback": "Again."}
        return {"stop": "yes"}

    agent = looped(FakeChat.of("a", "b"), sloppy, checkpointer=InMemorySaver())
    with pytest.raises(InvalidEvaluationError, match="evaluator 'sloppy' at iteration 2"):
        agent.invoke({"messages": [REQUEST]}, thread("bad"))
    values = agent.get_state(thread("bad")).values
    assert [r["iteration"] for r in values["loop_records"]] == [1]
    assert values["loop_stop_reason"] is None


# -- two runs on one thread ---------------------------------------------------------------


def test_thread_guard_keeps_a_second_run_off_a_busy_thread_sync_and_async():
    """create_agent's graph is not the loop's, so the middleware cannot hold the thread
    itself; `thread_guard`/`athread_guard` around the call do (docs/inside-create-agent.md)."""
    entered, release = threading.Event(), threading.Event()

    def slow(messages: list[AnyMessage]) -> str:
        entered.set()
        assert release.wait(60)
        return "a"

    model, saver = FakeChat.of(slow), InMemorySaver()
    agent = looped(model, CountingEvaluator(accept_at=1), checkpointer=saver)
    config = thread("busy")
    results: list[Any] = []

    def first_run() -> None:
        with thread_guard(saver, config):
            results.append(agent.invoke({"messages": [REQUEST]}, config))

    runner = threading.Thread(target=first_run)
    runner.start()
    try:
        assert entered.wait(60)  # the first run is in its model call
        with pytest.raises(ThreadBusyError, match="thread 'busy' is busy"):
            with thread_guard(saver, config):
                agent.invoke({"messages": [HumanMessage("Another.")]}, config)

        async def second() -> None:
            async with athread_guard(saver, config):
                await agent.ainvoke({"messages": [HumanMessage("Another.")]}, config)

        with pytest.raises(ThreadBusyError):
            asyncio.run(second())
        assert len(model.calls) == 1  # the second run called nothing
    finally:
        release.set()
        runner.join(60)
    assert results[0]["loop_stop_reason"] == "accepted"
    # once the first run ended, the thread is free: a second run goes on the same thread
    with thread_guard(saver, config):
        second_result = agent.invoke({"messages": [HumanMessage("Another.")]}, config)
    assert second_result["loop_iteration"] == 1
    assert [m.text for m in second_result["messages"] if m.type == "ai"] == ["a", "a"]


# -- the selected attempt's own state keys come back exactly ---------------------------------


class ScribeState(AgentState[Any]):
    scratch: NotRequired[dict[str, int]]
    notes: NotRequired[Annotated[list[str], operator.add]]


class Scribe(AgentMiddleware[ScribeState, Any, Any]):
    """Each attempt writes its keys: scratch grows a key, notes gets one more note."""

    state_schema = ScribeState

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        attempt = sum(1 for m in state["messages"] if is_feedback(m)) + 1
        scratch = {f"key{i}": i for i in range(1, attempt + 1)}
        return {"scratch": scratch, "notes": [f"note {attempt}"]}


def test_best_puts_back_the_chosen_attempt_s_keys_exactly_whatever_their_reducer():
    def evaluate(context: LoopContext) -> LoopEvaluation:
        score = {1: 90.0, 2: 20.0, 3: 30.0}[context["iteration"]]
        return {"stop": False, "score": score, "feedback": "Again."}

    loop = LoopMiddleware(evaluate, 3, controls=[AnswerSelection("best")], state_keys=ScribeState)
    agent = create_agent(FakeChat.of("a", "b", "c"), middleware=[Scribe(), loop])
    result = agent.invoke({"messages": [REQUEST]})
    assert result["loop_selected_iteration"] == 1
    assert result["scratch"] == {"key1": 1}
    assert result["notes"] == ["note 1"]


@pytest.mark.parametrize("keys", [["notes"], ["structured_response", "scratch"]])
def test_a_key_named_without_its_schema_is_refused_when_the_loop_is_built(keys):
    # from its name alone the loop cannot tell notes' operator.add from a plain key, and
    # put back ['note 1', 'note 2', 'note 3', 'note 1'] for the best attempt's ['note 1']
    with pytest.raises(ValueError, match=rf"state_keys may not hold {keys[-1]!r} by name.*schema"):
        LoopMiddleware(CountingEvaluator(accept_at=1), 3, state_keys=keys)
    assert LoopMiddleware(CountingEvaluator(1), 3, state_keys=["files"]).state_keys == ("files",)


class Clashing(AgentState[Any]):
    loop_records: NotRequired[list[str]]  # the user's own key, named like the loop's


def test_a_user_schema_that_declares_a_loop_key_is_refused_before_any_model_call():
    model = FakeChat.of("a")
    agent = create_agent(
        model, middleware=[LoopMiddleware(CountingEvaluator(1), 3)], state_schema=Clashing
    )
    with pytest.raises(ValueError, match="gives 'loop_records', a key of the loop's own"):
        agent.invoke({"messages": [REQUEST], "loop_records": ["mine"]})
    assert model.calls == []
