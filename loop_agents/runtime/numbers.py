"""Reading numbers that users, evaluators and models hand the loop.

``float(10**400)`` raises ``OverflowError``; `finite_float` answers "not finite" instead.
"""

from __future__ import annotations

import math


def finite_float(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not a finite real number.

    ``bool`` is not a number here (``True`` is an answer, not a score); an ``int`` too
    large for a float, ``inf`` and ``nan`` are not finite.

    Example:
        ```python
        assert finite_float(81) == 81.0
        assert finite_float(10**400) is None
        assert finite_float(float("nan")) is None
        assert finite_float(True) is None
        ```

    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def describe_number(value: object) -> str:
    """A short, exact description of ``value`` for error messages.

    Floats are shown in full (``100.0000001``, not ``100``), huge ints by their size.

    Example:
        ```python
        assert describe_number(100.0000001) == "100.0000001"
        assert describe_number(10**400) == "an int of 401 digits"
        ```

    """
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            text = str(value)
        except ValueError:  # more digits than Python converts to text
            return "an int of thousands of digits"
        return text if len(text) <= 30 else f"an int of {len(text.lstrip('-'))} digits"
    if isinstance(value, float):
        return repr(value)
    return f"{type(value).__name__} {value!r:.60}"
