"""A graph agent's state beyond messages: given back, shown to the evaluator, selected, kept.

Tried with ``deepagents.create_deep_agent`` (its files live in its state) and with
``create_agent(..., response_format=Schema)`` (its ``structured_response``), on scripted
tool-calling models: no network.
"""

from __future__ import annotations

import logging
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AnswerSelection
from loop_agents.loop.agent_state import frozen, input_keys, thawed
from loop_agents.loop.feedback import is_feedback
from tests.fakes import FakeChat

deepagents = pytest.importorskip("deepagents")

TASK = HumanMessage("Write add(a, b) in /solution.py")


def coder(messages: list[AnyMessage]) -> AIMessage:
    """Writes a wrong /solution.py first; after each review, edits it."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(f"done: {messages[-1].text[:60]}")
    reviews = [m for m in messages if is_feedback(m)]
    if not reviews:
        content = "def add(a, b):\n    return a - b\n"
        call = {"name": "write_file", "args": {"file_path": "/solution.py", "content": content}}
        return AIMessage("", tool_calls=[{**call, "id": "write"}])
    edit = {"file_path": "/solution.py", "old_string": "a - b", "new_string": "a + b"}
    return AIMessage("", tool_calls=[{"name": "edit_file", "args": edit, "id": f"e{len(reviews)}"}])


def deep_agent() -> Any:
    return deepagents.create_deep_agent(model=FakeChat.of(coder), tools=[])


def solution(state: dict[str, Any]) -> str:
    file = (state.get("files") or {}).get("/solution.py")
    content = file.get("content") if isinstance(file, dict) else file
    return "\n".join(content) if isinstance(content, list) else str(content or "")


def passes_tests(context: LoopContext) -> LoopEvaluation:
    code = solution(context["agent_state"])
    if "a + b" in code:
        return {"stop": True, "score": 1.0}
    if not code:
        return {"stop": False, "feedback": "No /solution.py was written.", "score": 0.0}
    return {"stop": False, "feedback": "add(2, 3) returned -1; it should return 5.", "score": 0.0}


def test_a_deep_agent_takes_files_as_input():
    assert "files" in input_keys(deep_agent())
    assert input_keys(create_agent(FakeChat.of("x"))) == frozenset()


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_deep_agent_revises_the_file_it_wrote(call):
    seen: list[str] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(solution(context["agent_state"]))
        return passes_tests(context)

    loop = create_loop_agent(deep_agent(), evaluate, 3)  # edits after a review
    request = {"messages": [TASK]}
    result = await loop.ainvoke(request) if call == "ainvoke" else loop.invoke(request)
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert "a - b" in seen[0]
    assert "a + b" in seen[1]
    assert "Error" not in " ".join(m.text for m in result["messages"] if m.type == "tool")
    assert "a + b" in solution(result["agent_state"])


def test_select_best_returns_the_best_iteration_s_files():
    scores = iter([0.9, 0.2, 0.1])

    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "score": next(scores), "feedback": "Try again."}

    result = create_loop_agent(
        deep_agent(), evaluate, 3, controls=[AnswerSelection("best")]
    ).invoke({"messages": [TASK]})
    assert result["selected_iteration"] == 1
    assert "a - b" in solution(result["agent_state"])  # iteration 1's file, not the last


def test_files_given_at_the_start_reach_the_first_attempt():
    seen: list[str] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(solution(context["agent_state"]))
        return {"stop": True}

    start = {"files": {"/notes.md": {"content": "use integers", "encoding": "utf-8"}}}
    result = create_loop_agent(deep_agent(), evaluate, 2).invoke(
        {"messages": [TASK], "agent_state": start}
    )
    assert set(result["agent_state"]["files"]) == {"/notes.md", "/solution.py"}


def test_the_files_survive_a_failure_and_a_resume_exactly(tmp_path):
    failed = {"done": False}

    def evaluate(context: LoopContext) -> LoopEvaluation:
        if context["iteration"] == 2 and not failed["done"]:
            failed["done"] = True
            raise RuntimeError("the evaluator failed")
        return passes_tests(context)

    config = {"configurable": {"thread_id": "deep"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "loop.sqlite")) as saver:
        loop = create_loop_agent(deep_agent(), evaluate, 3, checkpointer=saver)
        with pytest.raises(RuntimeError):
            loop.invoke({"messages": [TASK]}, config)
        saved = loop.get_state(config).values["agent_state"]
        assert "a + b" in solution(saved)  # attempt 2's file was saved before its evaluation
        result = loop.invoke(None, config)
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert result["agent_state"] == saved


class Headline(BaseModel):
    title: str
    words: int


def headline_model(titles: list[str]) -> FakeChat:
    """Answers with the structured-output tool call of ``Headline``, a title each time."""
    answers = iter(titles)

    def answer(messages: list[AnyMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("ok")
        title = next(answers)
        args = {"title": title, "words": len(title.split())}
        return AIMessage("", tool_calls=[{"name": "Headline", "args": args, "id": title[:8]}])

    return FakeChat.of(answer)


def short_title(context: LoopContext) -> LoopEvaluation:
    headline = context["agent_state"]["structured_response"]
    assert isinstance(headline, Headline)
    if headline.words <= 4:
        return {"stop": True, "score": 1.0}
    return {"stop": False, "feedback": f"{headline.words} words; at most 4.", "score": 0.0}


def test_a_structured_response_reaches_the_evaluator_and_the_result():
    agent = create_agent(
        headline_model(["A very long title for this", "Short title"]), response_format=Headline
    )
    result = create_loop_agent(agent, short_title, 3).invoke({"messages": [HumanMessage("Title?")]})
    assert result["stop_reason"] == "accepted"
    assert result["agent_state"]["structured_response"] == Headline(title="Short title", words=2)


def test_a_structured_response_is_stored_as_plain_data_and_read_back(tmp_path, caplog):
    agent = create_agent(
        headline_model(["A very long title for this", "Short"]), response_format=Headline
    )
    config = {"configurable": {"thread_id": "title"}}
    with (
        caplog.at_level(logging.WARNING),
        SqliteSaver.from_conn_string(str(tmp_path / "loop.sqlite")) as saver,
    ):
        loop = create_loop_agent(agent, short_title, 3, checkpointer=saver)
        loop.invoke({"messages": [HumanMessage("Title?")]}, config)
        again = create_loop_agent(agent, short_title, 3, checkpointer=saver)
        values = again.get_state(config).values
    assert values["agent_state"]["structured_response"] == Headline(title="Short", words=1)
    assert "unregistered type" not in caplog.text


def test_frozen_values_of_a_class_not_imported_stay_plain_data():
    stored = frozen({"r": Headline(title="x", words=1)})
    stored["r"]["__loop_agents_model__"] = "no_such_module:Headline"
    assert thawed(stored) == {"r": {"title": "x", "words": 1}}


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    files: Annotated[list[str], operator.add]  # the parent's own "files"


def test_in_a_parent_graph_the_agent_s_keys_do_not_collide():
    loop = create_loop_agent(deep_agent(), passes_tests, 3, output_mode="full_history")
    builder = StateGraph(Parent)
    builder.add_node("coder", loop)
    builder.add_edge(START, "coder")
    builder.add_edge("coder", END)
    result = builder.compile().invoke({"messages": [TASK], "files": ["README.md"]})
    assert result["files"] == ["README.md"]
    assert result["messages"][-1].text.startswith("done")


def test_agents_that_are_not_graphs_have_no_agent_state():
    def evaluate(context: LoopContext) -> LoopEvaluation:
        assert context["agent_state"] == {}
        return {"stop": True}

    result = create_loop_agent(FakeChat.of("hi"), evaluate, 2).invoke({"messages": [TASK]})
    assert "agent_state" not in result or result["agent_state"] == {}


def test_storage_per_iteration_stays_flat_with_files(tmp_path):
    import sqlite3

    def never(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "again"}

    sizes = []
    for iterations in (5, 20):
        path = tmp_path / f"{iterations}.sqlite"
        with SqliteSaver.from_conn_string(str(path)) as saver:
            loop = create_loop_agent(deep_agent(), never, iterations, checkpointer=saver)
            loop.invoke({"messages": [TASK]}, {"configurable": {"thread_id": "t"}})
        connection = sqlite3.connect(path)
        stored = connection.execute(
            "select sum(length(checkpoint)) + (select sum(length(value)) from writes) from checkpoints"
        ).fetchone()[0]
        connection.close()
        sizes.append(stored / iterations)
    assert sizes[1] <= sizes[0] * 1.5, sizes


def test_a_bad_agent_state_input_is_a_clear_error():
    loop = create_loop_agent(deep_agent(), passes_tests, 2)
    with pytest.raises(TypeError, match="'agent_state' must be a mapping"):
        loop.invoke({"messages": [TASK], "agent_state": ["files"]})


def test_in_memory_checkpoints_keep_the_files():
    saver = InMemorySaver()
    loop = create_loop_agent(deep_agent(), passes_tests, 3, checkpointer=saver)
    config = {"configurable": {"thread_id": "m"}}
    loop.invoke({"messages": [TASK]}, config)
    assert "a + b" in solution(loop.get_state(config).values["agent_state"])
