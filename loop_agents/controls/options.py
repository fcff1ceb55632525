"""Checking a control's options where it is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from loop_agents.runtime.numbers import describe_number

F = TypeVar("F", bound=Callable[..., Any])


def check_count(option: str, value: object, meaning: str, *, least: int = 1, most: int = 0) -> int:
    """``value`` if it is an int from ``least`` (to ``most`` when given), else an error.

    The `TypeError` or `ValueError` names ``option``, the range and ``meaning`` (what the
    number counts, and what ``None`` means where it is allowed).
    """
    span = f"from {least} to {most}" if most else f">= {least}"
    if isinstance(value, bool) or not isinstance(value, int):
        shown = f"{type(value).__name__} {value!r:.40}"
        raise TypeError(f"{option} must be an int {span} ({meaning}); got {shown}")
    if value < least or (most and value > most):
        raise ValueError(f"{option} must be {span} ({meaning}); got {describe_number(value)}")
    return value


def check_function(option: str, value: F | None, default: F) -> F:
    """``value`` (``default`` for ``None``) if it is a function of a text, else a `TypeError`."""
    if value is not None and not callable(value):
        shown = f"{type(value).__name__} {value!r:.40}"
        raise TypeError(f"{option} must be a function of a text; got {shown}")
    return value or default
