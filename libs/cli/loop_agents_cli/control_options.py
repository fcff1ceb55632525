"""Controls by short name: ``KEY=VALUE`` options that each build one control.

The eval's loop arms are written as options (``--arm fresh=loop,history=feedback_log,
restart=on``); `KEYS` is the table of those keys, each with the control it builds from
its text, in the order the controls run:

| key | values | control |
| --- | --- | --- |
| ``history`` | ``full``, ``last_attempt``, ``feedback_log``, ... | `History` |
| ``candidates`` | N from 2 to 64 (answers per iteration) | `Candidates` |
| ``feedback`` | ``default`` (the review, fenced), ``plain`` (the text as it is) | `FeedbackStyle` |
| ``patience`` | N >= 1 (scored iterations without a gain) | `Plateau` |
| ``select`` | ``last``, ``best`` | `AnswerSelection` |
| ``restart`` | ``on``, or N (the most repairs in a row before a fresh sample) | `Restart` |
| ``first`` | k from 2 to 64 (first answers) | `DiverseFirst` |
| ``stagnation`` | ``on`` | `Stagnation` |
| ``adaptive`` | ``on`` | `Adaptive` |

Example:
    ```python
    control = control_of_key("history", "feedback_log")  # History("feedback_log")
    ```
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, cast, get_args

from loop_agents.controls import (
    Adaptive,
    AnswerSelection,
    Candidates,
    DiverseFirst,
    FeedbackStyle,
    History,
    LoopControl,
    Plateau,
    Restart,
    Stagnation,
)
from loop_agents.controls.restart import Requirements
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, PLAIN_FEEDBACK
from loop_agents.loop.history.policies import HISTORY_NAMES, HistoryName
from loop_agents.loop.records import Selection

SELECTIONS: tuple[str, ...] = get_args(Selection)

Build = Callable[[str, "Requirements | None"], LoopControl]
"""From a key's text (and what must hold, for ``restart`` and ``adaptive``), the control."""


def _whole(key: str, text: str, low: int, high: int | None = None) -> int:
    try:
        number = int(text)
    except ValueError:
        number = low - 1
    if number < low or (high is not None and number > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise ValueError(f"{key}={text!r}: give a whole number {bound}")
    return number


def _choice(key: str, text: str, choices: Sequence[str]) -> str:
    if text in choices:
        return text
    close = difflib.get_close_matches(text, choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{key}={text!r}: give one of {', '.join(choices)}{hint}")


def _on(key: str, text: str) -> None:
    if text != "on":
        raise ValueError(f"{key}={text!r}: give {key}=on")


def _told(requirements: Requirements | None) -> dict[str, Any]:
    return {} if requirements is None else {"requirements": requirements}


def _restart(text: str, requirements: Requirements | None) -> LoopControl:
    repairs = None if text == "on" else _whole("restart (on, or N repairs)", text, 0)
    return Restart(max_repairs=repairs, **_told(requirements))


def _adaptive(text: str, requirements: Requirements | None) -> LoopControl:
    _on("adaptive", text)
    return Adaptive(**_told(requirements))


def _stagnation(text: str, requirements: Requirements | None) -> LoopControl:
    _on("stagnation", text)
    return Stagnation()


def _feedback(text: str, requirements: Requirements | None) -> LoopControl:
    plain = _choice("feedback", text, ("default", "plain")) == "plain"
    return FeedbackStyle(PLAIN_FEEDBACK if plain else DEFAULT_FEEDBACK_FORMAT)


KEYS: dict[str, Build] = {
    "history": lambda text, _: History(cast(HistoryName, _choice("history", text, HISTORY_NAMES))),
    "candidates": lambda text, _: Candidates(_whole("candidates", text, 2, 64)),
    "feedback": _feedback,
    "patience": lambda text, _: Plateau(_whole("patience", text, 1)),
    "select": lambda text, _: AnswerSelection(cast(Selection, _choice("select", text, SELECTIONS))),
    "restart": _restart,
    "first": lambda text, _: DiverseFirst(_whole("first", text, 2, 64)),
    "stagnation": _stagnation,
    "adaptive": _adaptive,
}
"""Each key, and how it builds its control from a text; in the order the controls run."""


def control_of_key(
    key: str, value: str, *, requirements: Requirements | None = None
) -> LoopControl:
    """The control an option names: ``history=feedback_log`` -> ``History("feedback_log")``.

    ``requirements``: for ``restart`` and ``adaptive``, what one feedback says must hold.
    `ValueError` for an unknown key (with the closest one) or a value it does not take.

    Example:
        ```python
        control_of_key("select", "best")  # AnswerSelection('best')
        ```
    """
    build = KEYS.get(key)
    if build is None:
        close = difflib.get_close_matches(key, list(KEYS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{key!r} is not a key: give one of {', '.join(KEYS)}{hint}")
    try:
        return build(value, requirements)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        raise ValueError(
            text if text.startswith(f"{key}=") else f"{key}={value!r}: {text}"
        ) from None


__all__ = ["KEYS", "control_of_key"]
