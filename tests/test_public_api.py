"""The package's public names load on first use; importing the package stays light."""

from __future__ import annotations

import importlib
import importlib.resources
import subprocess
import sys

import pytest

import loop_agents


def test_every_public_name_loads_from_its_module():
    lazy = loop_agents._lazy_names()
    assert set(lazy) == set(loop_agents.__all__)  # the TYPE_CHECKING block lists them all
    for name in loop_agents.__all__:
        value = getattr(loop_agents, name)
        assert value is getattr(importlib.import_module(lazy[name]), name)
    assert set(loop_agents.__all__) <= set(dir(loop_agents))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'create_loop_agnet'"):
        _ = loop_agents.create_loop_agnet  # type: ignore[attr-defined]


def test_importing_the_package_loads_neither_langchain_nor_langgraph():
    script = (
        "import sys, loop_agents\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'langchain', 'langchain_core', 'langgraph', 'openai', 'httpx'}))\n"
        "from loop_agents import create_loop_agent\n"
        "print('langgraph' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.splitlines() == ["[]", "True"]


def test_the_top_level_holds_at_most_35_names_a_loop_s_user_needs():
    assert len(loop_agents.__all__) <= 35
    assert "check_xiangjianhuan" not in loop_agents.__all__  # the 相见欢 form is the demo's


@pytest.mark.parametrize("name", sorted(loop_agents._MOVED))
def test_a_moved_name_still_imports_with_a_deprecation_warning(name):
    new_module = loop_agents._MOVED[name]
    with pytest.warns(DeprecationWarning, match=f"from {new_module} import {name}"):
        value = getattr(loop_agents, name)
    assert value is getattr(importlib.import_module(new_module), name)


def test_the_old_graph_class_name_is_the_loop_agent():
    with pytest.warns(DeprecationWarning, match="now loop_agents.LoopAgent"):
        assert loop_agents.LoopAgentGraph is loop_agents.LoopAgent  # type: ignore[attr-defined]


def test_the_form_checker_s_old_paths_warn_and_work():
    import loop_agents.evaluators as evaluators
    from loop_agents.demos.xiangjianhuan import xiangjianhuan_form

    with pytest.warns(DeprecationWarning, match="loop_agents.demos.xiangjianhuan"):
        assert evaluators.xiangjianhuan_form is xiangjianhuan_form  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="moved to loop_agents.demos.xiangjianhuan"):
        from loop_agents.evaluators.xiangjianhuan import check_xiangjianhuan  # noqa: F401


def test_every_moved_name_is_listed_in_the_changelog():
    changelog = (
        importlib.resources.files("loop_agents").joinpath("..", "CHANGELOG.md")
    ).read_text()
    for name, module in loop_agents._MOVED.items():
        assert f"`{name}`" in changelog, name
        assert module in changelog, name


def test_loop_middleware_is_a_top_level_name_and_a_langchain_middleware():
    from langchain.agents.middleware import AgentMiddleware

    from loop_agents.loop.middleware import LoopMiddleware

    assert "LoopMiddleware" in loop_agents.__all__
    assert loop_agents.LoopMiddleware is LoopMiddleware
    assert issubclass(LoopMiddleware, AgentMiddleware)
