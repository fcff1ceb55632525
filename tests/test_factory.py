"""create_loop_agent: keywords are shorthand for controls, and the factory stays small."""

from __future__ import annotations

import ast
import inspect

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph.state import CompiledStateGraph

from loop_agents import create_loop_agent
from loop_agents.loop import factory
from loop_agents.loop.controls import (
    AgentErrors,
    AnswerSelection,
    Budgets,
    Candidates,
    History,
    LoopControl,
    Plateau,
    Retries,
)
from loop_agents.loop.graph import compile_loop
from loop_agents.loop.nodes import LoopNodes


def agent(messages):
    return "an answer"


def judge(context):
    return {"score": 1.0, "feedback": "fine", "stop": True}


def test_the_factory_body_is_at_most_40_lines():
    source = inspect.getsource(factory.create_loop_agent)
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    body = function.body[1:]  # the docstring aside
    lines = {n for statement in body for n in range(statement.lineno, statement.end_lineno + 1)}
    code = [source.splitlines()[n - 1] for n in sorted(lines)]
    assert len([line for line in code if line.strip()]) <= 40, len(code)


def test_no_function_repeats_the_factory_s_signature():
    options = set(inspect.signature(create_loop_agent).parameters)
    graph_options = set(inspect.signature(compile_loop).parameters)
    assert len(options & graph_options) < len(options) / 2


def test_defaults_build_no_control_and_a_plain_compiled_graph():
    loop = create_loop_agent(agent, judge, 3)
    assert isinstance(loop.graph, CompiledStateGraph)
    assert loop.invoke({"messages": [HumanMessage("Hi")]})["stop_reason"] == "accepted"


def controls_of(loop) -> list[LoopControl]:
    node = loop.graph.nodes["invoke_agent"].bound
    nodes = inspect.getclosurevars(node.func).nonlocals["program"].__self__
    assert isinstance(nodes, LoopNodes)
    return nodes.controls


def test_each_option_builds_its_control_in_the_order_their_hooks_need():
    loop = create_loop_agent(
        agent,
        judge,
        3,
        history="last_attempt",
        candidates=2,
        on_agent_error="feedback",
        patience=2,
        cost_budget=1.0,
        prices={"*": {"input": 1.0, "output": 1.0}},
        select="best",
        agent_timeout=5,
    )
    kinds = [type(c) for c in controls_of(loop)]
    assert kinds == [History, Candidates, AgentErrors, Budgets, Plateau, AnswerSelection, Retries]


def test_controls_of_your_own_come_after_the_built_in_ones():
    class Mine(LoopControl):
        def stop_reason(self, progress):
            return None

    mine = Mine()
    loop = create_loop_agent(agent, judge, 3, patience=1, controls=[mine])
    assert controls_of(loop)[-1] is mine


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_iterations": 0}, ValueError, "max_iterations must be >= 1"),
        ({"max_iterations": True}, TypeError, "max_iterations must be an int"),
        ({"name": " "}, TypeError, "name must be a non-empty string"),
        ({"store": {}}, TypeError, "store must be a LangGraph store"),
        ({"storage": "compressed"}, ValueError, "storage"),
        ({"controls": [object()]}, TypeError, "LoopControl"),
        ({"controls": "x"}, TypeError, "list of LoopControl"),
        ({"patience": 0}, ValueError, "patience must be >= 1"),
    ],
)
def test_a_wrong_option_is_named_before_anything_runs(options, error, match):
    with pytest.raises(error, match=match):
        create_loop_agent(agent, judge, **options)


def test_every_control_option_is_an_option_of_the_factory():
    from loop_agents.loop.options import CONTROL_OPTIONS

    assert set(inspect.signature(create_loop_agent).parameters) >= CONTROL_OPTIONS
    assert {"select", "controls"} <= CONTROL_OPTIONS
