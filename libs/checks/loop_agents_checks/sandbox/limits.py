"""The limits a program runs under (`RunLimits`), their defaults and their validation."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict, get_args

DEFAULT_TIMEOUT = 10.0  # seconds
DEFAULT_MEMORY_LIMIT = 512 * 1024 * 1024  # bytes of address space (RLIMIT_AS)
DEFAULT_MAX_OUTPUT = 10_000  # bytes of stdout and of stderr each
DEFAULT_MAX_FILE_SIZE = 16 * 1024 * 1024  # bytes of any one file written (RLIMIT_FSIZE)
DEFAULT_MAX_PROCESSES = 64  # processes and threads at once, the program included
GRACE_SECONDS = 2.0  # the most a run takes beyond its time limit (cleanup, reading pipes)
SCRIPT_NAME = "answer.py"  # the program's file name; tracebacks show it
RLIMIT_MAX = 2**63 - 1  # the largest resource limit setrlimit takes (a signed 64-bit value)

Isolation = Literal["auto", "bwrap", "unshare", "process"]
ISOLATIONS: tuple[str, ...] = get_args(Isolation)

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class RunLimits:
    """The limits a program runs under; validated when made.

    Attributes:
        timeout: Wall-clock seconds before the program and what it started are killed.
        memory_limit: Bytes of address space (``RLIMIT_AS``); ``None`` for no limit.
        max_output: Bytes kept of stdout and of stderr each (head and tail).
        max_file_size: The largest file, in bytes, the program may write; ``None`` for
            no limit.
        python: The interpreter; the current one by default.
        env: Extra environment variables; names that look like secrets are refused.
        isolation: ``"auto"`` (the first of the others that works here), ``"bwrap"``,
            ``"unshare"`` or ``"process"``; see ``docs/sandbox.md``.
        max_processes: Processes and threads the program may have at once, itself
            included (the runner's own helpers are not counted); ``None`` for no cap.

    Raises:
        ValueError: a limit is out of range, ``isolation`` is unknown or ``env`` holds a
            secret-like name.

    Example:
        ```python
        limits = RunLimits(timeout=5, memory_limit=256 * 1024**2, max_processes=16)
        result = run_python("print(1)", **limits.options())
        ```
    """

    timeout: float = DEFAULT_TIMEOUT
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    max_output: int = DEFAULT_MAX_OUTPUT
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE
    python: str = field(default_factory=lambda: sys.executable)
    env: Mapping[str, str] = field(default_factory=dict)
    isolation: Isolation = "auto"
    max_processes: int | None = DEFAULT_MAX_PROCESSES

    def options(self) -> dict[str, Any]:
        """These limits as keyword arguments of `run_python` and `arun_python`."""
        return {limit.name: getattr(self, limit.name) for limit in fields(self)}

    def __post_init__(self) -> None:
        if not _positive_seconds(self.timeout):
            raise ValueError(
                f"timeout must be a finite number of seconds > 0; got {_shown(self.timeout)}"
            )
        whole_numbers = {  # name: (the lowest value, the range in words, what None means)
            "memory_limit": (1024 * 1024, "a number of bytes from 1 MiB", "no limit"),
            "max_file_size": (1024 * 1024, "a number of bytes from 1 MiB", "no limit"),
            "max_output": (16, "a number of bytes from 16", ""),
            "max_processes": (1, "a whole number from 1", "no cap"),
        }
        for name, (lowest, words, unset) in whole_numbers.items():
            value = getattr(self, name)
            if (value is not None or not unset) and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not lowest <= value <= RLIMIT_MAX
            ):
                counts = " (the program itself counts)" if name == "max_processes" else ""
                none = f", or None for {unset}" if unset else ""
                raise ValueError(
                    f"{name} must be {words} to 2**63 - 1{counts}{none}; got {_shown(value)}"
                )
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"isolation must be one of {', '.join(map(repr, ISOLATIONS))}; "
                f"got {self.isolation!r}"
            )
        if not isinstance(self.python, str) or not self.python:
            raise ValueError(f"python must be the path of an interpreter; got {self.python!r}")
        bad = sorted(
            repr(name)
            for name, value in self.env.items()
            if not (isinstance(name, str) and _ENV_NAME.match(name) and isinstance(value, str))
            or "\0" in value
        )
        if bad:
            raise ValueError(
                f"env must map variable names (letters, digits, _) to strings; fix {bad}"
            )
        secrets = sorted(name for name in self.env if _SECRET_NAME.search(name))
        if secrets:
            raise ValueError(
                f"env must not pass secrets to code from an answer; remove {secrets} "
                f"(names with KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL are refused)"
            )


class RunOptions(TypedDict, total=False):
    """The keyword arguments of `run_python` and `arun_python` (see `run_python`)."""

    timeout: float
    memory_limit: int | None
    max_output: int
    max_file_size: int | None
    python: str | None
    env: Mapping[str, str] | None
    isolation: Isolation
    max_processes: int | None


def make_limits(
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    isolation: Isolation = "auto",
    max_processes: int | None = DEFAULT_MAX_PROCESSES,
) -> RunLimits:
    """`RunLimits` from the keyword arguments of `run_python` (``None`` python: this one).

    Example:
        ```python
        limits = make_limits(timeout=3, isolation="bwrap")
        ```
    """
    return RunLimits(
        timeout=timeout,
        memory_limit=memory_limit,
        max_output=max_output,
        max_file_size=max_file_size,
        python=python or sys.executable,
        env=dict(env or {}),
        isolation=isolation,
        max_processes=max_processes,
    )


def _positive_seconds(value: object) -> bool:
    """Whether ``value`` is a finite number > 0 (an ``int`` too large for a float is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        seconds = float(value)
    except OverflowError:
        return False
    return math.isfinite(seconds) and seconds > 0


def _shown(value: object) -> str:
    """``repr(value)``, shortened when long (an int of 400 digits)."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:20]}... ({len(shown)} characters)"
