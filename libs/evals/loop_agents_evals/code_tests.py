r"""Running a code task's tests on an answer, in the package's sandbox (`arun_python`).

The answer's code is taken from its Markdown (`extract_code`) and run with a harness that
loads its top-level statements one by one (an error in a demo line is reported and the
tests still run), then runs each test on its own and reports, marked with a random token,
which passed and why not (docs/eval.md, "Task files", says what the feedback reads).
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
    """One test's result (a test: an ``assert`` with the statements before it).

    Attributes:
        source: The statement that failed (the ``assert`` when the test passed).
        passed: Whether every statement of the test ran without error.
        detail: Why it failed (``"f(2) returned 5, expected 4"``, an exception and its
            line, a timeout); ``""`` if it passed.
        explained: Whether ``detail`` says it all (shown alone in the feedback).
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
        problem: Why no test could run (no code, it did not load, no such function, a
            timeout); ``None`` when the tests ran.
        outcomes: One per test, in order.
        top_level_errors: Tracebacks of the code's own demo lines (shown, not counted).
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

    A block left open (an answer cut off at the token cap) counts, without an incomplete
    last top-level statement when that alone keeps it from parsing. Without a block, the
    answer itself when it parses, else its lines before a stray fence when they define
    ``entry_point``. ``None`` when the answer holds no code.

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
    """``code`` without an incomplete last top-level statement, when that alone breaks it."""
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
    """The code's demo statements by index, each with its sides when an ``assert a == b``."""
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
    """The tests: runs of top-level statements, each ending with an ``assert`` (or the end)."""
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
    """Run ``tests`` after ``code`` in the sandbox; a `CodeReport`.

    Args:
        code: The answer's code (its top-level statements run one by one).
        tests: Python statements; each ``assert`` with those before it is one test.
        entry_point: The function the code must define.
        timeout: Seconds for the whole run.
        per_test_timeout: Seconds for each statement of the code and of the tests.

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
