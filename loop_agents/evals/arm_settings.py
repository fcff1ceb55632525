"""`ArmSettings`: what every arm of one eval shares (K, the temperatures, the judge's).

What makes one arm differ from another (its history, feedback format, controls, its
agent) belongs to the arm (`loop_agents.evals.loop_arm.loop`, an arm factory), not here.

Example:
    ```python
    settings = ArmSettings(iterations=4, arm_temperatures={"resample": 0.7})
    assert settings.temperature_of("resample") == 0.7
    ```
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import get_args

from loop_agents.evals.arm_names import ARMS, CANDIDATES, FIRST_ANSWERS, check_arm_name
from loop_agents.evals.code_tests import DEFAULT_TIMEOUT
from loop_agents.evaluators.judge import JudgeFormat

__all__ = ["ArmSettings", "check_arm_budget", "least_budget_error", "multiple_budget_error"]


@dataclass(frozen=True)
class ArmSettings:
    """The settings every arm of one eval shares.

    Attributes:
        iterations: K, the most answers an arm may write (``single`` writes one).
        temperature: The sampling temperature of every arm's answers (the agent's).
        arm_temperatures: Arm name -> its own temperature, for the arms that do not
            sample at ``temperature`` (a built-in arm, or an arm of your own by its name).
        judge_temperature: The sampling temperature of the judge of ``judge-loop``.
        judge_threshold: The judge's score (0-100) that accepts an answer in
            ``judge-loop``.
        judge_method: How the judge's verdict is requested: a structured-output
            method (``function_calling`` for llama.cpp's server), or ``"text"``
            (``Score: N`` / ``Feedback: ...``, for models without tool calling).
        code_timeout: Seconds a code answer and its tests may run.

    Raises:
        ValueError: a setting is out of range.
        TypeError: a setting has the wrong type.

    Example:
        ```python
        settings = ArmSettings(iterations=4, arm_temperatures={"resample": 0.7})
        assert settings.temperature_of("resample") == 0.7
        assert settings.temperature_of("loop") == 1.0
        ```
    """

    iterations: int = 4
    temperature: float = 1.0
    arm_temperatures: Mapping[str, float] = field(default_factory=dict, hash=False)
    judge_temperature: float = 0.0
    judge_threshold: float = 80.0
    judge_method: JudgeFormat = "json_schema"
    code_timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        """Check every setting (see the class docstring)."""
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise TypeError(f"iterations must be a whole number >= 1; got {self.iterations!r}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1 (the budget K); got {self.iterations}")
        if not isinstance(self.arm_temperatures, Mapping):
            raise TypeError(
                f"arm_temperatures must map arm names to temperatures; "
                f"got {self.arm_temperatures!r}"
            )
        for arm in self.arm_temperatures:
            if arm in ARMS:
                continue
            try:
                check_arm_name(arm)
            except (TypeError, ValueError):
                raise ValueError(
                    f"arm_temperatures: unknown arm {arm!r}; the arms are {', '.join(ARMS)} "
                    f"and those of your own, by their names"
                ) from None
        object.__setattr__(self, "arm_temperatures", dict(self.arm_temperatures))
        checked: list[tuple[str, object, float, float]] = [
            ("temperature", self.temperature, 0.0, 2.0),
            ("judge_temperature", self.judge_temperature, 0.0, 2.0),
            ("judge_threshold", self.judge_threshold, 0.0, 100.0),
            ("code_timeout", self.code_timeout, 0.0, math.inf),
        ]
        checked += [
            (f"arm_temperatures[{arm!r}]", value, 0.0, 2.0)
            for arm, value in self.arm_temperatures.items()
        ]
        for name, value, low, high in checked:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number; got {value!r}")
            if (
                not (low <= value <= high)
                or not math.isfinite(value)
                or (name == "code_timeout" and value <= 0)
            ):
                shown = "> 0" if name == "code_timeout" else f"from {low:g} to {high:g}"
                raise ValueError(f"{name} must be {shown}; got {value!r}")
        if self.judge_method not in get_args(JudgeFormat):
            raise ValueError(
                f"judge_method must be one of {', '.join(get_args(JudgeFormat))}; "
                f"got {self.judge_method!r}"
            )

    def temperature_of(self, arm: str) -> float:
        """The temperature ``arm``'s agent samples at.

        Example:
            ```python
            ArmSettings(temperature=0.5).temperature_of("single")  # 0.5
            ```
        """
        return float(self.arm_temperatures.get(arm, self.temperature))

    def steps(self, arm: str) -> int:
        """How many steps the built-in ``arm`` takes (the length of its ``by_attempt``).

        ``single``: 1; ``loop-candidates``: K/2 iterations; the others: K answers.

        Example:
            ```python
            assert ArmSettings(iterations=4).steps("loop-candidates") == 2
            ```
        """
        if arm == "single":
            return 1
        if arm == "loop-candidates":
            return max(1, self.iterations // CANDIDATES)
        return self.iterations


def multiple_budget_error(name: str, per_iteration: int, iterations: int, where: str) -> str:
    """The message for a K that an arm of ``per_iteration`` answers per iteration cannot spend.

    Example:
        ```python
        multiple_budget_error("loop-candidates", 2, 3, "--arms")
        ```
    """
    must = "even" if per_iteration == 2 else f"a multiple of {per_iteration}"
    above = (iterations // per_iteration + 1) * per_iteration
    below = iterations // per_iteration * per_iteration
    fix = f"give --iterations {above} (or {below})" if below else f"give --iterations {above}"
    return (
        f"{name} writes {per_iteration} answers per iteration, so its budget K must be "
        f"{must}; got K={iterations}: {fix}, or leave {name} out of {where}"
    )


def least_budget_error(name: str, first: int, iterations: int, where: str) -> str:
    """The message for a K below an arm's ``first`` first answers.

    Example:
        ```python
        least_budget_error("diverse-first", 2, 1, "--arms")
        ```
    """
    return (
        f"{name} writes {first} first answers, so its budget K must be at least {first}; got "
        f"K={iterations}: give --iterations {first} or more, or leave {name} out of {where}"
    )


def check_arm_budget(arms: Sequence[str], iterations: int) -> None:
    """Refuse a budget a built-in arm cannot spend exactly.

    An odd K for ``loop-candidates``; K below 2 for ``diverse-first``.

    Raises:
        ValueError: the message names the fix.

    Example:
        ```python
        check_arm_budget(["loop", "loop-candidates"], 4)  # fine
        ```
    """
    if "diverse-first" in arms and iterations < FIRST_ANSWERS:
        raise ValueError(least_budget_error("diverse-first", FIRST_ANSWERS, iterations, "--arms"))
    if "loop-candidates" in arms and iterations % CANDIDATES:
        raise ValueError(multiple_budget_error("loop-candidates", CANDIDATES, iterations, "--arms"))
