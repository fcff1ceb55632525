"""What an arm wrote, attempt by attempt: the transcript, and grading it.

Every answer an arm writes becomes one transcript entry (a JSON object, kept in the
journal and the ``--out`` JSON):

- ``answer``: its text;
- ``iteration``: the attempt (a loop's iteration) it belongs to, from 1;
- ``candidate``: which of the iteration's answers it is, for arms that write several
  at once (``loop-candidates``, ``diverse-first``'s first iteration); else absent;
- ``ok``, ``feedback``, ``score``: what the arm's own evaluator (the visible tests or
  checks, a judge, a custom loop's evaluator) said of it; ``None`` where the arm did
  not check it (a ``single`` answer, ``resample``'s last);
- ``sent``: what the call was sent: ``"first"`` (the task, for a first answer),
  ``"repair"`` (earlier answers and their feedback), ``"fresh"`` (the task alone again,
  after an earlier answer: ``resample``'s later samples, `Adaptive`'s fresh samples),
  ``"informed"`` (the task and what must hold, no earlier answer: ``restart``'s new
  samples, `Adaptive`'s informed ones), or ``None`` where the eval cannot see it (an
  agent of your own, after its first iteration, unless its loop's records say). Files
  written before ``"informed"`` existed mark ``restart``'s new samples ``"fresh"`` and
  ``resample``'s later samples ``"first"``;
- ``strategy``: for a retry chosen by an `Adaptive` control, the choice
  (``{"kind", "success", "estimates"}``: the kind of retry, whether it succeeded as
  the control counts it, every kind's standing when it was chosen); absent otherwise;
- ``cut_off``: whether it ended at the token cap;
- ``passed``: whether it passes the final grading (hidden tests, or every check).

Files written before these keys existed have only some of them; readers take what is
there.

Example:
    ```python
    attempts = Attempts()
    attempts.transcript.append(entry("def f(): ...", iteration=1) | {"sent": "first"})
    by_attempt = await Grades(grader).steps(attempts.answers, final, steps=3)
    ```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage

from loop_agents.controls.restart import RESTART_KEY
from loop_agents.evals.grading import Grader, VisibleResult
from loop_agents.evals.sampling import answer_text, was_cut_off
from loop_agents.loop.feedback import is_feedback

__all__ = [
    "SENT_KINDS",
    "Attempts",
    "Grades",
    "entry",
    "retry_sent",
    "sent_kind",
    "strategy_entry",
]


@dataclass
class Attempts:
    """What an arm wrote, as it wrote it.

    Attributes:
        answers: The answer the arm would give after each step (graded for the
            per-attempt curve).
        cut_off: Answers that ended at the token cap.
        transcript: Every answer written, in order (see the module docstring).
        sent: What each agent call was sent (`sent_kind`), in call order.
    """

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
    """One transcript entry: the answer, where it stands, and the verdict made of it.

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
"""What a call can be sent (a transcript entry's ``sent``; see the module docstring)."""


def sent_kind(messages: Sequence[AnyMessage]) -> str:
    """What a call was sent, as far as its messages tell (its iteration aside).

    ``"informed"``: the task with what must hold (a `requirements_message`, as `Restart`
    and `Adaptive` send); ``"repair"``: feedback in view; ``"first"``: the task alone
    (``"fresh"`` when it is a retry: see `retry_sent`).

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
    """The ``sent`` of a call of `sent_kind` ``kind`` made in ``iteration``.

    The task alone is ``"first"`` in the first iteration and ``"fresh"`` after it.

    Example:
        ```python
        assert retry_sent("first", 2) == "fresh"
        assert retry_sent("repair", 2) == "repair"
        ```
    """
    return "fresh" if kind == "first" and iteration > 1 else kind


def strategy_entry(strategy: object) -> dict[str, Any] | None:
    """What a transcript entry keeps of an `Adaptive` record's ``strategy`` (a retry's).

    ``None`` for a first attempt (kind ``"first"``) or a record without one.

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
    """The final grading of an arm's answers, each distinct answer graded once.

    Example:
        ```python
        grades = Grades(grader)
        by_attempt = await grades.steps(["a", "b"], "b", steps=3)
        await grades.transcript(attempts.transcript)
        ```
    """

    def __init__(self, grader: Grader) -> None:
        self.grader = grader
        self._verdicts: dict[str, bool] = {}

    async def of(self, answer: str) -> bool:
        """Whether ``answer`` passes the task (hidden tests, or every check)."""
        if answer not in self._verdicts:
            self._verdicts[answer] = await self.grader.final(answer)
        return self._verdicts[answer]

    async def steps(self, answers: Sequence[str], final: str, steps: int) -> tuple[bool, ...]:
        """Grade the answer after each step; after the arm stopped, its final answer stands.

        The final answer is graded last, whatever the steps were (it is the arm's verdict).
        """
        graded = [await self.of(answer) for answer in list(answers)[: steps - 1]]
        passed = await self.of(final)
        return tuple(graded + [passed] * (steps - len(graded)))

    async def transcript(self, entries: Sequence[dict[str, Any]]) -> None:
        """Set each entry's ``passed`` (``None`` for an attempt without an answer)."""
        for made in entries:
            answer = made.get("answer")
            made["passed"] = await self.of(answer) if isinstance(answer, str) else None
