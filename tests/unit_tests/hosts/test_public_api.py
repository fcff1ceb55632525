"""The package's public names load on first use; importing the package stays light."""

from __future__ import annotations

import importlib
import importlib.resources
import subprocess
import sys

import pytest

import loop_agents


def test_every_public_name_loads_from_its_module():
    import ast
    import inspect

    lazy = loop_agents._LAZY
    assert set(lazy) == set(loop_agents.__all__)
    # the TYPE_CHECKING block (what type checkers read) imports the same names, from there
    tree = ast.parse(inspect.getsource(loop_agents))
    block = next(n for n in tree.body if isinstance(n, ast.If))
    imported = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == lazy
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


def test_the_names_marked_as_moved_are_gone():
    for name in ("LoopAgentGraph", "thread_guard", "compacting", "record_answer"):
        with pytest.raises(AttributeError):
            getattr(loop_agents, name)


def test_the_names_deprecated_in_0_2_are_gone():
    import loop_agents.controls as controls

    with pytest.raises(ModuleNotFoundError, match=r"loop_agents\.loop\.controls"):
        importlib.import_module("loop_agents.loop.controls")
    for name in ("ScoreThreshold", "Advisor"):  # Advice(threshold, model=...)
        assert not hasattr(controls, name)
    with pytest.raises(ModuleNotFoundError, match=r"loop_agents\.controls\.shorthands"):
        importlib.import_module("loop_agents.controls.shorthands")


def test_loop_middleware_is_a_top_level_name_and_a_langchain_middleware():
    from langchain.agents.middleware import AgentMiddleware

    from loop_agents.hosts.middleware import LoopMiddleware

    assert "LoopMiddleware" in loop_agents.__all__
    assert loop_agents.LoopMiddleware is LoopMiddleware
    assert issubclass(LoopMiddleware, AgentMiddleware)
