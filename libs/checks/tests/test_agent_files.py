"""files_check and todos_complete: a deep agent's files tested in the sandbox, its plan followed."""

from __future__ import annotations

import pytest
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from loop_agents import create_loop_agent
from loop_agents.evaluators import all_of, todos_complete
from loop_agents.loop.feedback import is_feedback
from loop_agents_checks import files_check
from loop_agents_checks.agent_files import file_texts
from tests.fakes import FakeChat

TESTS = """
from solution import add

def test_add():
    assert add(2, 3) == 5, f"add(2, 3) returned {add(2, 3)}"

def test_negative():
    assert add(-1, 1) == 0
"""


def context(files, iteration=1):
    return {
        "iteration": iteration,
        "init_messages": [],
        "last_response": AIMessage("done"),
        "feedback": [],
        "messages": [],
        "agent_state": {"files": files} if files is not None else {},
    }


@pytest.fixture(scope="module")
def check():
    return files_check(TESTS, timeout=20)


def test_passing_files_are_accepted(check):
    verdict = check.invoke(
        context({"/solution.py": {"content": "def add(a, b):\n    return a + b\n"}})
    )
    assert verdict["stop"] is True


def test_a_failing_test_is_named_with_its_traceback(check):
    verdict = check.invoke(context({"/solution.py": "def add(a, b):\n    return a - b\n"}))
    assert verdict["stop"] is False
    assert "FAILED test_add" in verdict["feedback"]
    assert "add(2, 3) returned -1" in verdict["feedback"]
    assert "/solution.py" in verdict["feedback"]


async def test_the_async_path_gives_the_same_verdict(check):
    verdict = await check.ainvoke(context({"/solution.py": ["def add(a, b):", "    return a + b"]}))
    assert verdict["stop"] is True


def test_no_files_is_feedback_not_an_error(check):
    verdict = check.invoke(context(None))
    assert verdict["stop"] is False
    assert "No files were written" in verdict["feedback"]


def test_a_file_that_leaves_the_folder_is_refused(check):
    verdict = check.invoke(context({"../../etc/passwd": "x"}))
    assert verdict["stop"] is False
    assert "leaves the folder" in verdict["feedback"]


def test_a_solution_that_never_ends_is_stopped():
    check = files_check(TESTS, timeout=1)
    verdict = check.invoke(context({"solution.py": "while True:\n    pass\n"}))
    assert verdict["stop"] is False
    assert "did not finish within 1 seconds" in verdict["feedback"]


def test_bad_tests_are_refused_when_built():
    with pytest.raises(ValueError, match="do not compile"):
        files_check("def broken(:\n")
    with pytest.raises(TypeError, match="Python source"):
        files_check("")


def test_file_texts_reads_every_form():
    assert file_texts({"/a.py": {"content": ["x = 1", "y = 2"]}, "b.py": "z"}) == {
        "a.py": "x = 1\ny = 2",
        "b.py": "z",
    }


def test_todos_complete_names_the_open_items():
    evaluator = todos_complete()
    todos = [
        {"content": "write add", "status": "completed"},
        {"content": "write tests", "status": "in_progress"},
        {"content": "run them", "status": "pending"},
    ]
    verdict = evaluator.invoke({**context(None), "agent_state": {"todos": todos}})
    assert verdict["stop"] is False
    assert "- write tests (in_progress)" in verdict["feedback"]
    assert "- run them (pending)" in verdict["feedback"]
    assert "write add" not in verdict["feedback"].split("Not done yet:")[1]
    assert verdict["score"] == pytest.approx(1 / 3)
    done = [{**t, "status": "completed"} for t in todos]
    assert evaluator.invoke({**context(None), "agent_state": {"todos": done}})["stop"] is True
    assert evaluator.invoke(context(None))["stop"] is True
    assert todos_complete(require_plan=True).invoke(context(None))["stop"] is False


deepagents = pytest.importorskip("deepagents")


def planner_coder(messages: list[AnyMessage]) -> AIMessage:
    """Plans two steps, writes a wrong add(), is told by the tests, fixes it, ticks the plan."""
    reviews = [m for m in messages if is_feedback(m)]
    last = messages[-1]
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    if isinstance(last, ToolMessage) and len(calls) % 2 == 1 and not reviews:
        content = "def add(a, b):\n    return a - b\n"
        call = {"name": "write_file", "args": {"file_path": "/solution.py", "content": content}}
        return AIMessage("", tool_calls=[{**call, "id": "write"}])
    if isinstance(last, ToolMessage):
        return AIMessage("Done.")
    if not reviews:
        todos = [
            {"content": "write add in /solution.py", "status": "in_progress"},
            {"content": "check it against the tests", "status": "pending"},
        ]
        return AIMessage(
            "", tool_calls=[{"name": "write_todos", "args": {"todos": todos}, "id": "plan"}]
        )
    edit = {"file_path": "/solution.py", "old_string": "a - b", "new_string": "a + b"}
    if "FAILED test_add" in reviews[-1].text:
        return AIMessage("", tool_calls=[{"name": "edit_file", "args": edit, "id": "fix"}])
    todos = [
        {"content": "write add in /solution.py", "status": "completed"},
        {"content": "check it against the tests", "status": "completed"},
    ]
    return AIMessage(
        "", tool_calls=[{"name": "write_todos", "args": {"todos": todos}, "id": "tick"}]
    )


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_deep_agent_writes_code_until_its_tests_pass_and_its_plan_is_done(call):
    agent = deepagents.create_deep_agent(
        model=FakeChat.of(planner_coder), tools=[], middleware=[TodoListMiddleware()]
    )
    evaluator = all_of(files_check(TESTS, timeout=20), todos_complete())
    loop = create_loop_agent(agent, evaluator, 5)  # it fixes what it is told
    request = {"messages": [HumanMessage("Write add(a, b) in /solution.py.")]}
    result = await loop.ainvoke(request) if call == "ainvoke" else loop.invoke(request)
    assert result["stop_reason"] == "accepted"
    feedback = result["feedback"]
    assert "FAILED test_add" in feedback[0]  # the tests' failure reached the agent
    assert "Not done yet" in feedback[1]  # then its unfinished plan
    assert "a + b" in result["agent_state"]["files"]["/solution.py"]["content"]
