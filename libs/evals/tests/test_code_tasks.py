"""The bundled `code` task set: every task is well formed, and is checked against the two
solutions shipped beside it in ``code_reference.jsonl``.

The reference solution must pass the visible and the hidden tests without printing anything;
the wrong solution (a typical mistake) must fail the hidden tests. The set has two parts: in
``traps`` the wrong solution passes the visible tests (only the hidden ones catch it), in
``caught`` it fails them (so the feedback has something to say). Every program runs the way
the eval runs a model's answer: the solution's code followed by the tests, in the package's
runner.
"""

from __future__ import annotations

import ast
import asyncio
import json
import keyword
import re
import sys
from importlib.resources import files
from typing import Any

import pytest

from loop_agents_checks.sandbox import RunResult, arun_python

TASK_KEYS = {"id", "kind", "prompt", "entry_point", "tests", "hidden_tests", "part"}
REFERENCE_KEYS = {"id", "solution", "wrong_solution"}
PARTS = {"traps": 36, "caught": 14}
"""Each part and its number of tasks: the wrong solution passes the visible tests in
``traps`` and fails them in ``caught``."""
ID_FORMAT = re.compile(r"code-\d{3}(-[a-z0-9]+)+")
VISIBLE_ASSERTS = range(3, 7)
HIDDEN_ASSERTS = range(5, 13)
MAX_SOLUTION_LINES = 25
# a program takes ~0.1 s; the limit only stops a runaway one on a very busy machine
TIMEOUT = 30.0
CONCURRENCY = 4


def load_jsonl(name: str) -> list[dict[str, Any]]:
    """The rows of a bundled data file, one JSON object per line."""
    text = files("loop_agents_evals").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name} line {number} is not JSON: {error}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{name} line {number}: expected an object, got {row!r:.60}")
        rows.append(row)
    return rows


TASKS = load_jsonl("code.jsonl")
REFERENCES = load_jsonl("code_reference.jsonl")
IDS = [str(task.get("id")) for task in TASKS]
TASK = dict(zip(IDS, TASKS, strict=True))
REFERENCE = {str(row.get("id")): row for row in REFERENCES}


def program(code: str, tests: str) -> str:
    """A solution followed by tests, as one program (how the eval runs an answer)."""
    return code.rstrip("\n") + "\n\n" + tests


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str, str], RunResult]:
    """Every (task, solution or wrong_solution, tests or hidden_tests) program's result."""
    keys = [
        (task_id, solution, tests)
        for task_id in IDS
        for solution in ("solution", "wrong_solution")
        for tests in ("tests", "hidden_tests")
    ]

    async def run_all() -> list[RunResult]:
        slots = asyncio.Semaphore(CONCURRENCY)

        async def run(code: str) -> RunResult:
            async with slots:
                return await arun_python(code, timeout=TIMEOUT)

        return await asyncio.gather(
            *(run(program(REFERENCE[i][s], TASK[i][t])) for i, s, t in keys)
        )

    return dict(zip(keys, asyncio.run(run_all()), strict=True))


def _explain(result: RunResult) -> str:
    return (
        f"exit code {result.exit_code}, timed out {result.timed_out}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )


# -- the files ------------------------------------------------------------------------------


def test_the_set_has_at_least_32_tasks_with_unique_ids():
    assert len(TASKS) >= 32
    assert len(set(IDS)) == len(IDS), [i for i in IDS if IDS.count(i) > 1]


def test_every_task_has_a_reference_row_in_the_same_order():
    assert [row.get("id") for row in REFERENCES] == IDS


def test_the_parts_follow_each_other_and_the_ids_are_numbered_in_order():
    parts = [task.get("part") for task in TASKS]
    assert parts == [part for part, count in PARTS.items() for _ in range(count)]
    assert [int(i.split("-")[1]) for i in IDS] == list(range(1, len(IDS) + 1))


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_task_schema(task):
    assert set(task) == TASK_KEYS
    assert all(isinstance(task[key], str) and task[key].strip() for key in TASK_KEYS)
    assert task["kind"] == "code"
    assert task["part"] in PARTS
    assert ID_FORMAT.fullmatch(task["id"]), task["id"]
    entry_point = task["entry_point"]
    assert entry_point.isidentifier()
    assert not keyword.iskeyword(entry_point)
    assert f"`{entry_point}(" in task["prompt"], "the prompt must give the function's signature"
    assert "standard library" in task["prompt"]


@pytest.mark.parametrize("row", REFERENCES, ids=[str(r.get("id")) for r in REFERENCES])
def test_reference_schema(row):
    assert set(row) == REFERENCE_KEYS
    assert isinstance(row["id"], str)
    assert isinstance(row["solution"], str)
    assert isinstance(row["wrong_solution"], str)
    assert row["solution"].strip() != row["wrong_solution"].strip()


# -- the sources ----------------------------------------------------------------------------


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


def _defines(tree: ast.Module, name: str) -> bool:
    """Whether the source binds ``name`` (a def, a class or an assignment)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


def _calls(tree: ast.Module, name: str) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
        for node in ast.walk(tree)
    )


@pytest.mark.parametrize("task_id", IDS)
def test_sources_are_well_formed(task_id):
    task, reference = TASK[task_id], REFERENCE[task_id]
    entry_point = task["entry_point"]
    trees = {
        "solution": ast.parse(reference["solution"]),
        "wrong_solution": ast.parse(reference["wrong_solution"]),
        "tests": ast.parse(task["tests"]),
        "hidden_tests": ast.parse(task["hidden_tests"]),
    }
    for name, tree in trees.items():
        outside = _imports(tree) - set(sys.stdlib_module_names)
        assert not outside, f"{name} imports {outside}, outside the standard library"
    for name in ("solution", "wrong_solution"):
        assert any(
            isinstance(node, ast.FunctionDef) and node.name == entry_point
            for node in trees[name].body
        ), f"{name} does not define {entry_point}()"
    lines = [line for line in reference["solution"].splitlines() if line.strip()]
    assert len(lines) <= MAX_SOLUTION_LINES, "keep the answers short"
    for name, allowed in (("tests", VISIBLE_ASSERTS), ("hidden_tests", HIDDEN_ASSERTS)):
        tree = trees[name]
        asserts = sum(isinstance(node, ast.Assert) for node in ast.walk(tree))
        assert asserts in allowed, f"{name} has {asserts} asserts, expected {allowed}"
        assert _calls(tree, entry_point), f"{name} never calls {entry_point}()"
        silent = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert) and not n.msg]
        assert not silent, f"{name}: the asserts on lines {silent} have no message"
        assert not _defines(tree, entry_point), f"{name} would replace {entry_point}()"


# -- the programs ---------------------------------------------------------------------------


@pytest.mark.slow  # every program of the bundled set, run in the sandbox (200 runs)
@pytest.mark.parametrize("task_id", IDS)
def test_reference_solution_passes_visible_and_hidden_tests_silently(task_id, runs):
    for tests in ("tests", "hidden_tests"):
        result = runs[task_id, "solution", tests]
        assert result.ok, f"{tests}: {_explain(result)}"
        assert result.stdout == "", f"{tests} printed: {_explain(result)}"
        assert result.stderr == "", f"{tests} wrote to stderr: {_explain(result)}"


@pytest.mark.slow  # every program of the bundled set, run in the sandbox (200 runs)
@pytest.mark.parametrize("task_id", IDS)
def test_wrong_solution_fails_the_hidden_tests(task_id, runs):
    result = runs[task_id, "wrong_solution", "hidden_tests"]
    assert not result.ok, "the hidden tests let a wrong solution pass"
    assert not result.timed_out, _explain(result)
    assert "Error" in result.stderr, _explain(result)


@pytest.mark.slow  # every program of the bundled set, run in the sandbox (200 runs)
@pytest.mark.parametrize("task_id", IDS)
def test_wrong_solution_passes_the_visible_tests_in_traps_and_fails_them_in_caught(task_id, runs):
    result = runs[task_id, "wrong_solution", "tests"]
    if TASK[task_id]["part"] == "traps":
        assert result.ok, f"the visible tests catch the wrong solution: {_explain(result)}"
    else:
        assert not result.ok, "the visible tests let the wrong solution pass"
        assert not result.timed_out, _explain(result)
        assert "Error" in result.stderr, _explain(result)


@pytest.mark.slow  # every program of the bundled set, run in the sandbox (200 runs)
def test_a_failing_test_says_what_was_called_what_came_back_and_what_was_expected(runs):
    result = runs["code-003-additive-roman", "wrong_solution", "hidden_tests"]
    assert result.stderr.strip().splitlines()[-1] == (
        "AssertionError: additive_roman(4) returned 'IV', expected 'IIII'"
    )
