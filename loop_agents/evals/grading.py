"""Grading answers to a task: the visible feedback the loop sees, the verdict that counts.

- A code task: the visible ``tests`` give the feedback; the ``hidden_tests`` decide.
- An instructions task: its checks give the feedback, and all must pass.

Example:
    ```python
    grader = grader_for(task)
    ok, feedback = await grader.visible(answer)  # what a loop or resample sees
    passed = await grader.final(answer)  # what is counted
    ```
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from loop_agents.controls.restart import feedback_points
from loop_agents.evals.checks import checks_feedback, run_checks
from loop_agents.evals.code_tests import DEFAULT_TIMEOUT, agrade_code, code_feedback
from loop_agents.evals.tasks import CodeTask, InstructionsTask, Task

__all__ = [
    "Grader",
    "VisibleResult",
    "grader_for",
    "request_text",
    "requirement_points",
    "system_prompt",
]

_RETURNED = re.compile(r"^(?P<call>.+?) returned (?P<got>.+), expected (?P<want>.+)$")
_RAISED = re.compile(
    r"^got = (?P<call>.+?)\s+->\s+(?P<error>[A-Za-z_][\w.]*)(?::\s*(?P<message>.*?))?"
    r"(?:\s*\(at line \d+ of the code: .*\))?$"
)
_OBSERVED = re.compile(
    r"^(?P<rule>.+?); (?:the answer |it (?:starts|ends|has) |found: |got |they are missing"
    r"|\d+ letters are not)"
)

CODE_SYSTEM = (
    "You are a careful Python programmer. Reply with the complete code of the requested "
    "function in one ```python block, with the imports it needs. When feedback on your "
    "code follows, reply with the complete corrected code in one ```python block."
)
INSTRUCTIONS_SYSTEM = (
    "Follow every instruction of the task exactly. Reply with the answer itself, with no "
    "comment before or after it. When feedback on your answer follows, reply with the "
    "complete revised answer."
)


def system_prompt(task: Task) -> str:
    """The system message the model is given for ``task`` (the same in every arm).

    Example:
        ```python
        messages = [SystemMessage(system_prompt(task)), HumanMessage(request_text(task))]
        ```
    """
    return CODE_SYSTEM if isinstance(task, CodeTask) else INSTRUCTIONS_SYSTEM


def request_text(task: Task) -> str:
    """The user message for ``task``: its prompt (code tasks also name the function).

    Example:
        ```python
        assert request_text(task).startswith(task.prompt)
        ```
    """
    if isinstance(task, CodeTask):
        return f"{task.prompt}\n\nName the function `{task.entry_point}`."
    return task.prompt


class VisibleResult(NamedTuple):
    """What the visible tests or the checks say of one answer.

    Attributes:
        ok: Whether every one passed.
        feedback: What failed and what to do (``""`` when ok).
        score: The share of them that passed, from 0 to 100 (0 when the code could not
            be tested at all).
    """

    ok: bool
    feedback: str
    score: float


@dataclass(frozen=True)
class Grader:
    """Grades answers to one task.

    Attributes:
        task: The task.
        code_timeout: Seconds a code answer and its tests may run.
    """

    task: Task
    code_timeout: float = DEFAULT_TIMEOUT

    async def visible(self, answer: str) -> tuple[bool, str]:
        """``(ok, feedback)`` from the visible tests or the checks; feedback ``""`` if ok.

        Example:
            ```python
            ok, feedback = await grader.visible(answer)
            ```
        """
        result = await self.check(answer)
        return result.ok, result.feedback

    async def check(self, answer: str) -> VisibleResult:
        """The visible tests or the checks on ``answer``, with the share that passed.

        Example:
            ```python
            ok, feedback, score = await grader.check(answer)
            ```
        """
        task = self.task
        if isinstance(task, InstructionsTask):
            results = run_checks(task.checks, answer)
            feedback = checks_feedback(results)
            return VisibleResult(not feedback, feedback, _share(r.passed for r in results))
        report = await agrade_code(
            answer, task.tests, entry_point=task.entry_point, timeout=self.code_timeout
        )
        return VisibleResult(
            report.passed,
            code_feedback(report, entry_point=task.entry_point),
            _share(o.passed for o in report.outcomes),
        )

    async def final(self, answer: str) -> bool:
        """Whether ``answer`` passes the task: the hidden tests, or every check.

        Example:
            ```python
            passed = await grader.final(answer)
            ```
        """
        task = self.task
        if isinstance(task, InstructionsTask):
            return all(r.passed for r in run_checks(task.checks, answer))
        report = await agrade_code(
            answer, task.hidden_tests, entry_point=task.entry_point, timeout=self.code_timeout
        )
        return report.passed


def _share(passed: Iterable[bool]) -> float:
    flags = list(passed)
    return round(100.0 * sum(flags) / len(flags), 1) if flags else 0.0


def grader_for(task: Task, *, code_timeout: float = DEFAULT_TIMEOUT) -> Grader:
    """The `Grader` of ``task``.

    Example:
        ```python
        passed = await grader_for(task).final(answer)
        ```
    """
    return Grader(task, code_timeout)


def requirement_points(feedback: str) -> list[str]:
    r"""What must hold, from a grader's feedback: a failed call becomes what it must return.

    Each point of the feedback (`feedback_points`) is kept, except that a failed test
    ``f(2) returned 5, expected 4`` reads ``f(2) must return 4 (not 5)``: a requirement
    to meet rather than a review of an answer the model no longer sees.

    Example:
        ```python
        text = "Your code failed 1 of 3 tests:\n- f(2) returned 5, expected 4\nReply ..."
        assert requirement_points(text) == ["f(2) must return 4 (not 5)"]
        assert requirement_points("- Use exactly 3 lines; the answer has 2.") == [
            "Use exactly 3 lines."
        ]
        ```
    """
    points = []
    for point in feedback_points(feedback):
        raised = _RAISED.match(point)
        returned = _RETURNED.match(point)
        observed = _OBSERVED.match(point)
        if raised is not None:
            said = f" (it raised: {raised['message']})" if raised["message"] else ""
            point = f"{raised['call']} must not raise {raised['error']}{said}"
        elif returned is not None:
            point = f"{returned['call']} must return {returned['want']} (not {returned['got']})"
        elif observed is not None:
            point = f"{observed['rule'].rstrip('.')}."
        points.append(point)
    return points
