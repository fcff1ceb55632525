"""The code-running evaluators inside ``create_agent``, as `LoopMiddleware`'s evaluator."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from loop_agents import LoopMiddleware
from loop_agents_checks import command_check
from tests.fakes import FakeChat

REQUEST = HumanMessage("What is six times seven? Answer with the number.")


def looped(model, evaluator):
    return create_agent(model, [], middleware=[LoopMiddleware(evaluator, max_iterations=3)])


def test_command_check_runs_each_answer(tmp_path):
    check = command_check('test "$(cat {answer_file})" = 42', cwd=tmp_path)
    result = looped(FakeChat.of("41", "42"), check).invoke({"messages": [REQUEST]})
    assert [r["stop"] for r in result["loop_records"]] == [False, True]
    assert "exit status 1" in result["loop_feedback"][0]
