r"""Running a code task's tests on an answer, in the package's sandbox (`arun_python`).

The answer's code is taken from its Markdown (the first Python block that defines the
task's function, else the first Python block, else the whole answer), and run in a
child process with `loop_agents.sandbox.arun_python` (its isolation, limits and clean
environment; see `loop_agents.sandbox`) together with a small harness. The harness
loads the code, then runs each test (an ``assert`` with the statements before it) on
its own, with a time limit per statement, and reports which passed; for a failed
``assert f(x) == y`` without a message it also reports what ``f(x)`` gave. The report
reaches the parent on a duplicate of stdout, marked with a random token, after which
the child exits at once: output the answer prints, ``atexit`` handlers and leftover
threads cannot stand in for it, and a program that never reports has failed.

The token keeps an answer from passing by accident (printing something that looks like
a report); an answer written to cheat could read it from its own program, so the
verdict is as trustworthy as the model is honest, within the sandbox's walls.

Example:
    ```python
    report = await arun_tests("def double(x):\n    return 2 * x\n", "assert double(2) == 4",
                              entry_point="double")
    assert report.passed
    ```
"""

from __future__ import annotations

import ast
import json
import secrets
from dataclasses import dataclass

from loop_agents.evaluators.code_review import extract_python_blocks
from loop_agents.sandbox import arun_python

__all__ = ["CodeReport", "TestOutcome", "arun_tests", "code_feedback", "extract_code"]

DEFAULT_TIMEOUT = 10.0
"""Seconds the answer's code and all its tests may take together."""
PER_TEST_TIMEOUT = 3.0
"""Seconds one test statement (or loading the code) may take."""
_DETAIL_CHARS = 200
_MAX_OUTPUT = 400_000

_HARNESS = r"""
import json as _json, os as _os, signal as _signal, traceback as _traceback
_write, _exit, _fd = _os.write, _os._exit, _os.dup(1)
_TOKEN = {token!r}
_CODE = {code!r}
_TESTS = {tests!r}
_ENTRY = {entry!r}
_LIMIT = {limit!r}
_CHARS = {chars!r}


def _report(value):
    _write(_fd, ("\n" + _TOKEN + _json.dumps(value) + "\n").encode())
    _exit(0)


class _TestTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _TestTimeout()


def _short(text):
    text = str(text)
    return text if len(text) <= _CHARS else text[: _CHARS - 3] + "..."


def _error(exc):
    if isinstance(exc, _TestTimeout):
        return "did not finish within %g s" % _LIMIT
    return _short("".join(_traceback.format_exception_only(type(exc), exc)).strip())


def _run(source, namespace, filename, mode="exec"):
    _signal.setitimer(_signal.ITIMER_REAL, _LIMIT)
    try:
        return eval(compile(source, filename, mode), namespace)
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)


_signal.signal(_signal.SIGALRM, _alarm)
_namespace = {{"__name__": "solution"}}
try:
    _run(_CODE, _namespace, "solution.py")
except BaseException as exc:
    _report({{"load_error": _error(exc)}})
if not callable(_namespace.get(_ENTRY)):
    _report({{"load_error": "missing"}})
_results = []
for _test in _TESTS:
    _outcome = [True, "", -1, False]
    for _index, (_source, _left) in enumerate(_test):
        try:
            _run(_source, _namespace, "tests.py")
            continue
        except AssertionError as exc:
            if str(exc):
                _outcome = [False, _short(exc), _index, True]
            elif _left is not None:
                try:
                    _got = "got " + _short(repr(_run(_left, _namespace, "tests.py", "eval")))
                except BaseException as inner:
                    _got = _error(inner)
                _outcome = [False, _got, _index, False]
            else:
                _outcome = [False, "assertion failed", _index, False]
        except BaseException as exc:
            _outcome = [False, _error(exc), _index, False]
        break
    _results.append(_outcome)
_report({{"results": _results}})
"""


@dataclass(frozen=True)
class TestOutcome:
    """One test's result.

    A test is an ``assert`` statement with the statements before it (since the previous
    ``assert``), e.g. ``got = f(2)`` then ``assert got == 4, f"f(2) returned {got}"``.

    Attributes:
        source: The statement that failed (the ``assert`` when the test passed).
        passed: Whether every statement of the test ran without error.
        detail: Why it failed: the assert's own message, ``"got 6"`` for a failed
            ``assert x == y`` without one, an exception, a timeout; ``""`` if it passed.
        explained: Whether ``detail`` is the assert's own message (then it is shown
            alone in the feedback).
    """

    __test__ = False  # not a pytest class

    source: str
    passed: bool
    detail: str = ""
    explained: bool = False


@dataclass(frozen=True)
class CodeReport:
    """The tests of a code task, run on one answer.

    Attributes:
        problem: Why no test could run (no code, the code did not load, no function of
            that name, a timeout); ``None`` when the tests ran.
        outcomes: One per test statement, in order (empty when ``problem`` is set).
    """

    problem: str | None
    outcomes: tuple[TestOutcome, ...] = ()

    @property
    def passed(self) -> bool:
        """Whether the code loaded and every test passed."""
        return self.problem is None and all(o.passed for o in self.outcomes)


def extract_code(answer: str, entry_point: str) -> str | None:
    r"""The code of an answer: a Python block defining ``entry_point``, else the first block.

    Without any fenced block the whole answer is taken when it parses as Python, else its
    lines before its first fence line when they parse and define ``entry_point`` (small
    models often write the code bare, then a stray closing fence and prose). Returns
    ``None`` when the answer holds no code.

    Example:
        ```python
        assert extract_code("```python\ndef f():\n    return 1\n```", "f").startswith("def f")
        ```
    """
    blocks = extract_python_blocks(answer)
    for block in blocks:
        if _defines(block, entry_point):
            return block
    if blocks:
        return blocks[0]
    try:
        ast.parse(answer)
    except SyntaxError:
        return _leading_code(answer, entry_point)
    return answer if answer.strip() else None


def _leading_code(answer: str, entry_point: str) -> str | None:
    """The lines of ``answer`` before its first fence line, if they define ``entry_point``."""
    lines = answer.splitlines()
    fence = next((i for i, line in enumerate(lines) if line.lstrip().startswith("```")), None)
    if fence is None or fence == 0:
        return None
    code = "\n".join(lines[:fence]) + "\n"
    return code if _defines(code, entry_point) else None


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign)
        and name in _names(node)
        for node in tree.body
    )


def _names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {getattr(node, "name", "")}


_Statement = tuple[str, str | None]


def _split_tests(tests: str) -> list[list[_Statement]]:
    """The tests: runs of top-level statements, each ending with an ``assert``.

    Each statement comes with the left side of an ``assert a == b`` when it is one
    (to show what ``a`` was). Statements after the last ``assert`` form a last test.
    """
    tree = ast.parse(tests)
    groups: list[list[_Statement]] = [[]]
    for node in tree.body:
        source = ast.get_source_segment(tests, node) or ast.unparse(node)
        left: str | None = None
        if (
            isinstance(node, ast.Assert)
            and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Eq)
        ):
            left = ast.unparse(node.test.left)
        groups[-1].append((source, left))
        if isinstance(node, ast.Assert):
            groups.append([])
    return [group for group in groups if group]


async def arun_tests(
    code: str,
    tests: str,
    *,
    entry_point: str,
    timeout: float = DEFAULT_TIMEOUT,
    per_test_timeout: float = PER_TEST_TIMEOUT,
) -> CodeReport:
    """Run ``tests`` (assert statements) after ``code`` in a child process.

    Args:
        code: The answer's code.
        tests: The task's tests: Python statements; each ``assert`` with the statements
            before it is one test, run on its own.
        entry_point: The function the code must define.
        timeout: Seconds for the whole run (loading and every test).
        per_test_timeout: Seconds for loading the code and for each statement.

    Returns:
        A `CodeReport`.

    Example:
        ```python
        report = await arun_tests(code, task.hidden_tests, entry_point=task.entry_point)
        ```
    """
    token = f"@@loop-agents-tests-{secrets.token_hex(16)}@@"
    groups = _split_tests(tests)
    program = _HARNESS.format(
        token=token,
        code=code,
        tests=groups,
        entry=entry_point,
        limit=per_test_timeout,
        chars=_DETAIL_CHARS,
    )
    result = await arun_python(program, timeout=timeout, max_output=_MAX_OUTPUT)
    report = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(token):
            report = json.loads(line[len(token) :])
            break
    if report is None:
        if result.timed_out:
            return CodeReport(f"the code and its tests did not finish within {timeout:g} s")
        tail = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return CodeReport(f"the program ended (exit code {result.exit_code}) early: {tail}")
    if "load_error" in report:
        error = str(report["load_error"])
        if error == "missing":
            return CodeReport(f"the code does not define a function named {entry_point!r}")
        return CodeReport(f"loading the code failed: {error}")
    outcomes = tuple(
        TestOutcome(group[index][0], bool(passed), str(detail), bool(explained))
        for group, (passed, detail, index, explained) in zip(groups, report["results"], strict=True)
    )
    return CodeReport(None, outcomes)


def code_feedback(report: CodeReport, *, entry_point: str) -> str:
    """The feedback on a report of the visible tests; ``""`` when they all passed.

    Example:
        ```python
        text = code_feedback(report, entry_point="double")
        ```
    """
    if report.passed:
        return ""
    fix = f"Reply with the complete corrected code of `{entry_point}` in one ```python block."
    if report.problem is not None:
        return f"Your code could not be tested: {report.problem}.\n{fix}"
    failed = [o for o in report.outcomes if not o.passed]
    lines = "\n".join(
        f"- {o.detail}" if o.explained else f"- {o.source}  ->  {o.detail}" for o in failed
    )
    return f"Your code failed {len(failed)} of {len(report.outcomes)} tests:\n{lines}\n{fix}"


async def agrade_code(
    answer: str, tests: str, *, entry_point: str, timeout: float = DEFAULT_TIMEOUT
) -> CodeReport:
    """Extract the code of ``answer`` and run ``tests`` on it.

    Example:
        ```python
        report = await agrade_code(answer_text, task.tests, entry_point=task.entry_point)
        ```
    """
    code = extract_code(answer, entry_point)
    if code is None:
        return CodeReport(
            f"the answer holds no Python code; write the function {entry_point!r} in a "
            f"```python block"
        )
    return await arun_tests(code, tests, entry_point=entry_point, timeout=timeout)
