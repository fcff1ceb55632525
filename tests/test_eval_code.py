"""Code tasks: the answer's code and the task's tests run in the package's runner; the
visible tests' failures are the feedback, the hidden tests decide, and an answer cannot
pass by printing, exiting or hanging."""

from __future__ import annotations

import pytest

from loop_agents.evals.code_tests import agrade_code, arun_tests, code_feedback, extract_code
from loop_agents.evals.grading import grader_for, request_text
from loop_agents.evals.tasks import parse_task

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
        "- assert add(1, 2) == 3  ->  got -1",
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
        ("```python\nimport sys\nsys.exit(0)\n```", "loading the code failed: SystemExit"),
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
    assert [(o.passed, o.detail) for o in report.outcomes] == [
        (False, "did not finish within 0.5 s"),
        (True, ""),
    ]


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
        ("got [1, 2]", False),
        ("want three items", True),
        ("IndexError: list index out of range", False),
    ]
    assert code_feedback(report, entry_point="add").splitlines()[1:3] == [
        "- assert add(1, 2) == 3  ->  got [1, 2]",
        "- want three items",
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
            "TypeError: unsupported operand type(s) for //: 'NoneType' and 'int'",
        ),
        (False, "assert got == expected", "got 4"),
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
    from loop_agents.evals import arun_arm
    from loop_agents.evals.arms import CUT_OFF_FEEDBACK, ArmSettings
    from tests.eval_models import ReactiveOpenAI, after_feedback
    from tests.scripted_openai import Cut

    cut = Cut("Here is how to add.\n\n```python\ndef add(a, b):\n    return a -")
    server = ReactiveOpenAI(lambda body: RIGHT if after_feedback(body) else cut)
    outcome = await arun_arm(TASK, "loop", server.chat_model(), settings=ArmSettings(iterations=2))
    assert (outcome.passed, outcome.cut_off, outcome.by_attempt) == (True, 1, (False, True))
    feedback = server.requests[1]["messages"][-1]["content"]
    assert CUT_OFF_FEEDBACK["code"] in feedback
    assert "code only" in feedback
