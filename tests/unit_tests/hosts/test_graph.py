"""create_loop_agent: graph shape, agent kinds, loop rules, input forms, errors, call styles."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, get_type_hints

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from loop_agents import (
    InvalidEvaluationError,
    LoopContext,
    LoopEvaluation,
    LoopState,
    create_loop_agent,
)
from loop_agents.controls import Adaptive, AnswerSelection, Budgets, Candidates, History
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import record_answer
from tests.fakes import FakeChat, review, texts

REQUEST = HumanMessage("Write a haiku about rain.")


def until(n: int, *, score: bool = False):
    """An evaluator that accepts the n-th answer and asks for more before."""

    def evaluate(context: LoopContext) -> LoopEvaluation:
        verdict: LoopEvaluation = {
            "stop": context["iteration"] >= n,
            "feedback": f"feedback {context['iteration']}",
        }
        if score:
            verdict["score"] = context["iteration"] * 10
        return verdict

    return evaluate


def never(context: LoopContext) -> LoopEvaluation:
    return {"stop": False, "feedback": f"again after {context['iteration']}"}


def numbered_chat() -> FakeChat:
    return FakeChat.of(*(f"answer {i}" for i in range(1, 1001)))


# -- shape ---------------------------------------------------------------------------


def test_graph_shape():
    loop = create_loop_agent(numbered_chat(), until(1))
    drawn = loop.get_graph()
    assert set(drawn.nodes) == {"__start__", "invoke_agent", "evaluate", "__end__"}
    edges = {(e.source, e.target, e.conditional) for e in drawn.edges}
    assert edges == {
        ("__start__", "invoke_agent", False),
        ("invoke_agent", "evaluate", False),
        ("evaluate", "invoke_agent", True),
        ("evaluate", "__end__", True),
    }
    assert loop.name == "loop_agent"
    assert create_loop_agent(numbered_chat(), until(1), name="poet").name == "poet"


def test_each_node_reads_only_the_state_keys_it_uses():
    def read_keys(loop: Any, node: str) -> set[str]:
        return set(get_type_hints(loop.graph.builder.nodes[node].input_schema))

    plain = create_loop_agent(numbered_chat(), until(1))  # the seed's loop
    assert read_keys(plain, "invoke_agent") == {
        "messages",
        "init_messages",
        "iteration",
        "last_response",
        "stop_reason",
        "loop_init_ids",
    }  # not the history policy's memory, nor a graph agent's state: unused, and an empty
    # channel costs LangGraph an exception at each read
    graph_agent = create_loop_agent(create_agent(numbered_chat()), until(1))
    assert "agent_state" in read_keys(graph_agent, "invoke_agent")  # given back to the graph
    evaluate = read_keys(plain, "evaluate")
    assert {"messages", "feedback", "records", "agent_run", "remaining_steps"} <= evaluate
    assert not evaluate & {"stop", "selected_iteration", "started_at", "candidate_runs"}
    # a strategy (Adaptive) reads the records and feedback to build a retry
    assert {"feedback", "records"} <= read_keys(
        create_loop_agent(numbered_chat(), until(1), controls=[Adaptive()]), "invoke_agent"
    )
    # controls that need more get it: history (Turn), time budget, best-of, candidates
    full = create_loop_agent(
        numbered_chat(),
        until(1),
        controls=[
            History("last_attempt"),
            Candidates(2),
            Budgets(time_budget=60),
            AnswerSelection("best"),
        ],
        output_mode="last_message",
    )
    assert {"feedback", "records", "history_memory"} <= read_keys(full, "invoke_agent")
    assert {"started_at", "attempt_states", "candidate_runs", "loop_init_ids"} <= read_keys(
        full, "evaluate"
    )


def test_state_reducers():
    hints = get_type_hints(LoopState, include_extras=True)
    messages = hints["messages"]
    messages = (getattr(messages, "__metadata__", None) and messages) or messages.__args__[0]
    assert messages.__metadata__[0] is add_messages
    assert hints["iteration"].__metadata__[0] is operator.add
    assert hints["feedback"].__metadata__[0] is operator.add
    assert hints["iteration"].__origin__ is int
    assert hints["feedback"].__origin__ == list[str]


def test_output_keys():
    result = create_loop_agent(numbered_chat(), until(2)).invoke({"messages": [REQUEST]})
    assert set(result) == {
        "messages",
        "init_messages",
        "iteration",
        "last_response",
        "stop",
        "feedback",
        "stop_reason",
        "records",
        "selected_iteration",
        "selected_score",
        "agent_state",
    }
    assert result["agent_state"] == {}  # an agent that is not a graph keeps no state


# -- the loop ------------------------------------------------------------------------


def test_answers_appended_and_seen_by_next_call():
    chat = numbered_chat()
    result = create_loop_agent(chat, until(3)).invoke({"messages": [REQUEST]})
    assert texts(result["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "answer 1"),
        ("human", review("feedback 1", 1)),
        ("ai", "answer 2"),
        ("human", review("feedback 2", 2)),
        ("ai", "answer 3"),
    ]
    # each call saw the earlier answers followed by their feedback
    assert [texts(call) for call in chat.calls] == [
        texts(result["messages"][:1]),
        texts(result["messages"][:3]),
        texts(result["messages"][:5]),
    ]
    assert result["last_response"].text == "answer 3"
    assert result["messages"][-1] == result["last_response"]
    assert result["iteration"] == 3
    assert result["stop"] is True
    assert result["stop_reason"] == "accepted"


def test_feedback_only_while_continuing():
    result = create_loop_agent(numbered_chat(), until(2)).invoke({"messages": [REQUEST]})
    feedback_turns = [m for m in result["messages"] if is_feedback(m)]
    assert [m.text for m in feedback_turns] == [review("feedback 1", 1)]
    assert not is_feedback(result["messages"][0])
    # every evaluation's feedback is kept, the accepting one included
    assert result["feedback"] == ["feedback 1", "feedback 2"]


def test_stop_on_cap():
    result = create_loop_agent(numbered_chat(), never, max_iterations=4).invoke(
        {"messages": [REQUEST]}
    )
    assert result["iteration"] == 4
    assert result["stop"] is False
    assert result["stop_reason"] == "max_iterations"
    assert result["last_response"].text == "answer 4"
    assert result["messages"][-1].text == "answer 4"  # the last feedback is not appended
    assert result["feedback"] == [f"again after {i}" for i in range(1, 5)]


def test_max_iterations_one():
    chat = numbered_chat()
    result = create_loop_agent(chat, never, max_iterations=1).invoke({"messages": [REQUEST]})
    assert len(chat.calls) == 1
    assert result["iteration"] == 1
    assert result["stop_reason"] == "max_iterations"
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 1")]


def test_five_hundred_iterations_with_default_settings():
    calls = 0

    def agent(messages: list[AnyMessage]) -> str:
        nonlocal calls
        calls += 1
        return f"answer {calls}"

    result = create_loop_agent(agent, never, max_iterations=500).invoke({"messages": [REQUEST]})
    assert calls == 500
    assert result["iteration"] == 500
    assert result["stop_reason"] == "max_iterations"
    assert len(result["messages"]) == 1 + 500 + 499


def test_records():
    result = create_loop_agent(numbered_chat(), until(2, score=True)).invoke(
        {"messages": [REQUEST]}
    )
    first, second = result["records"]
    assert first["iteration"] == 1
    # a record names its answer in messages instead of holding a copy of it
    assert first["answer_id"] == result["messages"][1].id
    assert "answer" not in first
    assert record_answer(first, result).text == "answer 1"
    assert record_answer(second, result["messages"]) is result["messages"][-1]
    assert (first["stop"], first["feedback"], first["score"]) == (False, "feedback 1", 10.0)
    assert (second["stop"], second["score"]) == (True, 20.0)
    assert first["evaluator"] == "evaluate"
    assert first["agent_seconds"] >= 0
    assert first["evaluation_seconds"] >= 0


def test_context_given_to_evaluator():
    seen: list[LoopContext] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(context)
        return until(2)(context)

    create_loop_agent(numbered_chat(), evaluate).invoke({"messages": [REQUEST]})
    first, second = seen
    assert set(first) == {
        "iteration",
        "init_messages",
        "last_response",
        "feedback",
        "messages",
        "agent_state",
    }
    assert first["agent_state"] == {}
    assert (first["iteration"], second["iteration"]) == (1, 2)
    assert texts(first["init_messages"]) == [("human", REQUEST.text)]
    assert first["last_response"].text == "answer 1"
    assert first["feedback"] == []
    assert second["feedback"] == ["feedback 1"]
    assert texts(second["messages"])[-2:] == [
        ("human", review("feedback 1", 1)),
        ("ai", "answer 2"),
    ]


# -- agent kinds ---------------------------------------------------------------------


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def test_create_agent_graph_with_tool_calls():
    chat = FakeChat.of(
        AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b c"}, "id": "c1"}]),
        "three words",
        "final answer",
    )
    agent = create_agent(chat, [word_count], system_prompt="You count words.")
    result = create_loop_agent(agent, until(2)).invoke({"messages": [REQUEST]})
    kinds = [type(m).__name__ for m in result["messages"]]
    assert kinds == [
        "HumanMessage",
        "AIMessage",  # tool call
        "ToolMessage",
        "AIMessage",  # answer 1
        "HumanMessage",  # feedback
        "AIMessage",  # answer 2
    ]
    tool_result = result["messages"][2]
    assert isinstance(tool_result, ToolMessage)
    assert tool_result.content == "3"
    assert record_answer(result["records"][0], result).text == "three words"
    assert result["last_response"].text == "final answer"
    # the second call saw the tool traffic, the first answer and the feedback; the
    # agent's system prompt is its own and never enters the loop's history
    second_call = chat.calls[2]
    assert texts(second_call)[0] == ("system", "You count words.")
    assert [m.type for m in second_call[1:]] == ["human", "ai", "tool", "ai", "human"]


def test_chat_model_agent():
    chat = numbered_chat()
    result = create_loop_agent(chat, until(2)).invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["answer 1", "answer 2"]


def test_runnable_agent_gets_the_list():
    received: list[Any] = []

    def answer(messages: list[AnyMessage]) -> AIMessage:
        received.append(messages)
        return AIMessage(f"seen {len(messages)}")

    loop = create_loop_agent(RunnableLambda(answer), until(2))
    result = loop.invoke({"messages": [REQUEST]})
    assert all(isinstance(r, list) for r in received)
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["seen 1", "seen 3"]


def test_function_agents_returning_each_accepted_shape():
    def as_string(messages: list[AnyMessage]) -> str:
        return "plain text"

    def as_message(messages: list[AnyMessage]) -> AIMessage:
        return AIMessage("a message")

    def as_full_state(messages: list[AnyMessage]) -> dict[str, Any]:
        return {"messages": [*messages, AIMessage("state answer")]}

    def as_new_messages(messages: list[AnyMessage]) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "dict answer"}]}

    for agent, text in [
        (as_string, "plain text"),
        (as_message, "a message"),
        (as_full_state, "state answer"),
        (as_new_messages, "dict answer"),
    ]:
        result = create_loop_agent(agent, until(2)).invoke({"messages": [REQUEST]})
        assert texts(result["messages"]) == [
            ("human", REQUEST.text),
            ("ai", text),
            ("human", review("feedback 1", 1)),
            ("ai", text),
        ], agent.__name__


async def test_async_function_agent():
    async def agent(messages: list[AnyMessage]) -> str:
        await asyncio.sleep(0)
        return f"async {len(messages)}"

    loop = create_loop_agent(agent, until(2))
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["async 1", "async 3"]
    # the sync methods run the async agent too
    result = loop.invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["async 1", "async 3"]
    chunks = list(loop.stream({"messages": [REQUEST]}, stream_mode="updates"))
    assert [next(iter(c)) for c in chunks] == ["invoke_agent", "evaluate"] * 2


def test_async_agent_with_an_async_client_in_sync_invoke():
    """An async agent that keeps a loop-bound async client works call after call."""
    from langchain_openai import ChatOpenAI

    from tests.scripted_openai import ScriptedOpenAI

    server = ScriptedOpenAI([f"draft {i}" for i in range(1, 4)])
    model = ChatOpenAI(model="m", api_key="sk-test", http_async_client=server.async_client())

    async def agent(messages: list[AnyMessage]) -> AIMessage:
        return await model.ainvoke(messages)

    result = create_loop_agent(agent, until(3)).invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"] if m.type == "ai"] == [
        "draft 1",
        "draft 2",
        "draft 3",
    ]
    assert len(server.requests) == 3


def test_reused_message_id_is_appended_not_overwritten():
    same = AIMessage("cached", id="fixed-id")

    def agent(messages: list[AnyMessage]) -> AIMessage:
        return same

    result = create_loop_agent(agent, until(3)).invoke({"messages": [REQUEST]})
    answers = [m for m in result["messages"] if m.type == "ai"]
    assert len(answers) == 3
    assert len({m.id for m in answers}) == 3
    assert result["last_response"].id == answers[-1].id


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (42, r"agent 'bad' returned int 42; expected an AIMessage, a string, or a mapping"),
        ({"answer": "x"}, r"returned a mapping with keys \['answer'\]; expected"),
        (HumanMessage("hi"), r"returned HumanMessage but no AIMessage answer"),
        ({"messages": [HumanMessage("a")]}, r"returned HumanMessage but no AIMessage answer"),
        ({"messages": [object()]}, r"returned a 'messages' list that is not messages"),
    ],
)
def test_agent_returning_something_else_is_a_type_error(returned, expected):
    def bad(messages: list[AnyMessage]) -> Any:
        return returned

    with pytest.raises(TypeError, match=expected):
        create_loop_agent(bad, until(1)).invoke({"messages": [REQUEST]})


def test_graph_agent_that_adds_nothing_is_a_type_error():
    class EchoState(dict):
        pass

    from typing import TypedDict

    class State(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    echo = StateGraph(State).add_node("echo", lambda s: {}).add_edge(START, "echo").compile()
    with pytest.raises(TypeError, match="returned no new messages but no AIMessage answer"):
        create_loop_agent(echo, until(1)).invoke({"messages": [REQUEST]})


# -- input forms ---------------------------------------------------------------------


def test_messages_only_input():
    result = create_loop_agent(numbered_chat(), until(1)).invoke({"messages": [REQUEST]})
    assert texts(result["init_messages"]) == [("human", REQUEST.text)]


def test_seed_input_form():
    message = HumanMessage("the seed's request")
    chat = numbered_chat()
    result = create_loop_agent(chat, until(2)).invoke(
        {"init_messages": [message], "messages": [message]}
    )
    assert texts(result["init_messages"]) == [("human", "the seed's request")]
    # the request is not duplicated
    assert texts(chat.calls[0]) == [("human", "the seed's request")]
    assert [m.type for m in result["messages"]] == ["human", "ai", "human", "ai"]


def test_init_messages_differing_from_messages():
    chat = numbered_chat()
    seen: list[LoopContext] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(context)
        return {"stop": True}

    history = [HumanMessage("earlier question"), AIMessage("earlier answer")]
    request = HumanMessage("the actual request")
    create_loop_agent(chat, evaluate).invoke(
        {"init_messages": [request], "messages": [*history, request]}
    )
    assert texts(seen[0]["init_messages"]) == [("human", "the actual request")]
    assert len(chat.calls[0]) == 3


@pytest.mark.parametrize(
    "payload", [{"messages": []}, {"messages": [], "init_messages": []}, {"init_messages": []}]
)
def test_empty_input_is_a_value_error(payload):
    with pytest.raises(ValueError, match="a loop needs a request to start from"):
        create_loop_agent(numbered_chat(), until(1)).invoke(payload)


def test_no_input_is_a_value_error():
    with pytest.raises(ValueError, match="a loop needs a request to start from"):
        create_loop_agent(numbered_chat(), until(1)).invoke({})


def test_init_messages_only_input():
    chat = numbered_chat()
    result = create_loop_agent(chat, until(1)).invoke({"init_messages": [REQUEST]})
    assert texts(chat.calls[0]) == [("human", REQUEST.text)]
    assert texts(result["messages"]) == [("human", REQUEST.text), ("ai", "answer 1")]


# -- multi-turn on one thread --------------------------------------------------------


@pytest.mark.parametrize("seed_form", [False, True])
def test_second_run_on_a_thread_starts_a_new_loop(seed_form):
    chat = numbered_chat()
    loop = create_loop_agent(chat, until(2), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}

    def payload(message: HumanMessage) -> dict[str, Any]:
        if seed_form:
            return {"init_messages": [message], "messages": [message]}
        return {"messages": [message]}

    first = loop.invoke(payload(REQUEST), config)
    assert first["iteration"] == 2
    follow_up = HumanMessage("Now one about snow.")
    second = loop.invoke(payload(follow_up), config)

    assert second["iteration"] == 2
    assert second["feedback"] == ["feedback 1", "feedback 2"]
    assert len(second["records"]) == 2
    assert second["stop_reason"] == "accepted"
    assert texts(second["init_messages"]) == [("human", "Now one about snow.")]
    assert texts(second["messages"]) == [
        ("human", REQUEST.text),
        ("ai", "answer 1"),
        ("human", review("feedback 1", 1)),
        ("ai", "answer 2"),
        ("human", "Now one about snow."),
        ("ai", "answer 3"),
        ("human", review("feedback 1", 1)),
        ("ai", "answer 4"),
    ]
    # the new loop's first call saw the whole conversation
    assert texts(chat.calls[2]) == texts(second["messages"][:5])


# -- bad arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, r"max_iterations must be >= 1 .*got 0"),
        (-3, ValueError, r"max_iterations must be >= 1"),
        (True, TypeError, r"max_iterations must be an int >= 1; got bool True"),
        (2.5, TypeError, r"max_iterations must be an int >= 1; got float 2.5"),
        ("3", TypeError, r"got str '3'"),
        (None, TypeError, r"got NoneType None"),
    ],
)
def test_bad_max_iterations(value, error, message):
    with pytest.raises(error, match=message):
        create_loop_agent(numbered_chat(), until(1), max_iterations=value)


def test_agent_and_evaluator_must_be_callable():
    with pytest.raises(TypeError, match=r"agent must be a compiled graph .*got str"):
        create_loop_agent("gpt-5", until(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"evaluator must be a function .*got int"):
        create_loop_agent(numbered_chat(), 75)  # type: ignore[arg-type]


class Agent:
    """A callable class: its instances answer, the class itself does not."""

    def __call__(self, messages: list[AnyMessage]) -> str:
        return "answer"


def two_arguments(messages: list[AnyMessage], config: Any) -> str:
    return "answer"


def keyword_only(messages: list[AnyMessage], *, tone: str) -> str:
    return "answer"


async def no_arguments() -> str:
    return "answer"


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (dict, r"agent is the class dict, not something that answers"),
        (Agent, r"agent is the class .*Agent.*pass an instance of it"),
        ({}, r"agent must be a compiled graph .*got dict"),
        (None, r"agent must be a compiled graph .*got NoneType"),
        (
            two_arguments,
            r"agent 'two_arguments' cannot be called with one argument .*missing a required "
            r"argument: 'config'",
        ),
        (keyword_only, r"agent 'keyword_only' cannot be called with one argument .*'tone'"),
        (no_arguments, r"agent 'no_arguments' cannot be called with one argument"),
        (lambda: "x", r"cannot be called with one argument \(the list of messages\)"),
    ],
)
def test_agents_that_cannot_answer_are_rejected_when_the_loop_is_built(agent, message):
    with pytest.raises(TypeError, match=message):
        create_loop_agent(agent, until(1))


def evaluate_with_config(context: LoopContext, config: Any) -> LoopEvaluation:
    return {"stop": True}


@pytest.mark.parametrize(
    ("evaluator", "message"),
    [
        (dict, r"evaluator is the class dict"),
        (
            evaluate_with_config,
            r"evaluator 'evaluate_with_config' cannot be called with one argument",
        ),
        (lambda: {"stop": True}, r"cannot be called with one argument \(the LoopContext\)"),
        ({}, r"evaluator must be a function .*got dict"),
    ],
)
def test_evaluators_of_the_wrong_shape_are_rejected_when_the_loop_is_built(evaluator, message):
    with pytest.raises(TypeError, match=message):
        create_loop_agent(numbered_chat(), evaluator)


def test_accepted_callables_still_build():
    def agent(messages, extra=None):  # a default is fine
        return "answer"

    def star(*args):
        return "answer"

    for candidate in (agent, star, Agent(), print):  # print: a built-in, no signature check
        create_loop_agent(candidate, until(1))
    assert create_loop_agent(Agent(), until(1)).invoke({"messages": [REQUEST]})["stop"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": 5}, r"name must be a non-empty string .*got int 5"),
        ({"name": ""}, r"name must be a non-empty string .*got str ''"),
        ({"name": "   "}, r"name must be a non-empty string"),
        ({"name": None}, r"got NoneType None"),
        ({"store": 5}, r"store must be a LangGraph store .*got int 5"),
        ({"store": {}}, r"store must be a LangGraph store .*got dict"),
    ],
)
def test_bad_name_and_store_are_rejected_when_the_loop_is_built(options, message):
    with pytest.raises(TypeError, match=message):
        create_loop_agent(numbered_chat(), until(1), **options)


@pytest.mark.parametrize(
    ("verdict", "message"),
    [
        (None, r"returned NoneType None; expected a LoopEvaluation mapping"),
        (True, r"returned bool True; expected a LoopEvaluation mapping"),
        ({"feedback": "x"}, r"returned 'stop'=None \(NoneType\); 'stop' must be True or False"),
        ({"stop": 1, "feedback": "x"}, r"'stop'=1 \(int\); 'stop' must be True or False"),
        ({"stop": False}, r"asked to continue \(stop=False\) without feedback"),
        ({"stop": False, "feedback": "  "}, r"without feedback"),
        ({"stop": False, "feedback": 3}, r"'feedback' of type int; it must be a string"),
        ({"stop": True, "score": "high"}, r"'score'='high' \(str\); 'score' must be a number"),
        ({"stop": True, "score": True}, r"'score' must be a number"),
        ({"stop": True, "score": float("nan")}, r"non-finite score"),
        ({"stop": True, "score": float("inf")}, r"non-finite score: 'score'=inf"),
        ({"stop": True, "score": -float("inf")}, r"non-finite score: 'score'=-inf"),
        ({"stop": True, "score": 10**400}, r"non-finite score: 'score'=an int of 401 digits"),
        ({"stop": True, "score": [80]}, r"'score'=\[80\] \(list\); 'score' must be a number"),
        ({"stop": True, "feeback": "x"}, r"unknown keys \['feeback'\]"),
    ],
)
def test_bad_evaluation_names_evaluator_iteration_and_problem(verdict, message):
    def judge(context: LoopContext) -> Any:
        if context["iteration"] == 1:
            return {"stop": False, "feedback": "try again"}
        return verdict

    with pytest.raises(
        InvalidEvaluationError, match=r"evaluator 'judge' at iteration 2 .*" + message
    ):
        create_loop_agent(numbered_chat(), judge).invoke({"messages": [REQUEST]})


def test_stop_without_feedback_is_accepted():
    def judge(context: LoopContext) -> LoopEvaluation:
        return {"stop": True}

    result = create_loop_agent(numbered_chat(), judge).invoke({"messages": [REQUEST]})
    assert result["feedback"] == [""]
    assert result["stop_reason"] == "accepted"


# -- call styles ---------------------------------------------------------------------


async def async_until_two(context: LoopContext) -> LoopEvaluation:
    await asyncio.sleep(0)
    return until(2)(context)


def test_sync_invoke_and_stream():
    loop = create_loop_agent(numbered_chat(), until(2))
    chunks = list(loop.stream({"messages": [REQUEST]}, stream_mode="updates"))
    assert [next(iter(c)) for c in chunks] == [
        "invoke_agent",
        "evaluate",
        "invoke_agent",
        "evaluate",
    ]
    assert chunks[1]["evaluate"]["feedback"] == ["feedback 1"]


async def test_async_evaluator_with_async_methods():
    loop = create_loop_agent(numbered_chat(), async_until_two)
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert result["iteration"] == 2
    values = [c async for c in loop.astream({"messages": [REQUEST]}, stream_mode="values")]
    assert values[-1]["stop_reason"] == "accepted"


async def test_sync_evaluator_with_async_agent_methods():
    loop = create_loop_agent(numbered_chat(), until(3))
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert result["iteration"] == 3


def test_async_evaluator_with_sync_invoke_says_use_ainvoke():
    loop = create_loop_agent(numbered_chat(), async_until_two)
    with pytest.raises(TypeError, match=r"evaluator 'async_until_two' is async; .*ainvoke\(\)"):
        loop.invoke({"messages": [REQUEST]})


def test_evaluator_may_be_a_runnable():
    loop = create_loop_agent(numbered_chat(), RunnableLambda(until(2)))
    assert loop.invoke({"messages": [REQUEST]})["iteration"] == 2


async def test_stream_messages_yields_agent_tokens():
    loop = create_loop_agent(FakeChat.of("one two three", "four five"), until(2))
    tokens: list[tuple[str, str]] = []
    async for chunk, metadata in loop.astream({"messages": [REQUEST]}, stream_mode="messages"):
        if metadata["langgraph_node"] == "invoke_agent":
            tokens.append((chunk.text, metadata["langgraph_step"]))
    assert "".join(t for t, _ in tokens) == "one two threefour five"
    assert len({step for _, step in tokens}) == 2


# -- recursion -----------------------------------------------------------------------


def test_explicit_low_recursion_limit_ends_cleanly():
    loop = create_loop_agent(numbered_chat(), never, max_iterations=50)
    result = loop.invoke({"messages": [REQUEST]}, {"recursion_limit": 10})
    assert result["stop_reason"] == "recursion_limit"
    assert 1 <= result["iteration"] < 50
    assert result["messages"][-1] == result["last_response"]


def test_parent_recursion_limit_wins_and_loop_ends_cleanly():
    from typing import TypedDict

    class Parent(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    loop = create_loop_agent(numbered_chat(), never, max_iterations=50)
    parent = StateGraph(Parent).add_node("refine", loop).add_edge(START, "refine").compile()
    result = parent.invoke({"messages": [REQUEST]}, {"recursion_limit": 25})
    answers = [m for m in result["messages"] if m.type == "ai"]
    assert 1 <= len(answers) < 50
    assert result["messages"][-1].type == "ai"


def test_tool_using_graph_agent_is_not_cut_short_by_the_loops_recursion_limit():
    calls = [
        AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a"}, "id": f"c{i}"}])
        for i in range(6)
    ]
    chat = FakeChat.of(*calls, "done after six tool calls")
    agent = create_agent(chat, [word_count])
    result = create_loop_agent(agent, until(1), max_iterations=1).invoke({"messages": [REQUEST]})
    assert result["last_response"].text == "done after six tool calls"
    assert sum(m.type == "tool" for m in result["messages"]) == 6
