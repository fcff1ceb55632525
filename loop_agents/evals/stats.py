"""The statistics of an eval: Wilson intervals and paired comparisons of two arms.

Example:
    ```python
    low, high = wilson_interval(17, 30)  # about (0.39, 0.73)
    result = paired_comparison({"a": True, "b": False}, {"a": True, "b": True})
    assert (result.won, result.lost, result.tied) == (0, 1, 1)
    ```
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Paired", "paired_comparison", "sign_test", "wilson_interval"]

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(passed: int, total: int, *, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95% by default).

    Unlike the normal approximation it stays within [0, 1] and is sensible at 0 or
    ``total`` passes and for small ``total``. With no tasks it is ``(0.0, 1.0)``.

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
    """The two-sided exact sign (McNemar) test p-value of ``won`` against ``lost``.

    Ties carry no information and are left out. 1.0 when there are no discordant tasks.

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
