"""The names of an eval's arms: the built-in ones, and what a name of your own may be.

Importing this module is cheap (no LangChain): the command's argument checks and the
report use it.

Example:
    ```python
    assert "resample" in ARMS
    assert check_arm_name("feedback-log") == "feedback-log"
    ```
"""

from __future__ import annotations

import re
from typing import Literal, get_args

__all__ = [
    "ARMS",
    "BASELINES",
    "CANDIDATES",
    "DEFAULT_ARMS",
    "FIRST_ANSWERS",
    "HEADER_ARMS",
    "Arm",
    "check_arm_name",
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
"""The built-in arms whose temperatures the journal's first line records (its key), as
the first journals did, so that theirs resume. A built-in arm added since (``adaptive``)
is declared on a line of its own when it first runs, as an arm of your own is."""

DEFAULT_ARMS: tuple[Arm, ...] = ("single", "loop", "resample", "judge-loop")
"""The arms an eval runs when none are named (the others are chosen explicitly)."""

BASELINES: tuple[Arm, ...] = ("resample", "single")
"""The arms every arm of your own is compared with, task by task, when they ran."""

CANDIDATES = 2
"""Answers per iteration of ``loop-candidates``."""

FIRST_ANSWERS = 2
"""First answers of ``diverse-first`` (then one repair per iteration)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}")


def check_arm_name(name: object) -> str:
    """Check the name of an arm of your own: 1 to 40 letters, digits, ``_ . + -``.

    The name is how the arm is shown in the tables, the JSON, the journal and the
    command's options (``--arm NAME=...``, ``--arm-temperature NAME=T``), so it starts
    with a letter or digit and holds no space, comma or ``=``.

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
