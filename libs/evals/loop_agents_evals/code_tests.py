r"""Running a code task's tests on an answer, in the package's sandbox (`arun_python`).

The answer's code is taken from its Markdown (the first Python block that defines the
task's function, else the first Python block, a block left open by an answer cut off
included, else the whole answer), and run in a child process with
`loop_agents_checks.sandbox.arun_python` (its isolation, limits and clean environment; see
`loop_agents_checks.sandbox`) together with a small harness. The harness runs the code's
top-level statements one by one: the definitions are what is graded, so an error in the
code's own demo lines (a ``print(...)``, a call on an example, an ``assert``, an ``if
__name__ == "__main__":`` block, a loop that defines nothing) is reported with its
traceback and the tests run anyway, while an error in an import, a definition or an
assignment stops the loading (reported with its line too). Then it runs each test (an
``assert`` with the statements before it) on its own, with a time limit per statement,
and reports which passed; for a failed ``assert f(x) == y`` without a message it reports
``f(x) returned 5, expected 4``, and for an exception the line of the code that raised
it. The report reaches the parent on a duplicate of stdout, marked with a random token,
after which the child exits at once: output the answer prints, ``atexit`` handlers and
leftover threads cannot stand in for it, and a program that never reports has failed.

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
import re
import secrets
from dataclasses import dataclass

from loop_agents_checks.code_review import extract_python_blocks, unclosed_python_block
from loop_agents_checks.sandbox import arun_python
from loop_agents_evals.settings import CODE_TIMEOUT

__all__ = ["CodeReport", "TestOutcome", "arun_tests", "code_feedback", "extract_code"]

DEFAULT_TIMEOUT = CODE_TIMEOUT
"""Seconds the answer's code and all its tests may take together."""
PER_TEST_TIMEOUT = 3.0
"""Seconds one test statement (or one top-level statement of the code) may take."""
_DETAIL_CHARS = 200
_TRACEBACK_FRAMES = 5
_MAX_OUTPUT = 400_000

_HARNESS = r"""
import __future__ as _future, ast as _ast, json as _json, os as _os, signal as _signal
import traceback as _traceback
_write, _exit, _fd = _os.write, _os._exit, _os.dup(1)
_TOKEN = {token!r}
_CODE = {code!r}
_TESTS = {tests!r}
_ENTRY = {entry!r}
_DEMOS = {demos!r}
_LIMIT = {limit!r}
_CHARS = {chars!r}
_FRAMES = {frames!r}
_LINES = _CODE.splitlines()


def _report(value):
    _write(_fd, ("\n" + _TOKEN + _json.dumps(value) + "\n").encode())
    _exit(0)


class _TestTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _TestTimeout()


class _Timed:
    def __enter__(self):
        _signal.setitimer(_signal.ITIMER_REAL, _LIMIT)

    def __exit__(self, *exc_info):
        _signal.setitimer(_signal.ITIMER_REAL, 0)


def _short(text):
    text = str(text)
    return text if len(text) <= _CHARS else text[: _CHARS - 3] + "..."


def _show(value):
    try:
        return _short(repr(value))
    except _TestTimeout:
        raise
    except BaseException as exc:
        return "(a value whose repr() failed: %s)" % type(exc).__name__


def _error(exc):
    if isinstance(exc, _TestTimeout):
        return "did not finish within %g s" % _LIMIT
    if isinstance(exc, SyntaxError) and exc.filename == "solution.py" and not exc.text:
        number = exc.lineno or 0  # an error of the compiler, not of the parser
        exc.text = (_LINES[number - 1] if 0 < number <= len(_LINES) else "") + "\n"
    return _short("".join(_traceback.format_exception_only(type(exc), exc)).strip())


def _frames(exc, filename="solution.py"):
    return [
        (frame.f_code.co_name, number)
        for frame, number in _traceback.walk_tb(exc.__traceback__)
        if frame.f_code.co_filename == filename
    ]


def _line(number):
    return _short(_LINES[number - 1].strip()) if 0 < number <= len(_LINES) else ""


def _trace(exc, frames=None):
    if frames is None:
        frames = _frames(exc)
    lines = ["Traceback (most recent call last):"] if frames else []
    if len(frames) > _FRAMES:
        lines.append("  ... (%d calls before)" % (len(frames) - _FRAMES))
        frames = frames[-_FRAMES:]
    for name, number in frames:
        lines.append('  File "solution.py", line %d, in %s' % (number, name))
        if _line(number):
            lines.append("    " + _line(number))
    return "\n".join(lines + [_error(exc)])


def _differ(left, right, compare):
    if left == right:
        return None
    left_source, right_source, swap, verb = compare
    if swap:
        return "%s %s %s, expected %s" % (right_source, verb, _show(right), _show(left))
    return "%s %s %s, expected %s" % (left_source, verb, _show(left), _show(right))


def _side(node):
    return eval(compile(_ast.Expression(node), "solution.py", "eval", _flags, True), _namespace)


def _where(exc):
    frames = _frames(exc)
    if not frames:
        return ""
    number = frames[-1][1]
    return " (at line %d of the code: %s)" % (number, _line(number))


_signal.signal(_signal.SIGALRM, _alarm)
_namespace = {{"__name__": "solution"}}
_top = []
try:
    _tree = _ast.parse(_CODE, "solution.py")
except BaseException as exc:
    _report({{"load_error": _error(exc)}})
_flags = 0
for _node in _tree.body:
    if isinstance(_node, _ast.ImportFrom) and _node.module == "__future__":
        for _alias in _node.names:
            _flags |= getattr(getattr(_future, _alias.name, None), "compiler_flag", 0)
for _index, _node in enumerate(_tree.body):
    _compare = _DEMOS.get(_index)
    try:
        with _Timed():
            if _compare is None:
                _module = _ast.Module([_node], [])
                exec(compile(_module, "solution.py", "exec", _flags, True), _namespace)
                continue
            _detail = _differ(_side(_node.test.left), _side(_node.test.comparators[0]), _compare)
        if _detail is not None:  # the code's own assert a == b failed: say what a was
            _failed = AssertionError(_detail)
            _top.append([_node.lineno, _trace(_failed, [("<module>", _node.lineno)])])
    except BaseException as exc:
        if _index not in _DEMOS:
            _report({{"load_error": _trace(exc), "top_level": _top}})
        _top.append([_node.lineno, _trace(exc)])
if not callable(_namespace.get(_ENTRY)):
    _report({{"missing": True, "top_level": _top}})
_results = []
for _test in _TESTS:
    _outcome = [True, "", -1, False]
    for _index, (_source, _compare) in enumerate(_test):
        try:
            with _Timed():
                if _compare is None:
                    exec(compile(_source, "tests.py", "exec"), _namespace)
                    continue
                _left = eval(compile(_compare[0], "tests.py", "eval"), _namespace)
                _right = eval(compile(_compare[1], "tests.py", "eval"), _namespace)
                _detail = _differ(_left, _right, _compare)
                if _detail is None:
                    continue
            _outcome = [False, _detail, _index, True]
        except AssertionError as exc:
            if _frames(exc):  # raised by the code, not by the test's assert
                _outcome = [False, _error(exc) + _where(exc), _index, False]
            elif str(exc):
                _outcome = [False, _short(exc), _index, True]
            else:
                _outcome = [False, "assertion failed", _index, False]
        except BaseException as exc:
            _outcome = [False, _error(exc) + _where(exc), _index, False]
        break
    _results.append(_outcome)
_report({{"results": _results, "top_level": _top}})
"""


@dataclass(frozen=True)
class TestOutcome:
    """One test's result.

    A test is an ``assert`` statement with the statements before it (since the previous
    ``assert``), e.g. ``got = f(2)`` then ``assert got == 4, f"f(2) returned {got}"``.

    Attributes:
        source: The statement that failed (the ``assert`` when the test passed).
        passed: Whether every statement of the test ran without error.
        detail: Why it failed: the assert's own message; for a failed ``assert f(x) == y``
            without one, what the call returned and what was expected (``"f(2)
            returned 5, expected 4"``); an exception, with the line of the code that
            raised it; a timeout. ``""`` if it passed.
        explained: Whether ``detail`` says it all (the assert's own message, or the
            call, its value and the expected one): then it is shown alone in the feedback.
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
        top_level_errors: The errors of the code's own demo lines at its top level (an
            expression such as a ``print(...)`` call, an ``assert``, an ``if __name__ ==
            "__main__":`` block), each a traceback of the code's lines. They do not stop
            the tests and do not count in `passed`; the feedback shows them.
    """

    problem: str | None
    outcomes: tuple[TestOutcome, ...] = ()
    top_level_errors: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Whether the code loaded and every test passed."""
        return self.problem is None and all(o.passed for o in self.outcomes)


def extract_code(answer: str, entry_point: str) -> str | None:
    r"""The code of an answer: a Python block defining ``entry_point``, else the first block.

    A Python block that is opened but never closed (an answer cut off at the token limit)
    counts as a block when its fence names Python or it defines ``entry_point`` (an
    unlabeled fence may be a stray closing one, prose after it), its code taken as written
    up to the end of the answer. When that code does not parse but its lines up to a
    later top-level statement do, and still define ``entry_point`` (the cap cut off a demo
    line after a complete function), the incomplete statement is left out; otherwise a
    cut-off line is a syntax error, reported with its line. A block that does
    not parse counts as defining ``entry_point`` when one of its lines starts its
    ``def`` or ``class``. Without any block the whole answer is taken when it parses as
    Python, else its lines before its first fence line when they parse and define
    ``entry_point`` (small models often write the code bare, then a stray closing fence
    and prose). Returns ``None`` when the answer holds no code.

    Example:
        ```python
        assert extract_code("```python\ndef f():\n    return 1\n```", "f").startswith("def f")
        assert extract_code("```python\ndef f():\n    return", "f") == "def f():\n    return"
        ```
    """
    blocks = extract_python_blocks(answer)
    cut = unclosed_python_block(answer)
    if (
        cut is not None
        and cut.strip()
        and (_defines(cut, entry_point) or unclosed_python_block(answer, labeled=True))
    ):
        blocks.append(_complete_statements(cut, entry_point))
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


def _complete_statements(code: str, entry_point: str) -> str:
    """``code`` without an incomplete last top-level statement, when that alone breaks it.

    The longest run of whole lines that ends before a top-level line (one that starts at
    column 0), parses and defines ``entry_point``; ``code`` itself when it parses or no
    such run exists (the cut is then inside the definition: a syntax error to report).
    """
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        lines = code.splitlines()
        for end in range(len(lines) - 1, 0, -1):
            if not lines[end][:1].strip():  # indented or blank: inside a statement
                continue
            head = "\n".join(lines[:end]).rstrip() + "\n"
            try:
                ast.parse(head)
            except (SyntaxError, ValueError):
                continue
            if _defines(head, entry_point):
                return head
    return code


def _leading_code(answer: str, entry_point: str) -> str | None:
    """The lines of ``answer`` before its first fence line, if they define ``entry_point``."""
    lines = answer.splitlines()
    fence = next((i for i, line in enumerate(lines) if line.lstrip().startswith("```")), None)
    if fence is None or fence == 0:
        return None
    code = "\n".join(lines[:fence]) + "\n"
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    return code if _defines(code, entry_point) else None


def _defines(code: str, name: str) -> bool:
    """Whether ``code`` binds ``name`` at its top level (by its lines if it does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        starts = re.compile(rf"^(async[ \t]+def|def|class)[ \t]+{re.escape(name)}\b", re.MULTILINE)
        return starts.search(code) is not None
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign)
        and name in _names(node)
        for node in tree.body
    )


def _names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {getattr(node, "name", "")}


_Compare = tuple[str, str, bool, str]
"""An ``assert a == b`` without a message: ``a``, ``b``, whether ``b`` is the call that was
tested (so its value is the one shown as returned), and the verb (``returned``, ``is``)."""
_Statement = tuple[str, _Compare | None]


def _compare(node: ast.stmt) -> _Compare | None:
    """How to show a failure of ``node`` when it is an ``assert a == b`` without a message."""
    if not (
        isinstance(node, ast.Assert)
        and node.msg is None
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq)
    ):
        return None
    left, right = node.test.left, node.test.comparators[0]
    swap = isinstance(right, ast.Call) and not isinstance(left, ast.Call)
    tested = right if swap else left
    verb = "returned" if isinstance(tested, ast.Call) else "is"
    return ast.unparse(left), ast.unparse(right), swap, verb


def _demo_statements(code: str) -> dict[int, _Compare | None]:
    """The code's top-level statements that are its own demo, not definitions, by index.

    A demo statement is an expression statement (a ``print(...)`` call, a call of the
    function on an example), an ``assert``, an ``if __name__ == "__main__":`` block, or a
    ``for`` or ``while`` loop that defines and imports nothing (``for case in cases:
    print(f(case))``). Its error is reported without stopping the tests; an error of any
    other statement (an import, a ``def``, a ``class``, an assignment) stops the loading.
    An ``assert a == b`` without a message comes with its sides (see `_compare`), so that
    its failure says what ``a`` was.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {}  # the child reports the error
    return {index: _compare(node) for index, node in enumerate(tree.body) if _is_demo(node)}


def _is_demo(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr | ast.Assert):
        return True
    if isinstance(node, ast.If):
        return _is_main_check(node.test)
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        definitions = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import
        return not any(isinstance(n, definitions | ast.ImportFrom) for n in ast.walk(node))
    return False


def _is_main_check(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _split_tests(tests: str) -> list[list[_Statement]]:
    """The tests: runs of top-level statements, each ending with an ``assert``.

    Each statement comes with its two sides when it is an ``assert a == b`` without a
    message (to show what ``a`` was and what was expected). Statements after the last
    ``assert`` form a last test.
    """
    tree = ast.parse(tests)
    groups: list[list[_Statement]] = [[]]
    for node in tree.body:
        source = ast.get_source_segment(tests, node) or ast.unparse(node)
        groups[-1].append((source, _compare(node)))
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

    The code's top-level statements run one by one. An error in a demo statement (an
    expression such as ``print(f(2))``, an ``assert``, an ``if __name__ == "__main__":``
    block, a loop that defines nothing) is kept in `CodeReport.top_level_errors` and the
    rest still runs; an error in any other (an import, a ``def``, a ``class``, an
    assignment) stops the loading and is the report's ``problem``. Either comes with a
    traceback of the code's own lines.

    Args:
        code: The answer's code.
        tests: The task's tests: Python statements; each ``assert`` with the statements
            before it is one test, run on its own.
        entry_point: The function the code must define.
        timeout: Seconds for the whole run (loading and every test).
        per_test_timeout: Seconds for each top-level statement of the code and each
            statement of the tests.

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
        demos=_demo_statements(code),
        limit=per_test_timeout,
        chars=_DETAIL_CHARS,
        frames=_TRACEBACK_FRAMES,
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
    top_level = tuple(
        f"line {line} of the code raised an error when the code was loaded (the rest of the "
        f"code still ran):\n{trace}"
        for line, trace in report.get("top_level", ())
    )
    if "load_error" in report:
        error = str(report["load_error"])
        joint = "\n" if "\n" in error else " "
        return CodeReport(f"loading the code failed:{joint}{error}", (), top_level)
    if report.get("missing"):
        return CodeReport(
            f"the code does not define a function named {entry_point!r}", (), top_level
        )
    outcomes = tuple(
        TestOutcome(group[index][0], bool(passed), str(detail), bool(explained))
        for group, (passed, detail, index, explained) in zip(groups, report["results"], strict=True)
    )
    return CodeReport(None, outcomes, top_level)


def code_feedback(report: CodeReport, *, entry_point: str) -> str:
    """The feedback on a report of the visible tests; ``""`` when they all passed.

    A failed ``assert f(x) == y`` reads ``f(x) returned 5, expected 4``; another failed
    test shows its statement and the error. The errors of the code's own top-level
    demo lines follow, each with its traceback.

    Example:
        ```python
        text = code_feedback(report, entry_point="double")
        ```
    """
    if report.passed:
        return ""
    fix = f"Reply with the complete corrected code of `{entry_point}` in one ```python block."
    notes = "".join(f"Also, {error}\n" for error in report.top_level_errors)
    if report.problem is not None:
        end = "" if "\n" in report.problem else "."
        return f"Your code could not be tested: {report.problem}{end}\n{notes}{fix}"
    failed = [o for o in report.outcomes if not o.passed]
    lines = "\n".join(
        f"- {o.detail}" if o.explained else f"- {o.source}  ->  {o.detail}" for o in failed
    )
    return f"Your code failed {len(failed)} of {len(report.outcomes)} tests:\n{lines}\n{notes}{fix}"


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
