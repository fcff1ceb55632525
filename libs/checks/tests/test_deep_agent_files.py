"""A deep agent's files judged by `files_check` inside the agent, as `LoopMiddleware`'s evaluator."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from loop_agents import LoopContext, LoopEvaluation, LoopMiddleware, all_of, todos_complete
from loop_agents.controls import AnswerSelection
from loop_agents.loop.feedback import is_feedback
from loop_agents_checks import files_check
from tests.fakes import FakeChat

# -- create_deep_agent ------------------------------------------------------------------------

TESTS = """
from solution import add

def test_add():
    assert add(2, 3) == 5
"""


def coder(messages: list[AnyMessage]) -> AIMessage:
    """Writes add() wrong, then fixes it, then breaks it again, noting each version."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Written.")
    attempt = sum(1 for m in messages if is_feedback(m)) + 1
    if attempt == 1:
        content = "def add(a, b):\n    return a - b\n"
        args = {"file_path": "/solution.py", "content": content}
        return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": "w1"}])
    old, new = {2: ("a - b", "a + b"), 3: ("a + b", "a * b")}[attempt]
    edit = {"file_path": "/solution.py", "old_string": old, "new_string": new}
    note = {"file_path": f"/v{attempt}.txt", "content": new}
    return AIMessage(
        "",
        tool_calls=[
            {"name": "edit_file", "args": edit, "id": f"e{attempt}"},
            {"name": "write_file", "args": note, "id": f"n{attempt}"},
        ],
    )


def test_inside_a_deep_agent_files_are_judged_and_the_best_attempt_s_files_come_back():
    deepagents = pytest.importorskip("deepagents")
    check = files_check(TESTS, timeout=30)

    def passes_then_continues(context: LoopContext) -> LoopEvaluation:
        verdict = check.invoke(context)
        score = 100.0 if verdict["stop"] else 0.0
        return {"stop": False, "score": score, "feedback": verdict.get("feedback") or "More."}

    loop = LoopMiddleware(passes_then_continues, 3, controls=[AnswerSelection("best")])
    agent = deepagents.create_deep_agent(model=FakeChat.of(coder), tools=[], middleware=[loop])
    result = agent.invoke({"messages": [HumanMessage("Write add(a, b) in /solution.py.")]})
    assert [r["score"] for r in result["loop_records"]] == [0.0, 100.0, 0.0]
    assert result["loop_selected_iteration"] == 2
    files = result["files"]
    assert "a + b" in str(files["/solution.py"])
    assert set(files) == {"/solution.py", "/v2.txt"}  # /v3.txt, written later, is gone


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_deep_agent_s_plan_and_files_both_judged_with_all_of(call):
    deepagents = pytest.importorskip("deepagents")
    judge = all_of(files_check(TESTS, timeout=30), todos_complete())
    loop = LoopMiddleware(judge, 4)  # the coder revises from the feedback
    agent = deepagents.create_deep_agent(model=FakeChat.of(coder), tools=[], middleware=[loop])
    request = {"messages": [HumanMessage("Write add(a, b) in /solution.py.")]}
    result = await agent.ainvoke(request) if call == "ainvoke" else agent.invoke(request)
    assert result["loop_stop_reason"] == "accepted"
    assert result["loop_iteration"] == 2
    assert "FAILED" in result["loop_feedback"][0]
