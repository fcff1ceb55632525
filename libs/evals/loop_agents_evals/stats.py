"""The statistics of an eval: Wilson intervals, paired comparisons, rescues, retry kinds.

What each figure means is in docs/eval.md ("How to read the result").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "KINDS",
    "RETRY_KINDS_NOTE",
    "Paired",
    "Rescues",
    "RetryKinds",
    "paired_comparison",
    "rescues_of",
    "retry_kinds",
    "sign_test",
    "wilson_interval",
]

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(passed: int, total: int, *, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95% by default; ``(0, 1)`` with no task).

    Raises:
        ValueError: ``passed`` is negative or above ``total``.

    Example:
        ```python
        low, high = wilson_interval(0, 10)  # (0.0, 0.278)
        ```
    """
    if not 0 <= passed <= total:
        raise ValueError(f"passed must be from 0 to total; got {passed} of {total}")
    if total == 0:
        return 0.0, 1.0
    p = passed / total
    z2 = z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == total else min(1.0, centre + half)
    return low, high


def sign_test(won: int, lost: int) -> float:
    """The two-sided exact sign (McNemar) test p-value of ``won`` against ``lost`` (ties out).

    Example:
        ```python
        assert sign_test(8, 0) < 0.01
        ```
    """
    n = won + lost
    if n == 0:
        return 1.0
    k = min(won, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return float(min(1.0, 2 * tail))


@dataclass(frozen=True)
class Paired:
    """Two arms compared task by task, on the tasks both have a result for.

    Attributes:
        arm: The arm being compared.
        baseline: The arm it is compared against.
        won: Tasks ``arm`` passed and ``baseline`` failed.
        lost: Tasks ``arm`` failed and ``baseline`` passed.
        tied: Tasks both passed or both failed.
        p_value: The exact sign test of ``won`` against ``lost`` (two-sided).
    """

    arm: str
    baseline: str
    won: int
    lost: int
    tied: int
    p_value: float


def paired_comparison(
    arm: Mapping[str, bool],
    baseline: Mapping[str, bool],
    *,
    names: tuple[str, str] = ("arm", "baseline"),
) -> Paired:
    """Compare two arms' results (task id -> passed) on the tasks they share.

    Example:
        ```python
        paired = paired_comparison(loop, single, names=("loop", "single"))
        ```
    """
    shared = arm.keys() & baseline.keys()
    won = sum(1 for t in shared if arm[t] and not baseline[t])
    lost = sum(1 for t in shared if baseline[t] and not arm[t])
    return Paired(names[0], names[1], won, lost, len(shared) - won - lost, sign_test(won, lost))


class Curve(Protocol):
    """What `rescues_of` reads of a result (a `loop_agents_evals.report.TaskResult`)."""

    @property
    def arm(self) -> str:
        """The arm."""

    @property
    def passed(self) -> bool:
        """Whether its final answer passed."""

    @property
    def by_attempt(self) -> tuple[bool, ...]:
        """Whether the answer after step 1, 2, ... passes."""


@dataclass(frozen=True)
class Rescues:
    """One arm after its first answer: failed first answers rescued, passing ones broken."""

    arm: str
    failed_first: int
    rescued: int
    passed_first: int
    broken: int

    @property
    def rescue_rate(self) -> float:
        """The share of failed first answers the arm rescued (0 when none failed)."""
        return self.rescued / self.failed_first if self.failed_first else 0.0


def rescues_of(results: Iterable[Curve]) -> dict[str, Rescues]:
    """`Rescues` per arm, for the arms whose results record more than one step.

    Example:
        ```python
        rescues_of(report.results)["loop"].rescued
        ```
    """
    counts: dict[str, list[int]] = {}
    for result in results:
        if len(result.by_attempt) < 2:
            continue
        found = counts.setdefault(result.arm, [0, 0, 0, 0])
        if result.by_attempt[0]:
            found[2] += 1
            found[3] += not result.passed
        else:
            found[0] += 1
            found[1] += result.passed
    return {arm: Rescues(arm, *found) for arm, found in counts.items()}


KINDS = ("repair", "fresh", "informed")
"""`Adaptive`'s built-in kinds of retry, in the order the tables show them."""

RETRY_KINDS_NOTE = (
    "Retries (answers after the first) by the kind the arm chose, over its tasks in task "
    "order: repair (the answer and its feedback), fresh (the task again), informed (the "
    "task and what must hold); succeeded: accepted by the visible tests or checks, or a "
    "better score (what the arm learns from); passed: passes the final grading."
)
"""What the tables of `RetryKinds` (the console's and the page's) show, said under them."""


@dataclass(frozen=True)
class RetryKinds:
    """Which kinds of retry an arm chose over the tasks, in task order (an `Adaptive` loop).

    Attributes:
        arm: The arm.
        kinds: The kinds: repair, fresh and informed, then any other chosen.
        quarters: Up to four parts of the tasks: first and last task (from 1), retries
            of each kind.
        chosen: Retries of each kind over all the tasks.
        succeeded: Of those, the ones that succeeded as the control counts it.
        passed: Of those, the ones that pass the final grading.
    """

    arm: str
    kinds: tuple[str, ...]
    quarters: tuple[tuple[int, int, dict[str, int]], ...]
    chosen: dict[str, int]
    succeeded: dict[str, int]
    passed: dict[str, int]

    def rows(self) -> list[list[str]]:
        """Its table (the console's and the page's): a row per quarter, all tasks, shares."""
        rows = [[f"tasks {a}–{b}", *(str(n[k]) for k in self.kinds)] for a, b, n in self.quarters]
        rows.append(["all tasks", *(str(self.chosen[k]) for k in self.kinds)])
        for label, found in (("succeeded", self.succeeded), ("passed", self.passed)):
            shares = [(found[k], self.chosen[k]) for k in self.kinds]
            rows.append([label, *(f"{n}/{t} ({n / t:.0%})" if t else "—" for n, t in shares)])
        return rows

    def to_json(self) -> dict[str, Any]:
        """The JSON of ``retry_kinds`` in ``--out``."""
        return {
            "arm": self.arm,
            "kinds": list(self.kinds),
            "quarters": [
                {"tasks": [first, last], "chosen": dict(counts)}
                for first, last, counts in self.quarters
            ],
            "chosen": dict(self.chosen),
            "succeeded": dict(self.succeeded),
            "passed": dict(self.passed),
        }


def _kind(entry: object) -> tuple[str, bool, bool] | None:
    """An entry's retry kind, whether it succeeded and whether it passed; ``None``: none."""
    if not isinstance(entry, Mapping):
        return None
    strategy = entry.get("strategy")
    if not isinstance(strategy, Mapping):
        return None
    kind = strategy.get("kind")
    if not isinstance(kind, str) or not kind or kind == "first":
        return None
    return kind, strategy.get("success") is True, entry.get("passed") is True


def retry_kinds(rows: Iterable[tuple[str, object]]) -> dict[str, RetryKinds]:
    """`RetryKinds` per arm with a recorded retry kind, from ``(arm, transcript)`` in task order.

    Example:
        ```python
        kinds = retry_kinds((r.arm, r.transcript) for r in report.results)
        print(kinds["adaptive"].quarters)
        ```
    """
    per_arm: dict[str, list[list[tuple[str, bool, bool]]]] = {}
    for arm, transcript in rows:
        entries = transcript if isinstance(transcript, list | tuple) else ()
        per_arm.setdefault(arm, []).append([k for k in map(_kind, entries) if k is not None])
    found: dict[str, RetryKinds] = {}
    for arm, tasks in per_arm.items():
        seen = [kind for retries in tasks for kind, _, _ in retries]
        if not seen:
            continue
        kinds = KINDS + tuple(dict.fromkeys(k for k in seen if k not in KINDS))
        count = len(tasks)
        parts = min(4, count)
        bounds = [round(i * count / parts) for i in range(parts + 1)]
        quarters = []
        for start, end in itertools.pairwise(bounds):
            counts = dict.fromkeys(kinds, 0)
            for retries in tasks[start:end]:
                for kind, _, _ in retries:
                    counts[kind] += 1
            quarters.append((start + 1, end, counts))
        chosen, succeeded, passed = (dict.fromkeys(kinds, 0) for _ in range(3))
        for retries in tasks:
            for kind, success, graded in retries:
                chosen[kind] += 1
                succeeded[kind] += success
                passed[kind] += graded
        found[arm] = RetryKinds(arm, kinds, tuple(quarters), chosen, succeeded, passed)
    return found
