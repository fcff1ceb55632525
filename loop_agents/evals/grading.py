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

from dataclasses import dataclass

from loop_agents.evals.checks import checks_feedback, run_checks
from loop_agents.evals.code_tests import DEFAULT_TIMEOUT, agrade_code, code_feedback
from loop_agents.evals.tasks import CodeTask, InstructionsTask, Task

__all__ = ["Grader", "grader_for", "request_text", "system_prompt"]

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
        task = self.task
        if isinstance(task, InstructionsTask):
            feedback = checks_feedback(run_checks(task.checks, answer))
            return not feedback, feedback
        report = await agrade_code(
            answer, task.tests, entry_point=task.entry_point, timeout=self.code_timeout
        )
        return report.passed, code_feedback(report, entry_point=task.entry_point)

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


def grader_for(task: Task, *, code_timeout: float = DEFAULT_TIMEOUT) -> Grader:
    """The `Grader` of ``task``.

    Example:
        ```python
        passed = await grader_for(task).final(answer)
        ```
    """
    return Grader(task, code_timeout)
