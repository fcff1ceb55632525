"""The package's public names load on first use; importing the package stays light."""

from __future__ import annotations

import importlib
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
