"""What an eval is run with: the arms' names, `EvalSettings`, and the `ArmSettings` arms share.

Cheap to import (no LangChain): the command checks its arguments with it.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import urlparse

from loop_agents_cli.models.settings import StructuredOutputMethod

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "ARMS",
    "BASELINES",
    "CANDIDATES",
    "DEFAULT_ARMS",
    "FIRST_ANSWERS",
    "HEADER_ARMS",
    "Arm",
    "ArmSettings",
    "EvalSettings",
    "check_arm_budget",
    "check_arm_name",
    "check_budget",
    "check_count",
    "check_number",
    "check_server_url",
    "did_you_mean",
    "server_conflict",
]

Arm = Literal[
    "single",
    "loop",
    "resample",
    "judge-loop",
    "loop-candidates",
    "restart",
    "diverse-first",
    "adaptive",
]
"""The name of a built-in arm."""

ARMS: tuple[Arm, ...] = get_args(Arm)
"""Every built-in arm, in the order the report shows them."""

HEADER_ARMS: tuple[Arm, ...] = ARMS[:7]
"""The built-in arms whose temperatures the journal's first line records (so that the first
journals resume); a newer one (``adaptive``) is declared on a line of its own."""

DEFAULT_ARMS: tuple[Arm, ...] = ("single", "loop", "resample", "judge-loop")
"""The arms an eval runs when none are named (the others are chosen explicitly)."""

BASELINES: tuple[Arm, ...] = ("resample", "single")
"""The arms every arm of your own is compared with, task by task, when they ran."""

CANDIDATES = 2
"""Answers per iteration of ``loop-candidates``."""

FIRST_ANSWERS = 2
"""First answers of ``diverse-first`` (then one repair per iteration)."""

CODE_TIMEOUT = 10.0
"""Seconds a code answer and all its tests may take together, by default."""

PAIR_TIMEOUT = 3600.0
"""Seconds one task/arm pair may take by default (a small local model may need minutes)."""

ARMS_TEXT = ", ".join(ARMS)
"""The built-in arms, as every message that lists them says them."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}")
_JUDGE_METHODS: tuple[str, ...] = get_args(StructuredOutputMethod)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'history'?)`` for a mistyped name close to one of ``choices``, else ``""``.

    Example:
        ```python
        assert did_you_mean("histroy", ["history", "select"]) == " (did you mean 'history'?)"
        assert did_you_mean("bogus", ["history"]) == ""
        ```
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_arm_name(name: object) -> str:
    """Check the name of an arm of your own: 1 to 40 letters, digits, ``_ . + -``.

    Raises:
        TypeError: not a string.
        ValueError: not such a name.

    Example:
        ```python
        check_arm_name("fresh-log")  # fine
        check_arm_name("my arm")  # ValueError
        ```
    """
    if not isinstance(name, str):
        raise TypeError(f"an arm's name must be a string; got {type(name).__name__} {name!r:.40}")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"the arm name {name!r:.60} is not usable: give 1 to 40 letters, digits, '_', "
            f"'.', '+' or '-', starting with a letter or digit (e.g. 'fresh-log')"
        )
    return name


def check_server_url(url: object) -> str:
    """Validate a LangGraph server URL (``http://`` or ``https://`` with a host).

    Raises:
        ValueError: it is not such a URL.

    Example:
        ```python
        assert check_server_url("http://127.0.0.1:2024/") == "http://127.0.0.1:2024"
        ```
    """
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"server must be the URL of a LangGraph server, such as http://127.0.0.1:2024; "
            f"got {url!r}"
        )
    return str(url).rstrip("/")


def check_count(name: str, value: object, low: int) -> int:
    """Refuse a count that is not a whole number >= ``low``; the message names ``name``.

    Example:
        ```python
        check_count("--iterations", 3, 1)  # 3
        ```
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be >= {low} (a whole number); got {value!r}")
    return value


def check_number(name: str, value: object, low: float, high: float, *, above: bool) -> None:
    """Refuse a setting that is not a number from ``low`` (excluded if ``above``) to ``high``.

    Example:
        ```python
        check_number("pair_timeout", 60, 0.0, math.inf, above=True)  # fine
        ```
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number; got {value!r}")
    if not math.isfinite(value) or not low <= value <= high or (above and value <= low):
        shown = f"> {low:g}" if above else f"from {low:g} to {high:g}"
        raise ValueError(f"{name} must be {shown}; got {value!r}")


@dataclass(frozen=True)
class _Shared:
    """The settings an eval gives every arm (see `EvalSettings`), checked when made."""

    temperature: float = 1.0
    arm_temperatures: Mapping[str, float] = field(default_factory=dict, hash=False)
    judge_temperature: float = 0.0
    judge_threshold: float = 80.0
    judge_method: StructuredOutputMethod = "json_schema"
    code_timeout: float = CODE_TIMEOUT

    def __post_init__(self) -> None:
        """Check every setting."""
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
                    f"arm_temperatures: unknown arm {arm!r}{did_you_mean(str(arm), ARMS)}; "
                    f"the arms are {ARMS_TEXT} and those of your own, by their names"
                ) from None
        object.__setattr__(self, "arm_temperatures", dict(self.arm_temperatures))
        checked: list[tuple[str, object, float]] = [
            ("temperature", self.temperature, 2.0),
            ("judge_temperature", self.judge_temperature, 2.0),
            ("judge_threshold", self.judge_threshold, 100.0),
        ]
        checked += [(f"arm_temperatures[{a!r}]", v, 2.0) for a, v in self.arm_temperatures.items()]
        for name, value, high in checked:
            check_number(name, value, 0.0, high, above=False)
        check_number("code_timeout", self.code_timeout, 0.0, math.inf, above=True)
        if self.judge_method not in _JUDGE_METHODS:
            raise ValueError(
                f"judge_method must be one of {', '.join(_JUDGE_METHODS)}; "
                f"got {self.judge_method!r}{did_you_mean(str(self.judge_method), _JUDGE_METHODS)}"
            )

    def temperature_of(self, arm: str) -> float:
        """The temperature ``arm``'s agent samples at.

        Example:
            ```python
            ArmSettings(temperature=0.5).temperature_of("single")  # 0.5
            ```
        """
        return float(self.arm_temperatures.get(arm, self.temperature))


@dataclass(frozen=True)
class ArmSettings(_Shared):
    """What every arm of one eval shares: K (``iterations``) and `EvalSettings`' arm settings.

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

    def __post_init__(self) -> None:
        """Check every setting."""
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise TypeError(f"iterations must be a whole number >= 1; got {self.iterations!r}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1 (the budget K); got {self.iterations}")
        super().__post_init__()


@dataclass(frozen=True)
class EvalSettings(_Shared):
    """Every option of `run_eval` beyond its arms, K, concurrency, subset, output and retries.

    Checked when made, before any model call (the table is in docs/eval.md, "From Python").

    Attributes:
        temperature: Every arm's sampling temperature (default 1.0).
        arm_temperatures: Arm name -> its own temperature.
        judge: The judge's chat model (default: the eval's model).
        judge_temperature: The judge's temperature (default 0).
        judge_method: How the judge's verdict is requested: a structured-output method
            (``function_calling`` for llama.cpp's server), or ``"text"``.
        judge_threshold: The judge's score (0-100) that accepts an answer (default 80).
        task_ids: Run only these tasks.
        retry_delay: Seconds before a failed pair's first retry (doubled for each next).
        code_timeout: Seconds a code answer and its tests may run (default 10).
        server: A LangGraph Server serving ``eval_task``: each pair runs there.
        model_id: The model's name in the report and the journal.
        model_digest: The identity of the model's weights (the journal's key).
        model_seed: The seed the model's server was started with (not in the key).
        same_first_answer: Start every arm from one first answer per task.
        model_server_failure: Says why the model's server stopped, else ``None``: the
            eval then stops (`ModelServerDied`) instead of retrying.

    Raises:
        ValueError: a setting is out of range.
        TypeError: a setting has the wrong type.

    Example:
        ```python
        report = run_eval("code", model, iterations=3, settings=EvalSettings(
            temperature=0.7, judge_method="function_calling", task_ids=["fizzbuzz"]))
        ```
    """

    judge: BaseChatModel | None = field(default=None, compare=False, repr=False)
    task_ids: Sequence[str] | None = None
    retry_delay: float = 1.0
    server: str | None = None
    model_id: str | None = None
    model_digest: str | None = None
    model_seed: int | None = None
    same_first_answer: bool = False
    model_server_failure: Callable[[], str | None] | None = field(
        default=None, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        """Check every setting (see the class docstring)."""
        super().__post_init__()
        check_number("retry_delay", self.retry_delay, 0.0, math.inf, above=False)
        if not isinstance(self.same_first_answer, bool):
            raise TypeError(
                f"same_first_answer must be True or False; got {self.same_first_answer!r}"
            )
        if isinstance(self.task_ids, str):
            raise TypeError(f"task_ids must be a list of task ids; got {self.task_ids!r}")
        if self.server is not None:
            object.__setattr__(self, "server", check_server_url(self.server))

    def arm_settings(self, iterations: int) -> ArmSettings:
        """The `ArmSettings` this eval's arms get with a budget of K = ``iterations``.

        Example:
            ```python
            assert EvalSettings(temperature=0.5).arm_settings(3).iterations == 3
            ```
        """
        shared = {f.name: getattr(self, f.name) for f in fields(_Shared)}
        return ArmSettings(iterations=iterations, **shared)


def server_conflict(custom: Sequence[str], same_first_answer: bool, learn: Sequence[str]) -> str:
    """Why these arms cannot run on a LangGraph server (``""``: they can).

    Example:
        ```python
        assert server_conflict([], False, ["adaptive"]).startswith("adaptive learns")
        ```
    """
    if custom:
        return (
            f"arms of your own ({', '.join(custom)}) run here, not on a LangGraph server (it "
            f"runs the built-in arms only): drop the server, or run those arms apart"
        )
    if same_first_answer:
        return (
            "the same first answer is shared by the arms run here; on a LangGraph server "
            "each pair runs alone: drop one of them"
        )
    if learn:
        return (
            f"{', '.join(learn)} learns across the tasks of an eval, which runs here (on a "
            f"LangGraph server each pair runs alone): drop the server, or run it apart"
        )
    return ""


def check_budget(name: str, iterations: int, *, per_iteration: int, first: int) -> None:
    """Refuse a K that is not a multiple of ``per_iteration``, or below ``first``.

    Raises:
        ValueError: K is not a multiple of ``per_iteration``, or below ``first``.

    Example:
        ```python
        check_budget("loop-candidates", 4, per_iteration=2, first=1)  # fine
        ```
    """
    where = "--arms" if name in ARMS else "the eval's arms"
    if first > 1 and iterations < first:
        raise ValueError(
            f"{name} writes {first} first answers, so its budget K must be at least {first}; "
            f"got K={iterations}: give --iterations {first} or more, or leave {name} out of "
            f"{where}"
        )
    if per_iteration > 1 and iterations % per_iteration:
        must = "even" if per_iteration == 2 else f"a multiple of {per_iteration}"
        above = (iterations // per_iteration + 1) * per_iteration
        below = iterations // per_iteration * per_iteration
        fix = f"give --iterations {above}" + (f" (or {below})" if below else "")
        raise ValueError(
            f"{name} writes {per_iteration} answers per iteration, so its budget K must be "
            f"{must}; got K={iterations}: {fix}, or leave {name} out of {where}"
        )


def check_arm_budget(arms: Sequence[str], iterations: int) -> None:
    """Refuse a K a built-in arm cannot spend (odd for loop-candidates, 1 for diverse-first).

    Raises:
        ValueError: the message names the fix.

    Example:
        ```python
        check_arm_budget(["loop", "loop-candidates"], 4)  # fine
        ```
    """
    if "diverse-first" in arms:
        check_budget("diverse-first", iterations, per_iteration=1, first=FIRST_ANSWERS)
    if "loop-candidates" in arms:
        check_budget("loop-candidates", iterations, per_iteration=CANDIDATES, first=1)


def unknown_arms_error(unknown: Sequence[Any], *, where: str) -> str:
    """The message for names that are not built-in arms: each with a close name, the arms.

    Example:
        ```python
        unknown_arms_error(["resampel"], where="arms")
        # "arms: unknown arm 'resampel' (did you mean 'resample'?); the arms are single, ..."
        ```
    """
    named = ", ".join(f"{a!r}{did_you_mean(str(a), ARMS)}" for a in unknown)
    return f"{where}: unknown arm {named}; the arms are {ARMS_TEXT}"
