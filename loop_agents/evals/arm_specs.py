"""``--arm NAME=SPEC``: an arm of your own on the command line.

SPEC is one of:

- ``module:factory``: a factory ``(task, model, settings) -> agent`` (see
  `loop_agents.evals.factory_arm`), imported from a module on the path (the current
  folder first), e.g. ``--arm mine=my_arms:fresh_log``;
- ``loop`` or ``judge-loop``, then options as ``,KEY=VALUE``: a loop built by
  `loop_agents.evals.loop_arm.loop`, judged by the task's visible tests or checks
  (``loop``) or an LLM judge (``judge-loop``), e.g.
  ``--arm fresh=loop,history=feedback_log,feedback=plain,restart=on``.

The loop options (`LOOP_KEYS`): ``history`` (``full``, ``last_attempt``,
``feedback_log``), ``feedback`` (``default``: the review, fenced; ``plain``: the
evaluator's text as it is), ``candidates`` (N >= 2 answers per iteration), ``select``
(``last``, ``best``), ``patience`` (N), ``restart`` (``on``, or N: the most repairs in
a row; a `Restart` control told what must hold), ``first`` (k >= 2: a `DiverseFirst`
control), ``stagnation`` (``on``: a `Stagnation` stop) and ``adaptive`` (``on``: an
`Adaptive` control told what must hold, as the built-in ``adaptive`` arm: it learns
across the eval's tasks which kind of retry pays; not with ``restart``).

Every error is a `ValueError` naming the option and the fix, raised before any model
is called.

Example:
    ```python
    name, arm = parse_arm_spec("fresh=loop,history=feedback_log,restart=on")
    ```
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

__all__ = ["LOOP_KEYS", "load_factory", "parse_arm_spec"]

LOOP_KEYS = (
    "history",
    "feedback",
    "candidates",
    "select",
    "patience",
    "restart",
    "first",
    "stagnation",
    "adaptive",
)
"""The options a loop takes on the command line."""

_FACTORY = re.compile(r"(?P<module>[A-Za-z_][\w.]*):(?P<attribute>[A-Za-z_][\w.]*)")
_CHOICES = {
    "history": ("full", "last_attempt", "feedback_log"),
    "feedback": ("default", "plain"),
    "select": ("last", "best"),
}
SYNTAX = (
    "NAME=module:factory (a function (task, model, settings) -> agent), or "
    "NAME=loop[,KEY=VALUE...] / NAME=judge-loop[,KEY=VALUE...] with KEY one of "
    f"{', '.join(LOOP_KEYS)}"
)


def load_factory(text: str) -> Any:
    """Import ``module:attribute`` (the current folder first on the path) and check it.

    Raises:
        ValueError: the module cannot be imported, has no such attribute, or it is not
            a function ``(task, model, settings) -> agent``.

    Example:
        ```python
        factory = load_factory("my_arms:fresh_log")
        ```
    """
    from loop_agents.evals.factory_arm import check_factory

    found = _FACTORY.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not module:attribute (e.g. my_arms:fresh_log)")
    module_name, attribute = found["module"], found["attribute"]
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"cannot import the module {module_name!r} ({exc}); it must be importable from "
            f"the current folder ({here}) or the Python path"
        ) from None
    except Exception as exc:  # the module's own code failed
        raise ValueError(
            f"importing the module {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(
                f"the module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
                f"attribute {attribute!r}"
            )
        value = getattr(value, part)
    try:
        check_factory(value, where=f"{module_name}:{attribute}")
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return value


def _number(key: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise ValueError(f"{key}={value!r}: give a whole number >= {low}")
    return number


def _loop(base: str, options: list[str]) -> Any:
    from loop_agents.controls import Adaptive, DiverseFirst, Restart, Stagnation
    from loop_agents.evals.grading import requirement_points
    from loop_agents.evals.loop_arm import loop
    from loop_agents.loop.feedback import PLAIN_FEEDBACK

    built: dict[str, Any] = {}
    controls: list[Any] = []
    seen: set[str] = set()
    for option in options:
        key, sep, value = option.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in LOOP_KEYS:
            raise ValueError(f"{option!r} is not KEY=VALUE with KEY one of {', '.join(LOOP_KEYS)}")
        if key in seen:
            raise ValueError(f"{key} is given twice")
        seen.add(key)
        if key in _CHOICES:
            if value not in _CHOICES[key]:
                raise ValueError(f"{key}={value!r}: give one of {', '.join(_CHOICES[key])}")
            if key == "feedback":
                if value == "plain":
                    built["feedback_format"] = PLAIN_FEEDBACK
            else:
                built[key] = value
        elif key in ("candidates", "first"):
            number = _number(key, value, 2)
            if key == "candidates":
                built["candidates"] = number
            else:
                controls.append(DiverseFirst(number))
        elif key == "patience":
            built["patience"] = _number(key, value, 1)
        elif key == "restart":
            repairs = None if value == "on" else _number("restart (on, or N repairs)", value, 0)
            controls.append(Restart(max_repairs=repairs, requirements=requirement_points))
        elif value != "on":
            raise ValueError(f"{key}={value!r}: give {key}=on")
        elif key == "adaptive":
            controls.append(Adaptive(requirements=requirement_points))
        else:
            controls.append(Stagnation())
    if {"adaptive", "restart"} <= seen:
        raise ValueError("adaptive and restart both choose what a retry is sent; give one of them")
    if controls:
        built["controls"] = controls
    return loop(evaluator="judge" if base == "judge-loop" else "tests", **built)


def parse_arm_spec(text: str) -> tuple[str, Any]:
    """``NAME=SPEC`` -> the arm's name and the arm (a `loop(...)`, or a factory).

    Raises:
        ValueError: the text, the name, an option or the factory is wrong; the message
            starts with what was given and says what is expected.

    Example:
        ```python
        name, arm = parse_arm_spec("fresh=loop,history=feedback_log")
        ```
    """
    from loop_agents.evals.arm_names import ARMS, check_arm_name

    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    try:
        if not sep or not spec:
            raise ValueError(f"give {SYNTAX}")
        check_arm_name(name)
        if name in ARMS:
            raise ValueError(
                f"{name!r} is a built-in arm's name (give it in --arms); name yours otherwise"
            )
        base, *options = [part.strip() for part in spec.split(",")]
        if ":" in base:
            if options:
                raise ValueError(f"a factory takes no options; give {SYNTAX}")
            return name, load_factory(base)
        if base not in ("loop", "judge-loop"):
            raise ValueError(f"{base!r} is neither a loop nor module:factory; give {SYNTAX}")
        return name, _loop(base, options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--arm {text!r}: {exc}") from None
