"""The tree is the architecture: every module in a layer, imports only downward, no cycle.

The library's layers and their order are the numbered list in ``loop_agents/__init__.py``'s
docstring. The distributions of ``libs/`` are built on the library's public names only,
import only the distributions they depend on, and have no import cycle either. Every import of a ``loop_agents`` module counts for the layer rule, also one
inside a function or under ``TYPE_CHECKING``: the rule is about what a layer may know.
For cycles, the imports that run count (module level and inside functions); one under
``TYPE_CHECKING`` never runs, so a type-only reference back is not a cycle.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import loop_agents

PACKAGE = Path(loop_agents.__file__).resolve().parent
ROOT = PACKAGE.parent
SIBLINGS = {
    "loop_agents_checks": (ROOT / "libs" / "checks" / "loop_agents_checks", {"loop_agents"}),
    "loop_agents_cli": (
        ROOT / "libs" / "cli" / "loop_agents_cli",
        {"loop_agents", "loop_agents_checks"},
    ),
    "loop_agents_evals": (
        ROOT / "libs" / "evals" / "loop_agents_evals",
        {"loop_agents", "loop_agents_checks", "loop_agents_cli"},
    ),
}
"""Each distribution of libs/: its package folder, and the packages it may import (its
pyproject.toml's dependencies)."""
ROOT_MODULES = {"loop_agents", "loop_agents._version"}
"""The modules beside the layers: the public API (above every layer) and the version
(below every layer: anything may read it, it imports nothing)."""


def documented_layers(doc: str) -> list[str]:
    """The layers, lowest first, as ``loop_agents``' docstring lists them."""
    return re.findall(r"^\s*\d+\. ``(\w+)``:", doc, flags=re.MULTILINE)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a module or package of the tree)
    line: int
    runs: bool  # False under `if TYPE_CHECKING:`: never executed


def module_name(path: Path, package: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in {
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        }:
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or 0) + 1))
    return lines


def _resolve(name: str, modules: Mapping[str, str]) -> str:
    """The module of the tree that ``name`` (a module, or a module's attribute) is in."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def imports_of(modules: Mapping[str, str], root: str = "loop_agents") -> Iterator[Import]:
    """Every import of one of ``modules`` (name -> source, all in package ``root``) by another."""
    for source, text in modules.items():
        tree = ast.parse(text)
        type_only = _type_checking_lines(tree)
        is_package = f"{source}." in {f"{m.rpartition('.')[0]}." for m in modules}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the importing module's package
                    base = source.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                # `from pkg import submodule` imports the submodule
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            for target in targets:
                if target.split(".")[0] != root:
                    continue
                resolved = _resolve(target, modules)
                if resolved == source or (resolved != root and source.startswith(f"{resolved}.")):
                    continue  # a package of its own (not the public API): imported already
                yield Import(source, resolved, node.lineno, node.lineno not in type_only)


def layer_of(module: str, layers: list[str]) -> int | None:
    """The rank of ``module``'s layer (0 the lowest); ``None`` for a module in no layer."""
    if module == "loop_agents":
        return len(layers)  # the public API re-exports every layer: above them all
    if module == "loop_agents._version":
        return -1
    first = module.split(".")[1]
    return layers.index(first) if first in layers else None


def layer_violations(modules: Mapping[str, str], layers: list[str]) -> list[str]:
    """Each import of a module from a later layer (or from the public API)."""
    problems = []
    for found in imports_of(modules):
        source, target = layer_of(found.source, layers), layer_of(found.target, layers)
        if source is None or target is None:
            continue  # reported by the test that every module is in a layer
        if target > source:
            where = "the public API" if found.target == "loop_agents" else found.target
            problems.append(
                f"{found.source} (line {found.line}) imports {where}, a later layer: move the "
                f"shared code down, or the importing code up"
            )
    return problems


def import_cycles(modules: Mapping[str, str], root: str = "loop_agents") -> list[list[str]]:
    """The import cycles among ``modules`` (imports that run), each as its modules."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for found in imports_of(modules, root):
        if found.runs:
            graph[found.source].add(found.target)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    cycles.append(sorted(component))
    return cycles


def package_modules(package: Path = PACKAGE) -> dict[str, str]:
    return {
        module_name(path, package): path.read_text(encoding="utf-8")
        for path in sorted(package.rglob("*.py"))
    }


LAYERS = documented_layers(loop_agents.__doc__ or "")


# -- the package ---------------------------------------------------------------------------


def test_the_docstring_lists_the_layers_and_each_is_a_documented_folder():
    assert len(LAYERS) == len(set(LAYERS)) >= 5, LAYERS
    assert LAYERS.index("loop") < LAYERS.index("evaluators")  # evaluators build on the loop
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        assert init.is_file(), f"loop_agents/{layer}/ has no __init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring, f"loop_agents/{layer}/__init__.py says nothing about what belongs there"


def test_every_module_is_in_a_layer():
    stray = [
        name
        for name in package_modules()
        if name not in ROOT_MODULES and layer_of(name, LAYERS) is None
    ]
    assert not stray, f"modules in no layer (move each into the folder of its layer): {stray}"


def test_every_subpackage_says_what_belongs_there():
    for init in PACKAGE.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), init


def test_imports_only_go_down_the_layers():
    assert layer_violations(package_modules(), LAYERS) == []


def test_no_import_cycle():
    assert import_cycles(package_modules()) == []


def test_the_loop_imports_no_evaluator_model_or_terminal():
    allowed = ("loop_agents._version", "loop_agents.loop", "loop_agents.runtime")
    for found in imports_of(package_modules()):
        if found.source.startswith(("loop_agents.loop.", "loop_agents.runtime.")):
            assert found.target.startswith(allowed), found


def test_the_core_knows_nothing_of_its_hosts_or_of_particular_controls():
    for found in imports_of(package_modules()):
        if found.source.startswith("loop_agents.loop."):
            assert not found.target.startswith(("loop_agents.hosts", "loop_agents.controls")), found


def test_no_two_modules_import_each_other():
    pairs = {(f.source, f.target) for f in imports_of(package_modules())}  # type-only too
    assert sorted((a, b) for a, b in pairs if (b, a) in pairs and a < b) == []


# -- the distributions of libs/ -----------------------------------------------------------


def external_imports(package: Path) -> Iterator[tuple[str, int, str, list[str]]]:
    """Every import in ``package`` of another top-level package: (file, line, module, names)."""
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield str(path.relative_to(ROOT)), node.lineno, alias.name, []
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [alias.name for alias in node.names]
                yield str(path.relative_to(ROOT)), node.lineno, node.module, names


@pytest.mark.parametrize("sibling", sorted(SIBLINGS))
def test_a_distribution_of_libs_uses_only_the_library_s_public_names(sibling):
    folder, _ = SIBLINGS[sibling]
    private = [
        f"{where}:{line}: {module} {names}"
        for where, line, module, names in external_imports(folder)
        if module.split(".")[0] == "loop_agents"
        and (
            any(part.startswith("_") for part in module.split("."))
            or any(name.startswith("_") for name in names)
        )
    ]
    assert not private, f"{sibling} imports private names of loop_agents: {private}"


@pytest.mark.parametrize("sibling", sorted(SIBLINGS))
def test_a_distribution_of_libs_imports_only_what_it_depends_on(sibling):
    folder, allowed = SIBLINGS[sibling]
    ours = {"loop_agents", *SIBLINGS}
    stray = [
        f"{where}:{line}: {module}"
        for where, line, module, _ in external_imports(folder)
        if module.split(".")[0] in ours - allowed - {sibling}
    ]
    assert not stray, f"{sibling} imports distributions it does not depend on: {stray}"


@pytest.mark.parametrize("sibling", sorted(SIBLINGS))
def test_a_distribution_of_libs_has_no_import_cycle(sibling):
    folder, _ = SIBLINGS[sibling]
    assert import_cycles(package_modules(folder), sibling) == []


def test_the_library_imports_no_distribution_of_libs():
    stray = [
        f"{where}:{line}: {module}"
        for where, line, module, _ in external_imports(PACKAGE)
        if module.split(".")[0] in SIBLINGS
    ]
    assert not stray


CORE_LINES = 12_500
"""The library's size in lines, blank lines, docstrings and comments included: what the
breadth in libs/ keeps out of it."""


def test_the_library_stays_within_its_size():
    lines = sum(len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py"))
    assert lines <= CORE_LINES, (
        f"loop_agents/ holds {lines:,} lines, over {CORE_LINES:,}: merge or remove before adding"
    )


def test_the_library_s_front_door_loads_none_of_the_breadth():
    # what a LangChain user who wants the loop imports loads nothing of the siblings, nor
    # what only the command, the demo or the evals need, beyond what LangGraph and
    # LangChain load themselves (langgraph.runtime imports httpx, which loads rich when it
    # is installed); tests/repository/test_wheel.py checks it with the library alone
    program = (
        "import sys\n"
        "heavy = ('loop_agents_cli', 'loop_agents_evals', 'loop_agents_checks', 'rich',\n"
        "         'aiosqlite', 'openai', 'langchain_openai', 'dotenv')\n"
        "def loaded(): return {m for m in sys.modules if m.split('.')[0] in heavy}\n"
        "import langgraph.graph, langchain.agents, langchain_core.runnables\n"
        "before = loaded()\n"
        "from loop_agents import LoopMiddleware, create_loop_agent, llm_judge, rule\n"
        "print(sorted(loaded() - before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


# -- the checks themselves, on made-up trees -----------------------------------------------

TOY_LAYERS = ["low", "high"]


def test_an_import_from_a_later_layer_is_reported_wherever_it_is():
    modules = {
        "loop_agents.low": '"""Low."""',
        "loop_agents.low.a": "def f():\n    from loop_agents.high.b import g\n",
        "loop_agents.low.c": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from loop_agents.high import b\n"
        ),
        "loop_agents.high": '"""High."""',
        "loop_agents.high.b": "from loop_agents.low.a import f\n",
    }
    problems = layer_violations(modules, TOY_LAYERS)
    assert len(problems) == 2
    assert problems[0].startswith("loop_agents.low.a (line 2) imports loop_agents.high.b")
    assert problems[1].startswith("loop_agents.low.c (line 3) imports loop_agents.high.b")


def test_the_public_api_is_above_every_layer():
    modules = {
        "loop_agents": "from loop_agents.low.a import f\n",
        "loop_agents.low": "",
        "loop_agents.low.a": "from loop_agents import f\n",
        "loop_agents._version": "",
        "loop_agents.high": "from loop_agents._version import v\n",
    }
    problems = layer_violations(modules, TOY_LAYERS)
    assert problems == [
        "loop_agents.low.a (line 1) imports the public API, a later layer: move the shared "
        "code down, or the importing code up"
    ]


def test_a_cycle_is_found_and_a_type_only_reference_back_is_not_one():
    modules = {
        "loop_agents.low": "",
        "loop_agents.low.a": "from loop_agents.low import b\n",
        "loop_agents.low.b": "import loop_agents.low.c\n",
        "loop_agents.low.c": "def f():\n    from loop_agents.low.a import x\n",
        "loop_agents.low.d": "from loop_agents.low.e import y\n",
        "loop_agents.low.e": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from loop_agents.low.d import z\n"
        ),
    }
    assert import_cycles(modules) == [
        ["loop_agents.low.a", "loop_agents.low.b", "loop_agents.low.c"]
    ]


def test_a_package_importing_its_own_modules_is_not_a_cycle():
    modules = {
        "loop_agents.low": "from loop_agents.low.a import f\n",
        "loop_agents.low.a": "from loop_agents.low import b\n",
        "loop_agents.low.b": "",
    }
    assert import_cycles(modules) == []


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("Layers:\n\n1. ``sandbox``: x.\n2. ``models``: y\n   more.\n", ["sandbox", "models"]),
        ("1. sandbox: not quoted\n", []),
    ],
)
def test_the_layers_are_read_from_the_numbered_list(doc, expected):
    assert documented_layers(doc) == expected
