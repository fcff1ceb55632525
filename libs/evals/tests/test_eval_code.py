"""Code tasks: the answer's code and the task's tests run in the package's runner; the
visible tests' failures are the feedback, the hidden tests decide, and an answer cannot
pass by printing, exiting or hanging."""

from __future__ import annotations

import pytest

from loop_agents_checks.code_review import unclosed_python_block
from loop_agents_evals.arms import arun_arm
from loop_agents_evals.code_tests import agrade_code, arun_tests, code_feedback, extract_code
from loop_agents_evals.grading import grader_for, request_text
from loop_agents_evals.settings import ArmSettings
from loop_agents_evals.tasks import parse_task
from tests.eval_models import ReactiveOpenAI, after_feedback

TASK = parse_task(
    {
        "id": "add",
        "kind": "code",
        "prompt": "Write a function that adds two integers.",
        "entry_point": "add",
        "tests": "assert add(1, 2) == 3\nassert add(0, 0) == 0",
        "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
    }
)
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
# passes the visible tests only
OVERFIT = "```python\ndef add(a, b):\n    return {(1, 2): 3, (0, 0): 0}.get((a, b), 0)\n```"


async def test_right_and_wrong_answers():
    grader = grader_for(TASK)
    assert await grader.visible(RIGHT) == (True, "")
    assert await grader.final(RIGHT)
    ok, feedback = await grader.visible(WRONG)
    assert not ok
    assert feedback.splitlines() == [
        "Your code failed 1 of 2 tests:",
        "- add(1, 2) returned -1, expected 3",
        "Reply with the complete corrected code of `add` in one ```python block.",
    ]
    assert not await grader.final(WRONG)


async def test_passing_the_visible_tests_is_not_passing_the_task():
    grader = grader_for(TASK)
    assert await grader.visible(OVERFIT) == (True, "")
    assert not await grader.final(OVERFIT)


async def test_the_hidden_tests_never_reach_the_feedback():
    grader = grader_for(TASK)
    for answer in (WRONG, OVERFIT, "```python\ndef add(a, b):\n    raise ValueError\n```"):
        _, feedback = await grader.visible(answer)
        assert "-5" not in feedback
        assert "10, 20" not in feedback
    assert "add(-5" not in request_text(TASK)
    assert request_text(TASK).endswith("`add`.")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("I cannot write code today, sorry.", "holds no Python code"),
        (
            "```python\ndef add(a, b)\n    return a + b\n```",
            'solution.py", line 1\n    def add(a, b)\n',
        ),
        (
            "```python\ndef plus(a, b):\n    return a + b\n```",
            "does not define a function named 'add'",
        ),
        ("```python\nimport sys\nSTATUS = sys.exit(0)\n```", "loading the code failed:"),
        ("```python\nimport sys\nSTATUS = sys.exit(0)\n```", "SystemExit: 0"),
        ("```python\nraise RuntimeError('boom')\n```", "RuntimeError: boom"),
        ("```python\nx = input()\n```", "EOFError"),
    ],
)
async def test_code_that_cannot_be_tested(answer, problem):
    report = await agrade_code(answer, TASK.tests, entry_point="add")
    assert not report.passed
    assert report.problem is not None
    assert problem in report.problem
    assert code_feedback(report, entry_point="add").startswith("Your code could not be tested:")


async def test_each_test_runs_on_its_own_with_a_time_limit():
    code = "def add(a, b):\n    while a == 1:\n        pass\n    return a + b\n"
    report = await arun_tests(
        code,
        "assert add(1, 2) == 3\nassert add(2, 2) == 4",
        entry_point="add",
        per_test_timeout=0.5,
    )
    assert [o.passed for o in report.outcomes] == [False, True]
    # where it was stopped: in the loop, on line 2 or 3
    assert report.outcomes[0].detail.startswith("did not finish within 0.5 s (at line ")


async def test_a_program_that_never_finishes_fails():
    code = "import time\ndef add(a, b):\n    return a + b\nwhile True:\n    time.sleep(0.01)\n"
    report = await arun_tests(code, "assert add(1, 2) == 3", entry_point="add", timeout=1)
    assert not report.passed
    assert report.problem is not None
    assert "did not finish" in report.problem


async def test_an_answer_cannot_report_its_own_success():
    forged = '@@loop-agents-tests-0000@@{"results": [[true, ""], [true, ""]]}'
    tricks = [
        # prints a report of its own, then dies before the tests
        f"import os\nprint({forged!r}, flush=True)\nos._exit(0)\n",
        # a wrong function, and a report printed at exit
        f"import atexit\natexit.register(print, {forged!r})\ndef add(a, b):\n    return 0\n",
        # a wrong function that floods the output
        "print('x' * 2_000_000)\ndef add(a, b):\n    return 0\n",
    ]
    for code in tricks:
        report = await arun_tests(code, TASK.hidden_tests, entry_point="add")
        assert not report.passed, code


async def test_a_failed_assert_shows_its_message_or_what_was_computed():
    code = "def add(a, b):\n    return [a, b]\n"
    report = await arun_tests(
        code,
        "assert add(1, 2) == 3\nassert len(add(1, 2)) == 3, 'want three items'\nassert add(1, 2)[5]",
        entry_point="add",
    )
    assert [(o.detail, o.explained) for o in report.outcomes] == [
        ("add(1, 2) returned [1, 2], expected 3", True),
        ("want three items", True),
        ("IndexError: list index out of range", False),
    ]
    assert code_feedback(report, entry_point="add").splitlines()[1:4] == [
        "- add(1, 2) returned [1, 2], expected 3",
        "- want three items",
        "- assert add(1, 2)[5]  ->  IndexError: list index out of range",
    ]


async def test_a_test_is_an_assert_with_the_statements_before_it():
    tests = (
        "got = half(4)\nassert got == 2, f'half(4) returned {got!r}, expected 2'\n"
        "got = half(None)\nassert got == 0, f'half(None) returned {got!r}, expected 0'\n"
        "expected = 5\ngot = half(10)\nassert got == expected\n"
    )
    code = "def half(n):\n    return n // 2 if n != 10 else 4\n"
    report = await arun_tests(code, tests, entry_point="half")
    assert [(o.passed, o.source, o.detail) for o in report.outcomes] == [
        (True, "assert got == 2, f'half(4) returned {got!r}, expected 2'", ""),
        # the statement that raised is named; the stale 'got' of the test before is not used
        (
            False,
            "got = half(None)",
            "TypeError: unsupported operand type(s) for //: 'NoneType' and 'int' "
            "(at line 2 of the code: return n // 2 if n != 10 else 4)",
        ),
        (False, "assert got == expected", "got is 4, expected 5"),
    ]


def test_extract_code_prefers_the_block_that_defines_the_function():
    answer = (
        "First a helper:\n```python\nimport math\n```\nThen:\n```python\n"
        "def add(a, b):\n    return a + b\n```\nUsage:\n```bash\npython add.py\n```"
    )
    assert extract_code(answer, "add") == "def add(a, b):\n    return a + b\n"
    assert extract_code("```python\nprint(1)\n```", "add") == "print(1)\n"
    assert extract_code("def add(a, b):\n    return a + b", "add") is not None
    assert extract_code("Here you go: add them.", "add") is None


def test_bare_code_before_a_stray_closing_fence_is_the_code():
    # what small models write: the code bare, then a closing fence and prose
    answer = "def add(a, b):\n    return a + b\n```\n\nThe `add` function adds: it's simple.\n"
    assert extract_code(answer, "add") == "def add(a, b):\n    return a + b\n"
    # the lines before the fence must define the entry point
    assert extract_code("print(1)\n```\nprose: it's done\n", "add") is None
    assert extract_code("```\nprose: it's done\n", "add") is None


async def test_the_loop_tells_a_cut_off_code_answer_to_send_the_code_only():
    from loop_agents_evals import arun_arm
    from loop_agents_evals.grading import CUT_OFF_FEEDBACK
    from loop_agents_evals.settings import ArmSettings
    from tests.eval_models import ReactiveOpenAI, after_feedback
    from tests.scripted_openai import Cut

    cut = Cut("Here is how to add.\n\n```python\ndef add(a, b):\n    return a -")
    server = ReactiveOpenAI(lambda body: RIGHT if after_feedback(body) else cut)
    outcome = await arun_arm(TASK, "loop", server.chat_model(), settings=ArmSettings(iterations=2))
    assert (outcome.passed, outcome.cut_off, outcome.by_attempt) == (True, 1, (False, True))
    feedback = server.requests[1]["messages"][-1]["content"]
    assert CUT_OFF_FEEDBACK["code"] in feedback
    assert "code only" in feedback


# -- an answer cut off inside its code block ---------------------------------------------


def test_an_unclosed_block_is_the_code_exactly_as_written():
    cut = "Here is the function:\n```python\ndef add(a, b):\n    return a +"
    assert unclosed_python_block(cut) == "def add(a, b):\n    return a +"
    assert extract_code(cut, "add") == "def add(a, b):\n    return a +"
    # closed blocks are not unclosed ones; an unclosed block of another language is no code
    assert unclosed_python_block("```python\nprint(1)\n```\nDone.") is None
    assert unclosed_python_block("```bash\nls -l") is None
    assert extract_code("```bash\nls -l", "add") is None
    # an unlabeled fence left open counts when the code after it defines the function (else
    # it may be a stray closing fence, prose after it)
    assert unclosed_python_block("```\nprose", labeled=True) is None
    assert extract_code("```\ndef add(a, b):\n    return", "add") == "def add(a, b):\n    return"
    assert extract_code("print(1)\n```\nThat prints 1.", "add") is None
    # after closed blocks, the unclosed one that defines the function is preferred, even
    # though it does not parse
    answer = "```python\nimport math\n```\nNow:\n```py\nimport math\ndef add(a, b):\n    return ("
    assert extract_code(answer, "add") == "import math\ndef add(a, b):\n    return ("


async def test_a_complete_function_in_an_unclosed_block_is_graded():
    answer = "```python\ndef add(a, b):\n    return a + b\n\n\nprint(add(1, 2))"
    assert await grader_for(TASK).visible(answer) == (True, "")
    assert await grader_for(TASK).final(answer)


async def test_a_cut_off_line_is_a_syntax_error_named_with_its_line():
    answer = "```python\ndef add(a, b):\n    total = a + b\n    return total +"
    ok, feedback = await grader_for(TASK).visible(answer)
    assert not ok
    assert "holds no Python code" not in feedback
    assert 'File "solution.py", line 3\n    return total +\n' in feedback
    assert "SyntaxError: invalid syntax" in feedback


async def test_a_demo_line_cut_off_after_a_complete_function_is_left_out():
    # the token cap cut the model's own check after the function: the function is graded
    answer = (
        "```python\ndef add(a, b):\n    return a + b\n\n# checks\n"
        'assert add(1, 2) == 3\nassert add("1'
    )
    assert extract_code(answer, "add") == (
        "def add(a, b):\n    return a + b\n\n# checks\nassert add(1, 2) == 3\n"
    )
    assert await grader_for(TASK).visible(answer) == (True, "")
    assert await grader_for(TASK).final(answer)
    # a cut inside the function is not hidden: still a syntax error with its line
    inside = "```python\ndef add(a, b):\n    total = a + b\n    return total +\n\nx = ("
    assert extract_code(inside, "add") == inside.removeprefix("```python\n")


# -- the code's own demo lines -------------------------------------------------------------

DEMO = (
    "def add(a, b):\n"  # 1
    "    return a + b\n"  # 2
    "\n"  # 3
    "print(add('x', 1))\n"  # 4: raises inside add, at line 2
    "assert add(2, 2) == 5\n"  # 5
    "add(None)\n"  # 6
    "if __name__ == '__main__':\n"  # 7: never runs (the code is loaded, not run as a script)
    "    raise SystemExit(1)\n"
)


async def test_failing_demo_lines_do_not_stop_the_tests():
    report = await arun_tests(DEMO, TASK.hidden_tests, entry_point="add")
    assert report.passed  # the definitions are graded: the hidden tests all pass
    assert [error.splitlines()[0] for error in report.top_level_errors] == [
        f"line {n} of the code raised an error when the code was loaded (the rest of the code "
        f"still ran):"
        for n in (4, 5, 6)
    ]
    assert report.top_level_errors[0].splitlines()[1:] == [
        "Traceback (most recent call last):",
        '  File "solution.py", line 4, in <module>',
        "    print(add('x', 1))",
        '  File "solution.py", line 2, in add',
        "    return a + b",
        'TypeError: can only concatenate str (not "int") to str',
    ]
    # the code's own failed assert a == b says what a was, like a failed test
    assert report.top_level_errors[1].splitlines()[2:] == [
        '  File "solution.py", line 5, in <module>',
        "    assert add(2, 2) == 5",
        "AssertionError: add(2, 2) returned 4, expected 5",
    ]
    assert report.top_level_errors[2].endswith(
        "    add(None)\nTypeError: add() missing 1 required positional argument: 'b'"
    )


async def test_a_demo_assert_whose_call_raises_shows_the_traceback():
    code = "def add(a, b):\n    return a + b\n\nassert add('a', 1) == 'a1'\nassert add(1, 1) > 2\n"
    report = await arun_tests(code, TASK.tests, entry_point="add")
    assert report.passed
    raised, failed = (error.splitlines()[1:] for error in report.top_level_errors)
    assert raised == [
        "Traceback (most recent call last):",
        '  File "solution.py", line 4, in <module>',
        "    assert add('a', 1) == 'a1'",
        '  File "solution.py", line 2, in add',
        "    return a + b",
        'TypeError: can only concatenate str (not "int") to str',
    ]
    assert failed[-2:] == ["    assert add(1, 1) > 2", "AssertionError"]


async def test_the_feedback_names_the_failing_demo_line_and_the_failed_tests():
    code = DEMO.replace("return a + b", "return a - b")
    report = await arun_tests(code, TASK.tests, entry_point="add")
    assert report.problem is None
    assert [o.passed for o in report.outcomes] == [False, True]
    feedback = code_feedback(report, entry_point="add")
    lines = feedback.splitlines()
    assert lines[:2] == ["Your code failed 1 of 2 tests:", "- add(1, 2) returned -1, expected 3"]
    assert lines[2] == (
        "Also, line 4 of the code raised an error when the code was loaded (the rest of the "
        "code still ran):"
    )
    assert "    print(add('x', 1))" in lines
    assert "TypeError: unsupported operand type(s) for -: 'str' and 'int'" in lines
    assert lines[-1].startswith("Reply with the complete corrected code")


async def test_a_demo_loop_is_a_demo_and_a_loop_that_defines_is_not():
    demo = "def add(a, b):\n    return a + b\n\nfor x in (1, 'a'):\n    print(add(x, 1))\n"
    report = await arun_tests(demo, TASK.tests, entry_point="add")
    assert report.passed
    (error,) = report.top_level_errors
    assert error.startswith("line 4 of the code raised an error")
    assert '  File "solution.py", line 5, in <module>\n    print(add(x, 1))\n' in error
    defining = "for name in ('add',):\n    def add(a, b):\n        return a + b\n    1 / 0\n"
    report = await arun_tests(defining, TASK.tests, entry_point="add")
    assert report.problem is not None
    assert report.problem.endswith("ZeroDivisionError: division by zero")


@pytest.mark.parametrize(
    ("code", "where"),
    [
        # an import, a def (its default value), a class, an assignment: loading stops
        ("import no_such_module\ndef add(a, b):\n    return a + b\n", "line 1, in <module>"),
        ("def add(a, b=UNDEFINED):\n    return a + b\n", "line 1, in <module>\n    def add("),
        ("class Adder(UNDEFINED):\n    pass\ndef add(a, b):\n    return a + b\n", "line 1"),
        (
            "def add(a, b):\n    return a + b\n\nDEFAULT = add(1)\n",
            "line 4, in <module>\n    DEFAULT = add(1)\nTypeError: add() missing",
        ),
    ],
)
async def test_an_error_in_a_definition_stops_the_loading_and_names_its_line(code, where):
    report = await arun_tests(code, TASK.tests, entry_point="add")
    assert report.problem is not None
    assert report.problem.startswith("loading the code failed:\nTraceback")
    assert f'File "solution.py", {where}' in report.problem
    assert report.outcomes == ()
    feedback = code_feedback(report, entry_point="add")
    assert feedback.startswith("Your code could not be tested: loading the code failed:\n")


async def test_code_after_a_future_import_still_sees_it():
    code = "from __future__ import annotations\ndef add(a: Number, b: Number) -> Number:\n"
    code += "    return a + b\n"
    assert (await arun_tests(code, TASK.tests, entry_point="add")).passed


# -- what a failed test says ----------------------------------------------------------------


async def test_both_sides_of_a_failed_comparison_are_shown_and_evaluated_once():
    code = "calls = []\ndef add(a, b):\n    calls.append((a, b))\n    return a * b\n"
    tests = (
        "assert add(1, 2) == 3\n"
        "assert 4 == add(3, 1)\n"
        "assert len(calls) == 2, f'add was called {len(calls)} times'\n"
        "assert add(2, 2) != 4\n"
    )
    report = await arun_tests(code, tests, entry_point="add")
    assert [(o.passed, o.detail, o.explained) for o in report.outcomes] == [
        (False, "add(1, 2) returned 2, expected 3", True),
        (False, "add(3, 1) returned 3, expected 4", True),
        (True, "", False),
        (False, "assertion failed", False),
    ]
    assert code_feedback(report, entry_point="add").splitlines()[1:4] == [
        "- add(1, 2) returned 2, expected 3",
        "- add(3, 1) returned 3, expected 4",
        "- assert add(2, 2) != 4  ->  assertion failed",
    ]


async def test_a_value_that_cannot_be_shown_or_compared_is_reported():
    code = (
        "class Odd:\n"
        "    def __repr__(self):\n        raise ValueError('no repr')\n"
        "    def __eq__(self, other):\n        return False\n"
        "class Slow(Odd):\n"
        "    def __repr__(self):\n        while True:\n            pass\n"
        "def add(a, b):\n    return Slow() if a else Odd()\n"
    )
    report = await arun_tests(
        code, "assert add(0, 1) == 1\nassert add(1, 1) == 2", entry_point="add", per_test_timeout=1
    )
    shown, slow = (o.detail for o in report.outcomes)
    assert shown == "add(0, 1) returned (a value whose repr() failed: ValueError), expected 1"
    assert slow.startswith("did not finish within 1 s (at line ")  # in the repr's loop


async def test_an_assertion_error_of_the_code_is_not_the_tests_message():
    code = "def add(a, b):\n    assert a > 0, 'positive only'\n    return a + b\n"
    report = await arun_tests(code, "assert add(0, 1) == 1", entry_point="add")
    (outcome,) = report.outcomes
    assert (outcome.detail, outcome.explained) == (
        "AssertionError: positive only (at line 2 of the code: assert a > 0, 'positive only')",
        False,
    )


async def test_the_loop_sees_its_previous_code_and_the_failed_test():
    def respond(body):
        return RIGHT if after_feedback(body) else WRONG

    server = ReactiveOpenAI(respond)
    outcome = await arun_arm(TASK, "loop", server.chat_model(), settings=ArmSettings(iterations=3))
    assert (outcome.passed, outcome.iterations) == (True, 2)
    first, second = server.requests
    assert not after_feedback(first)
    answers = [m["content"] for m in second["messages"] if m["role"] == "assistant"]
    assert answers == [WRONG]  # its own code, as it wrote it
    assert "- add(1, 2) returned -1, expected 3" in second["messages"][-1]["content"]
    assert second["messages"][-1]["role"] == "user"
