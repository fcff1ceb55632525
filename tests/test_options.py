"""check_options: the options of create_loop_agent, checked in one place."""

from __future__ import annotations

import inspect

import pytest

from loop_agents import create_loop_agent
from loop_agents.loop.options import check_options


def agent(messages):
    return "an answer"


def judge(context):
    return {"score": 1.0, "feedback": "fine", "stop": True}


def test_check_options_takes_create_loop_agents_options_with_the_same_defaults():
    loop = inspect.signature(create_loop_agent).parameters
    checked = inspect.signature(check_options).parameters
    built_elsewhere = {"checkpointer"}
    assert list(checked) == [name for name in loop if name not in built_elsewhere]
    for name, parameter in checked.items():
        assert parameter.default == loop[name].default, name
        assert parameter.kind == loop[name].kind, name


def test_the_defaults_check():
    options = check_options(agent, judge)
    assert options.max_iterations == 100
    assert options.stop_policy.max_iterations == 100
    assert (options.select, options.output_mode, options.storage) == ("last", "full_state", "auto")


def test_the_docstring_example():
    options = check_options(agent, judge, 3, select="best", patience=2)
    assert options.max_iterations == 3
    assert options.select == "best"
    assert options.stop_policy.patience == 2


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_iterations": 0}, ValueError, "max_iterations must be >= 1"),
        ({"max_iterations": True}, TypeError, "max_iterations must be an int"),
        ({"name": " "}, TypeError, "name must be a non-empty string"),
        ({"store": {}}, TypeError, "store must be a LangGraph store"),
        ({"storage": "compressed"}, ValueError, "storage"),
    ],
)
def test_the_first_wrong_option_is_named(options, error, match):
    with pytest.raises(error, match=match):
        check_options(agent, judge, **options)
