"""Grading answers to a task, what a task is sent, and what an arm wrote attempt by attempt.

A code task's visible ``tests`` give the feedback and its ``hidden_tests`` decide; an
instructions task's checks do both. Every answer an arm writes is one transcript entry
(`entry`: its keys are in docs/eval.md, "The transcript").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableLambda

from loop_agents.controls.restart import RESTART_KEY, feedback_points
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.sync_bridge import run_coroutine
from loop_agents_evals.checks import checks_feedback, run_checks
from loop_agents_evals.code_tests import DEFAULT_TIMEOUT, agrade_code, code_feedback
from loop_agents_evals.sampling import answer_text, was_cut_off
from loop_agents_evals.tasks import CodeTask, InstructionsTask, Task

__all__ = [
    "CUT_OFF_FEEDBACK",
    "SENT_KINDS",
    "Attempts",
    "Grader",
    "Grades",
    "VisibleResult",
    "entry",
    "grader_for",
    "request_text",
    "requirement_points",
    "retry_sent",
    "sent_kind",
    "strategy_entry",
    "system_prompt",
    "task_messages",
    "visible_checks",
    "visible_verdict",
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
    """The system message the model is given for ``task`` (in every arm).

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
        score: The share of them that passed, 0 to 100.
    """

    ok: bool
    feedback: str
    score: float


@dataclass(frozen=True)
class Grader:
    """Grades answers to one task (a code answer runs ``code_timeout`` seconds at most)."""

    task: Task
    code_timeout: float = DEFAULT_TIMEOUT

    async def visible(self, answer: str) -> tuple[bool, str]:
        """``(ok, feedback)`` from the visible tests or the checks; feedback ``""`` if ok."""
        result = await self.check(answer)
        return result.ok, result.feedback

    async def check(self, answer: str) -> VisibleResult:
        """The visible tests or the checks on ``answer``, with the share that passed."""
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
        """Whether ``answer`` passes the task: the hidden tests, or every check."""
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
    r"""What must hold, from a grader's feedback (`feedback_points`, failed calls reworded).

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


CUT_OFF_FEEDBACK = {
    "code": (
        "Your answer was cut off at the token cap before it ended. Answer with the code "
        "only: one code block, no explanation."
    ),
    "instructions": (
        "Your answer was cut off at the token cap before it ended. Answer more briefly, "
        "with the answer only."
    ),
}
"""The sentence that ends the feedback on an answer cut off at the token cap."""


def task_messages(task: Task) -> list[AnyMessage]:
    """What every arm is sent first: the system message and the request.

    Example:
        ```python
        system, request = task_messages(task)
        ```
    """
    return [SystemMessage(system_prompt(task)), HumanMessage(request_text(task))]


def visible_verdict(task: Task, found: VisibleResult, answer: AIMessage) -> LoopEvaluation:
    """The loop's verdict on ``answer``: accepted when all passed, else the failures as feedback.

    Example:
        ```python
        verdict = visible_verdict(task, await grader.check(answer.text), answer)
        ```
    """
    if found.ok:
        return {"stop": True, "score": found.score}
    feedback = found.feedback
    if was_cut_off(answer):
        feedback = f"{feedback}\n\n{CUT_OFF_FEEDBACK[task.kind]}".strip()
    return {"stop": False, "feedback": feedback, "score": found.score}


def visible_checks(
    task: Task, *, code_timeout: float = DEFAULT_TIMEOUT
) -> Runnable[LoopContext, LoopEvaluation]:
    """The task's visible tests or checks as a loop evaluator (the built-in loops'), sync and async.

    Example:
        ```python
        loop = create_loop_agent(model, visible_checks(task), 4)
        result = await loop.ainvoke({"messages": task_messages(task)})
        ```
    """
    grader = grader_for(task, code_timeout=code_timeout)

    async def acheck(context: LoopContext) -> LoopEvaluation:
        answer = context["last_response"]
        return visible_verdict(task, await grader.check(answer.text), answer)

    def check(context: LoopContext) -> LoopEvaluation:
        return run_coroutine(acheck(context))

    return RunnableLambda(check, afunc=acheck, name="visible tests")


@dataclass
class Attempts:
    """What an arm wrote: its answer after each step, its transcript, what each call was sent."""

    answers: list[str] = field(default_factory=list)
    cut_off: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def add(self, message: object) -> str:
        """Count a cut-off answer; return the answer's text."""
        self.cut_off += was_cut_off(message)
        return answer_text(message)


def entry(
    answer: str,
    found: VisibleResult | None = None,
    *,
    iteration: int,
    candidate: int | None = None,
    cut_off: bool = False,
) -> dict[str, Any]:
    """One transcript entry: the answer, where it stands, and its verdict.

    Example:
        ```python
        entry("def f(): ...", VisibleResult(False, "f(2) returned 5", 50.0), iteration=2)
        ```
    """
    made: dict[str, Any] = {
        "answer": answer,
        "ok": None if found is None else found.ok,
        "feedback": None if found is None else found.feedback,
        "score": None if found is None else found.score,
        "iteration": iteration,
        "cut_off": cut_off,
    }
    if candidate is not None:
        made["candidate"] = candidate
    return made


SENT_KINDS = ("first", "repair", "fresh", "informed")
"""What a call can be sent (a transcript entry's ``sent``)."""


def sent_kind(messages: Sequence[AnyMessage]) -> str:
    """What a call was sent: ``"informed"`` (what must hold), ``"repair"`` or ``"first"``.

    Example:
        ```python
        assert sent_kind([HumanMessage("Write f.")]) == "first"
        ```
    """
    if any(RESTART_KEY in m.additional_kwargs for m in messages):
        return "informed"
    if any(is_feedback(m) for m in messages):
        return "repair"
    return "first"


def retry_sent(kind: str, iteration: int) -> str:
    """The ``sent`` of a `sent_kind` ``kind`` call in ``iteration`` (later, the task is fresh).

    Example:
        ```python
        assert retry_sent("first", 2) == "fresh"
        assert retry_sent("repair", 2) == "repair"
        ```
    """
    return "fresh" if kind == "first" and iteration > 1 else kind


def strategy_entry(strategy: object) -> dict[str, Any] | None:
    """What a transcript entry keeps of an `Adaptive` record's ``strategy`` (``None``: none).

    Example:
        ```python
        kept = strategy_entry({"kind": "fresh", "success": True, "estimates": {}, "loop": "x"})
        assert kept == {"kind": "fresh", "success": True, "estimates": {}}
        ```
    """
    if not isinstance(strategy, Mapping):
        return None
    kind = strategy.get("kind")
    if not isinstance(kind, str) or kind == "first":
        return None
    kept: dict[str, Any] = {"kind": kind, "success": strategy.get("success")}
    estimates = strategy.get("estimates")
    if isinstance(estimates, Mapping):
        kept["estimates"] = {
            str(kind): dict(each) for kind, each in estimates.items() if isinstance(each, Mapping)
        }
    return kept


class Grades:
    """The final grading of an arm's answers, each distinct answer graded once."""

    def __init__(self, grader: Grader) -> None:
        self.grader = grader
        self._verdicts: dict[str, bool] = {}

    async def of(self, answer: str) -> bool:
        """Whether ``answer`` passes the task (hidden tests, or every check)."""
        if answer not in self._verdicts:
            self._verdicts[answer] = await self.grader.final(answer)
        return self._verdicts[answer]

    async def steps(self, answers: Sequence[str], final: str, steps: int) -> tuple[bool, ...]:
        """Grade the answer after each step; after the arm stopped, its final answer stands."""
        graded = [await self.of(answer) for answer in list(answers)[: steps - 1]]
        passed = await self.of(final)
        return tuple(graded + [passed] * (steps - len(graded)))

    async def transcript(self, entries: Sequence[dict[str, Any]]) -> None:
        """Set each entry's ``passed`` (``None`` for an attempt without an answer)."""
        for made in entries:
            answer = made.get("answer")
            made["passed"] = await self.of(answer) if isinstance(answer, str) else None
