"""History policies: exactly what the agent is sent on each iteration, per policy."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AnswerSelection, History
from loop_agents.loop.checkpoints import checkpoint_before_iteration
from loop_agents.loop.feedback import feedback_message, is_feedback
from loop_agents.loop.history.policies import (
    FEEDBACK_LOG_HEADER,
    FENCED_LOG_FOOTER,
    FENCED_LOG_HEADER,
    LoopHistory,
    feedback_log_message,
    without_rejected_attempts,
)
from loop_agents.loop.records import SELECTED_KEY
from tests.fakes import FakeChat, review, texts

REQUEST = "Write a haiku about rain."


def until(n: int):
    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": context["iteration"] >= n, "feedback": f"feedback {context['iteration']}"}

    return evaluate


class Recorder:
    """A plain-function agent: records what it is sent, answers "answer N"."""

    def __init__(self) -> None:
        self.sent: list[list[BaseMessage]] = []

    def __call__(self, messages: list[AnyMessage]) -> str:
        self.sent.append(list(messages))
        return f"answer {len(self.sent)}"


class ToolRecorder(Recorder):
    """An agent that calls a tool before each answer and returns the whole exchange."""

    def __call__(self, messages: list[AnyMessage]) -> Any:  # type: ignore[override]
        self.sent.append(list(messages))
        n = len(self.sent)
        call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"n": n}, "id": f"call{n}"}])
        result = ToolMessage(f"fact {n}", tool_call_id=f"call{n}")
        return {"messages": [*messages, call, result, AIMessage(f"answer {n}")]}


def log(*feedback: str) -> tuple[str, str]:
    entries = "\n\n".join(
        f"Attempt {i}:\n```review\n{text}\n```" for i, text in enumerate(feedback, 1)
    )
    header = FENCED_LOG_HEADER.format(fence="```")
    return ("human", f"{header}\n\n{entries}\n\n{FENCED_LOG_FOOTER}")


def run(history: Any, iterations: int = 3, agent: Recorder | None = None) -> tuple[Recorder, Any]:
    """The seed's loop (every retry a repair) under the history policy ``history``."""
    agent = agent or Recorder()
    loop = create_loop_agent(agent, until(iterations), 5, controls=[History(history)])
    return agent, loop.invoke({"messages": [HumanMessage(REQUEST)]})


FULL_TRANSCRIPT = [
    ("human", REQUEST),
    ("ai", "answer 1"),
    ("human", review("feedback 1", 1)),
    ("ai", "answer 2"),
    ("human", review("feedback 2", 2)),
    ("ai", "answer 3"),
]


# -- the built-in policies -------------------------------------------------------------


def test_full_sends_the_whole_conversation():
    agent, result = run("full")
    assert [texts(s) for s in agent.sent] == [
        FULL_TRANSCRIPT[:1],
        FULL_TRANSCRIPT[:3],
        FULL_TRANSCRIPT[:5],
    ]
    assert texts(result["messages"]) == FULL_TRANSCRIPT


def test_full_is_the_default():
    agent, _ = run("full")
    default_agent = Recorder()
    loop = create_loop_agent(default_agent, until(3), 5)
    loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert [texts(s) for s in default_agent.sent] == [texts(s) for s in agent.sent]


def test_last_attempt_sends_the_request_the_last_attempt_and_its_feedback():
    agent, result = run("last_attempt", iterations=4)
    assert [texts(s) for s in agent.sent] == [
        [("human", REQUEST)],
        [("human", REQUEST), ("ai", "answer 1"), ("human", review("feedback 1", 1))],
        [("human", REQUEST), ("ai", "answer 2"), ("human", review("feedback 2", 2))],
        [("human", REQUEST), ("ai", "answer 3"), ("human", review("feedback 3", 3))],
    ]
    # the state keeps everything
    assert texts(result["messages"]) == [
        *FULL_TRANSCRIPT[:5],
        ("ai", "answer 3"),
        ("human", review("feedback 3", 3)),
        ("ai", "answer 4"),
    ]
    assert result["feedback"] == ["feedback 1", "feedback 2", "feedback 3", "feedback 4"]


def test_feedback_log_sends_the_request_and_one_message_with_all_feedback():
    agent, result = run("feedback_log", iterations=4)
    assert [texts(s) for s in agent.sent] == [
        [("human", REQUEST)],
        [("human", REQUEST), log("feedback 1")],
        [("human", REQUEST), log("feedback 1", "feedback 2")],
        [("human", REQUEST), log("feedback 1", "feedback 2", "feedback 3")],
    ]
    sent_log = agent.sent[3][1]
    assert is_feedback(sent_log)
    assert sent_log.id is not None
    # the log is only sent, never stored
    assert not any(FEEDBACK_LOG_HEADER in m.text for m in result["messages"])
    assert len(result["messages"]) == 8


def test_the_request_may_be_several_messages():
    agent = Recorder()
    request = [SystemMessage("Be brief."), HumanMessage(REQUEST)]
    loop = create_loop_agent(agent, until(3), 5, controls=[History("last_attempt")])
    loop.invoke({"messages": request})
    assert texts(agent.sent[2]) == [
        ("system", "Be brief."),
        ("human", REQUEST),
        ("ai", "answer 2"),
        ("human", review("feedback 2", 2)),
    ]


def test_seed_call_form_finds_the_request():
    agent = Recorder()
    message = HumanMessage(REQUEST)
    loop = create_loop_agent(agent, until(3), 5, controls=[History("last_attempt")])
    loop.invoke({"init_messages": [message], "messages": [message]})
    assert texts(agent.sent[2]) == [
        ("human", REQUEST),
        ("ai", "answer 2"),
        ("human", review("feedback 2", 2)),
    ]


def test_request_given_as_separate_equal_messages_is_found_by_content():
    agent = Recorder()
    loop = create_loop_agent(agent, until(3), 5, controls=[History("last_attempt")])
    loop.invoke({"init_messages": [HumanMessage(REQUEST)], "messages": [HumanMessage(REQUEST)]})
    assert texts(agent.sent[2]) == [
        ("human", REQUEST),
        ("ai", "answer 2"),
        ("human", review("feedback 2", 2)),
    ]


def test_async_run_sends_the_same():
    agent = Recorder()
    loop = create_loop_agent(agent, until(3), 5, controls=[History("last_attempt")])
    asyncio.run(loop.ainvoke({"messages": [HumanMessage(REQUEST)]}))
    sync_agent, _ = run("last_attempt")
    assert [texts(s) for s in agent.sent] == [texts(s) for s in sync_agent.sent]


def test_the_evaluator_still_sees_the_whole_conversation():
    seen: list[int] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(len(context["messages"]))
        return until(3)(context)

    create_loop_agent(Recorder(), evaluate, 5, controls=[History("feedback_log")]).invoke(
        {"messages": [HumanMessage(REQUEST)]}
    )
    assert seen == [2, 4, 6]


# -- tool calls stay with their results --------------------------------------------------


def test_last_attempt_keeps_tool_calls_with_their_results():
    agent, result = run("last_attempt", agent=ToolRecorder())
    third = agent.sent[2]
    assert [(type(m).__name__, m.text) for m in third] == [
        ("HumanMessage", REQUEST),
        ("AIMessage", ""),
        ("ToolMessage", "fact 2"),
        ("AIMessage", "answer 2"),
        ("HumanMessage", review("feedback 2", 2)),
    ]
    call, tool_result = third[1], third[2]
    assert isinstance(call, AIMessage)
    assert isinstance(tool_result, ToolMessage)
    assert call.tool_calls[0]["id"] == tool_result.tool_call_id == "call2"
    # the state holds every attempt's tool traffic
    assert [m.type for m in result["messages"]] == [
        "human",
        *["ai", "tool", "ai", "human"] * 2,
        "ai",
        "tool",
        "ai",
    ]


def test_feedback_log_drops_tool_calls_and_results_together():
    agent, _ = run("feedback_log", agent=ToolRecorder())
    assert [m.type for m in agent.sent[2]] == ["human", "human"]
    assert texts(agent.sent[2])[1] == log("feedback 1", "feedback 2")


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def test_create_agent_with_tools_under_last_attempt():
    chat = FakeChat.of(
        AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b"}, "id": "w1"}]),
        "two words",
        AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b c"}, "id": "w2"}]),
        "three words",
        "final",
    )
    loop = create_loop_agent(
        create_agent(chat, [word_count]), until(3), 5, controls=[History("last_attempt")]
    )
    result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    # model calls: it. 1 (2 calls: tool, answer), it. 2 (2 calls), it. 3 (1 call)
    third_iteration = chat.calls[4]
    assert [m.type for m in third_iteration] == ["human", "ai", "tool", "ai", "human"]
    assert third_iteration[2].text == "3"
    assert third_iteration[3].text == "three words"
    assert third_iteration[1].tool_calls[0]["id"] == "w2"
    assert [m.type for m in result["messages"]] == [
        "human",
        *["ai", "tool", "ai", "human"] * 2,
        "ai",
    ]


def test_create_agent_under_feedback_log_does_not_store_the_log():
    chat = FakeChat.of("one", "two", "three")
    loop = create_loop_agent(
        create_agent(chat, []), until(3), 5, controls=[History("feedback_log")]
    )
    result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert texts(chat.calls[2]) == [("human", REQUEST), log("feedback 1", "feedback 2")]
    assert texts(result["messages"]) == [
        ("human", REQUEST),
        ("ai", "one"),
        ("human", review("feedback 1", 1)),
        ("ai", "two"),
        ("human", review("feedback 2", 2)),
        ("ai", "three"),
    ]


# -- a second run on the same thread -----------------------------------------------------


def two_runs(history: Any) -> tuple[Recorder, Any]:
    agent = Recorder()
    loop = create_loop_agent(
        agent, until(3), 5, controls=[History(history)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    return agent, loop.invoke({"messages": [HumanMessage("Now one about snow.")]}, config)


def test_second_run_full_sends_everything():
    agent, result = two_runs("full")
    assert texts(agent.sent[3]) == [*FULL_TRANSCRIPT, ("human", "Now one about snow.")]
    assert len(agent.sent[5]) == 11
    assert len(result["messages"]) == 12


def test_second_run_last_attempt_sends_earlier_turns_as_the_user_saw_them():
    agent, result = two_runs("last_attempt")
    earlier = [("human", REQUEST), ("ai", "answer 3")]
    snow = ("human", "Now one about snow.")
    assert [texts(s) for s in agent.sent[3:]] == [
        [*earlier, snow],
        [*earlier, snow, ("ai", "answer 4"), ("human", review("feedback 1", 1))],
        [*earlier, snow, ("ai", "answer 5"), ("human", review("feedback 2", 2))],
    ]
    assert len(result["messages"]) == 12  # the state keeps both loops whole


def test_second_run_feedback_log_logs_only_this_loops_feedback():
    agent, _ = two_runs("feedback_log")
    earlier = [("human", REQUEST), ("ai", "answer 3")]
    snow = ("human", "Now one about snow.")
    assert [texts(s) for s in agent.sent[3:]] == [
        [*earlier, snow],
        [*earlier, snow, log("feedback 1")],
        [*earlier, snow, log("feedback 1", "feedback 2")],
    ]


def test_second_run_after_best_of_selection_keeps_the_selected_answer():
    agent = Recorder()
    scores = {1: 5.0, 2: 9.0, 3: 1.0}

    def evaluate(context: LoopContext) -> LoopEvaluation:
        it = context["iteration"]
        return {"stop": False, "feedback": f"feedback {it}", "score": scores.get(it, 0.0)}

    loop = create_loop_agent(
        agent,
        evaluate,
        3,
        controls=[History("last_attempt"), AnswerSelection("best")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    first = loop.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    assert first["last_response"].text == "answer 2"
    loop.invoke({"messages": [HumanMessage("Shorter.")]}, config)
    assert texts(agent.sent[3]) == [("human", REQUEST), ("ai", "answer 2"), ("human", "Shorter.")]


def test_a_message_added_before_a_forked_iteration_is_kept():
    agent = Recorder()
    saver = InMemorySaver()
    loop = create_loop_agent(
        agent, until(3), 5, controls=[History("last_attempt")], checkpointer=saver
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [HumanMessage(REQUEST)]}, config, durability="sync")
    snapshot = checkpoint_before_iteration(loop, config, 2)
    fork = loop.update_state(snapshot.config, {"messages": [HumanMessage("Use the word 'eaves'.")]})
    loop.invoke(None, fork)
    hint = ("human", "Use the word 'eaves'.")
    assert texts(agent.sent[3]) == [
        ("human", REQUEST),
        ("ai", "answer 1"),
        ("human", review("feedback 1", 1)),
        hint,
    ]
    assert texts(agent.sent[4]) == [
        ("human", REQUEST),
        hint,
        ("ai", "answer 4"),
        ("human", review("feedback 2", 2)),
    ]


# -- a function of the history -----------------------------------------------------------


def test_function_policy_gets_the_split_history_and_its_messages_are_sent():
    views: list[LoopHistory] = []

    def last_two(history: LoopHistory) -> Sequence[BaseMessage]:
        views.append(history)
        recent = [m for a in history["attempts"][-2:] for m in (*a["messages"], a["feedback"])]
        return [*history["request"], *recent, *history["pending"]]

    agent, result = run(last_two, iterations=4)
    assert [texts(s) for s in agent.sent] == [
        FULL_TRANSCRIPT[:1],
        FULL_TRANSCRIPT[:3],
        FULL_TRANSCRIPT[:5],
        [
            FULL_TRANSCRIPT[0],
            *FULL_TRANSCRIPT[3:5],
            ("ai", "answer 3"),
            ("human", review("feedback 3", 3)),
        ],
    ]
    last = views[-1]
    assert last["iteration"] == 4
    assert texts(last["request"]) == [("human", REQUEST)]
    assert last["earlier"] == []
    assert last["pending"] == []
    assert [a["iteration"] for a in last["attempts"]] == [1, 2, 3]
    assert [texts(a["messages"]) for a in last["attempts"]] == [
        [("ai", f"answer {i}")] for i in (1, 2, 3)
    ]
    assert last["feedback"] == ["feedback 1", "feedback 2", "feedback 3"]
    assert last["messages"] == [
        *last["request"],
        *[m for a in last["attempts"] for m in (*a["messages"], a["feedback"])],
    ]
    assert [v["iteration"] for v in views] == [1, 2, 3, 4]
    assert len(result["messages"]) == 8


def test_function_policy_on_a_second_run_sees_the_earlier_turns():
    views: list[LoopHistory] = []

    def spy(history: LoopHistory) -> Sequence[BaseMessage]:
        views.append(history)
        return history["messages"]

    agent = Recorder()
    loop = create_loop_agent(
        agent, until(2), 5, controls=[History(spy)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    loop.invoke({"messages": [HumanMessage("Again.")]}, config)
    second = views[2]
    assert second["iteration"] == 1
    assert texts(second["earlier"]) == [
        ("human", REQUEST),
        ("ai", "answer 1"),
        ("human", review("feedback 1", 1)),
        ("ai", "answer 2"),
    ]
    assert texts(second["request"]) == [("human", "Again.")]
    assert second["attempts"] == []


def rejected(history_function: Any, match: str, error: type[Exception] = ValueError) -> None:
    loop = create_loop_agent(ToolRecorder(), until(3), 5, controls=[History(history_function)])
    with pytest.raises(error, match=match):
        loop.invoke({"messages": [HumanMessage(REQUEST)]})


def test_function_policy_must_keep_the_request():
    rejected(
        lambda h: h["messages"][1:], r"left out the loop's request .*include history\['request'\]"
    )


def test_function_policy_must_not_separate_a_tool_call_from_its_result():
    def drop_results(history: LoopHistory) -> list[BaseMessage]:
        return [m for m in history["messages"] if not isinstance(m, ToolMessage)]

    def drop_calls(history: LoopHistory) -> list[BaseMessage]:
        return [m for m in history["messages"] if not (isinstance(m, AIMessage) and m.tool_calls)]

    rejected(drop_results, r"tool call 'call1' without its tool result")
    rejected(drop_calls, r"tool result 'call1' without the AI message that called the tool")


def test_function_policy_may_drop_a_tool_call_with_its_result():
    def drop_tools(history: LoopHistory) -> list[BaseMessage]:
        return [
            m
            for m in history["messages"]
            if not isinstance(m, ToolMessage) and not (isinstance(m, AIMessage) and m.tool_calls)
        ]

    agent, _ = run(drop_tools, agent=ToolRecorder())
    assert [m.type for m in agent.sent[2]] == ["human", "ai", "human", "ai", "human"]


def test_function_policy_must_return_messages():
    rejected(lambda h: "text", r"returned str 'text'; expected a list of messages", TypeError)
    rejected(lambda h: [*h["messages"], "x"], r"list with str items", TypeError)


def test_function_policy_must_be_sync():
    async def policy(history: LoopHistory) -> list[BaseMessage]:
        return history["messages"]

    with pytest.raises(TypeError, match="history function 'policy' is async"):
        create_loop_agent(Recorder(), until(2), 3, controls=[History(policy)])

    def returns_coroutine(history: LoopHistory) -> Any:
        return policy(history)

    rejected(returns_coroutine, "returned an awaitable", TypeError)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (
            "last",
            ValueError,
            r"history must be one of 'full', 'last_attempt', 'feedback_log'.*got 'last'",
        ),
        (3, TypeError, r"history must be one of .*got int 3"),
        (None, TypeError, r"got NoneType None"),
    ],
)
def test_bad_history_values(value: Any, error: type[Exception], match: str):
    with pytest.raises(error, match=match):
        create_loop_agent(Recorder(), until(2), 3, controls=[History(value)])


# -- helpers ----------------------------------------------------------------------------


def test_feedback_log_message_text_and_mark():
    message = feedback_log_message(["Too long.", "Mention the date."])
    assert (message.type, message.text) == log("Too long.", "Mention the date.")
    plain = feedback_log_message(["Too long.", "Mention the date."], feedback_format="{feedback}")
    assert plain.text == (
        f"{FEEDBACK_LOG_HEADER}\n\nAttempt 1: Too long.\n\nAttempt 2: Mention the date."
    )
    assert is_feedback(message)
    assert message.additional_kwargs["loop_agents_feedback"]["iterations"] == [1, 2]
    with pytest.raises(ValueError, match="at least one feedback"):
        feedback_log_message([])


def test_without_rejected_attempts():
    call = AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c9"}], id="call")
    result = ToolMessage("r", tool_call_id="c9", id="result")
    messages: list[AnyMessage] = [
        HumanMessage("first", id="h1"),
        AIMessage("a1", id="a1"),
        feedback_message("f1", iteration=1),
        call,
        result,
        AIMessage("a2", id="a2"),
        HumanMessage("second", id="h2"),
        AIMessage("b1", id="b1"),
        feedback_message("g1", iteration=1),
        AIMessage("b2", id="b2"),
        AIMessage("b1 again", id="copy", additional_kwargs={SELECTED_KEY: {"iteration": 1}}),
        HumanMessage("third", id="h3"),
        AIMessage("plain answer", id="c1"),
    ]
    assert [m.id for m in without_rejected_attempts(messages)] == [
        "h1",
        "call",
        "result",
        "a2",
        "h2",
        "copy",
        "h3",
        "c1",
    ]
    assert without_rejected_attempts([]) == []
