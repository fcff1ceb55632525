"""The two hosts take controls: small factories, same defaults, the removed keywords named."""

from __future__ import annotations

import ast
import inspect
import warnings
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import RetryPolicy

from loop_agents import LoopMiddleware, create_loop_agent
from loop_agents.controls import (
    Adaptive,
    Advice,
    AgentErrors,
    AnswerSelection,
    Budgets,
    Candidates,
    Criteria,
    DiverseFirst,
    FeedbackStyle,
    History,
    LoopControl,
    Plateau,
    Restart,
    Retries,
    Stagnation,
)
from loop_agents.hosts import graph
from loop_agents.hosts.removed_keywords import REMOVED_KEYWORDS
from loop_agents.loop.nodes import LoopNodes
from tests.fakes import FakeChat


def agent(messages):
    return "an answer"


def judge(context):
    return {"score": 1.0, "feedback": "fine", "stop": True}


def stated(context):
    """`judge`, stating its criteria (for `Criteria()`)."""
    return judge(context)


stated.criteria = "Short."  # type: ignore[attr-defined]


def keyword_options(function: Any) -> list[str]:
    return [
        name
        for name, p in inspect.signature(function).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def test_the_factories_take_controls_and_a_few_structural_keywords():
    assert len(keyword_options(create_loop_agent)) <= 10
    assert len(keyword_options(LoopMiddleware.__init__)) <= 6
    assert "controls" in keyword_options(create_loop_agent)
    assert "controls" in keyword_options(LoopMiddleware.__init__)


def test_both_forms_have_the_same_defaults():
    factory = inspect.signature(create_loop_agent).parameters
    middleware = inspect.signature(LoopMiddleware.__init__).parameters
    for name in set(factory) & set(middleware) - {"evaluator"}:
        assert factory[name].default == middleware[name].default, name
    assert factory["max_iterations"].default == 100  # seed 001's default


def test_the_factory_body_is_at_most_40_lines():
    source = inspect.getsource(graph.create_loop_agent)
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    body = function.body[1:]  # the docstring aside
    lines = {n for statement in body for n in range(statement.lineno, statement.end_lineno + 1)}
    assert len(lines) <= 40


def test_the_middleware_module_does_not_import_the_graph_compiler():
    import subprocess
    import sys

    code = (
        "import sys, loop_agents.hosts.middleware; print('loop_agents.hosts.graph' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_defaults_build_no_control_and_a_plain_compiled_graph():
    loop = create_loop_agent(agent, judge, 3)
    assert isinstance(loop.graph, CompiledStateGraph)
    assert controls_of(loop) == []  # the seed's loop: every retry a repair
    assert loop.invoke({"messages": [HumanMessage("Hi")]})["stop_reason"] == "accepted"


def controls_of(loop) -> list[LoopControl]:
    node = loop.graph.nodes["evaluate"].bound
    nodes = inspect.getclosurevars(node.func).nonlocals["program"].__self__
    assert isinstance(nodes, LoopNodes)
    return nodes.controls


def test_controls_run_in_stage_order_whatever_the_order_given():
    given = [
        Retries(agent_timeout=5),
        AnswerSelection("best"),
        Stagnation(),
        Plateau(2),
        Budgets(cost_budget=1.0, prices={"*": {"input": 1.0, "output": 1.0}}),
        AgentErrors(),
        Candidates(2),
        History("last_attempt"),
    ]
    kinds = [type(c) for c in controls_of(create_loop_agent(agent, judge, 3, controls=given))]
    assert kinds == [
        History,
        Candidates,
        AgentErrors,
        Budgets,
        Plateau,
        Stagnation,
        AnswerSelection,
        Retries,
    ]


def test_controls_of_your_own_come_after_the_built_in_ones():
    class Mine(LoopControl):
        def stop_reason(self, progress):
            return None

    mine = Mine()
    loop = create_loop_agent(agent, judge, 3, controls=[mine, Plateau(1)])
    assert controls_of(loop)[-1] is mine


@pytest.mark.parametrize(
    ("controls", "match"),
    [
        ([DiverseFirst(2), Candidates(3)], "'diverse_first' .*'candidates' .*cannot work together"),
        ([DiverseFirst(2), DiverseFirst(3)], "a loop takes one DiverseFirst; keep one"),
        ([Restart(), Adaptive()], "both take on 'retry_kind'"),
        ([AnswerSelection("best"), AnswerSelection("last")], "one AnswerSelection"),
        ([Retries(agent_timeout=1), Retries(evaluator_timeout=2)], "one Retries"),
    ],
)
def test_controls_that_cannot_work_together_are_refused_when_the_loop_is_built(controls, match):
    with pytest.raises(ValueError, match=match):
        create_loop_agent(agent, judge, 3, controls=controls)
    inside = [c for c in controls if not c.fans_out]
    if len(inside) == len(controls):
        with pytest.raises(ValueError, match=match):
            LoopMiddleware(judge, 3, controls=inside)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: DiverseFirst(0), ValueError, r"DiverseFirst\(k=\) must be from 1 to 64"),
        (lambda: DiverseFirst(65), ValueError, r"DiverseFirst\(k=\) must be from 1 to 64"),
        (lambda: DiverseFirst(1), ValueError, r"DiverseFirst\(k=\) makes k first answers"),
        (lambda: Candidates(True), TypeError, r"Candidates\(candidates=\) must be an int"),
        (lambda: Plateau(0), ValueError, r"Plateau\(patience=\)"),
        (lambda: Criteria(""), TypeError, r"Criteria\(text=\)"),
        (lambda: Advice("high"), TypeError, "threshold must be a finite number"),
        (lambda: FeedbackStyle("{text}"), ValueError, "uses \\['text'\\]"),
    ],
)
def test_every_error_names_the_control_and_its_parameter(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_temperature_for_an_agent_that_has_none_is_refused_when_the_loop_is_built():
    with pytest.raises(TypeError, match=r"DiverseFirst\(temperature=\) sets a chat model's"):
        create_loop_agent(agent, judge, 3, controls=[DiverseFirst(2, temperature=0.5)])
    # a chat model takes it
    create_loop_agent(FakeChat.of("a"), judge, 3, controls=[DiverseFirst(2, temperature=0.5)])


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_iterations": 0}, ValueError, "max_iterations must be >= 1"),
        ({"max_iterations": True}, TypeError, "max_iterations must be an int"),
        ({"name": " "}, TypeError, "name must be a non-empty string"),
        ({"store": {}}, TypeError, "store must be a LangGraph store"),
        ({"storage": "compressed"}, ValueError, "storage"),
        ({"controls": [object()]}, TypeError, "LoopControl"),
        ({"controls": [Stagnation]}, TypeError, "a class: call it"),
        ({"controls": "x"}, TypeError, "list of LoopControl"),
        (
            {"selct": "best"},
            TypeError,
            r"^create_loop_agent\(\) got an unexpected keyword argument 'selct'$",
        ),
    ],
)
def test_a_wrong_option_is_named_before_anything_runs(options, error, match):
    with pytest.raises(error, match=match):
        create_loop_agent(agent, judge, **options)


# -- the keyword options removed in 0.3: each names the control it became -------------------


@pytest.mark.parametrize(
    ("options", "shown", "control"),
    [
        ({"select": "best"}, "AnswerSelection('best')", lambda: AnswerSelection("best")),
        ({"select": "last"}, "AnswerSelection('last')", lambda: AnswerSelection("last")),
        ({"patience": 2}, "Plateau(2)", lambda: Plateau(2)),
        ({"min_delta": 5}, "Plateau(N, min_delta=5)", lambda: Plateau(2, min_delta=5)),
        ({"history": "last_attempt"}, "History('last_attempt')", lambda: History("last_attempt")),
        ({"feedback_format": "{feedback}"}, "FeedbackStyle('{feedback}')", lambda: FeedbackStyle("{feedback}")),
        ({"candidates": 2}, "Candidates(2)", lambda: Candidates(2)),
        ({"candidate_temperature": 0.7}, "Candidates(k, temperature=0.7)", lambda: Candidates(2, temperature=0.7)),
        ({"threshold": 80}, "Advice(80)", lambda: Advice(80)),
        ({"advisor": None}, "Advice(model=None)", lambda: Advice(model=None)),
        ({"show_criteria": True}, "Criteria()", lambda: Criteria()),
        ({"criteria": "Short."}, "Criteria('Short.')", lambda: Criteria("Short.")),
        ({"token_budget": 100}, "Budgets(token_budget=100)", lambda: Budgets(token_budget=100)),
        ({"on_agent_error": "feedback"}, "AgentErrors('feedback')", lambda: AgentErrors("feedback")),
        ({"max_agent_errors": 2}, "AgentErrors(max_agent_errors=2)", lambda: AgentErrors(max_agent_errors=2)),
        ({"agent_timeout": 5}, "Retries(agent_timeout=5)", lambda: Retries(agent_timeout=5)),
    ],
)  # fmt: skip
def test_a_removed_keyword_is_refused_with_the_control_it_became(options, shown, control):
    (name,) = options
    with pytest.raises(TypeError) as raised:
        create_loop_agent(FakeChat.of("a"), judge, 3, **options)
    assert str(raised.value) == (
        f"create_loop_agent() got an unexpected keyword argument {name!r}: removed in "
        f"loop_agents 0.3; pass controls=[{shown}]"
    )
    # and the control named builds the loop the keyword did
    loop = create_loop_agent(FakeChat.of("a"), stated, 3, controls=[control()])
    assert [type(c) for c in controls_of(loop)] == [type(control())]


def test_the_middleware_refuses_the_removed_keywords_the_same_way():
    with pytest.raises(TypeError) as raised:
        LoopMiddleware(judge, 3, select="best")
    assert str(raised.value) == (
        "LoopMiddleware.__init__() got an unexpected keyword argument 'select': removed in "
        "loop_agents 0.3; pass controls=[AnswerSelection('best')]"
    )
    middleware = LoopMiddleware(judge, 3, controls=[AnswerSelection("best")])
    create_agent(FakeChat.of("a"), middleware=[middleware])


def test_a_long_value_is_shortened_in_the_hint():
    with pytest.raises(TypeError, match=r"pass controls=\[Criteria\('x{56}\.\.\.\)\]$"):
        create_loop_agent(agent, judge, 3, criteria="x" * 500)


def test_every_removed_keyword_names_a_control_of_loop_agents_controls():
    import loop_agents.controls

    for name, control in REMOVED_KEYWORDS.items():
        assert control.split("(")[0] in loop_agents.controls.__all__, name
        assert name not in keyword_options(create_loop_agent), name
        assert name not in keyword_options(LoopMiddleware.__init__), name


def test_controls_warn_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create_loop_agent(agent, judge, 3, controls=[AnswerSelection("best"), Plateau(2)])
        LoopMiddleware(judge, 3, controls=[AnswerSelection("best")])


def test_retries_as_a_control():
    retries = Retries(agent_retry_policy=RetryPolicy(max_attempts=2))
    loop = create_loop_agent(agent, judge, 3, controls=[retries])
    assert loop.graph.nodes["invoke_agent"].retry_policy is not None
