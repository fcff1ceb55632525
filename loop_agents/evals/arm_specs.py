"""``--arm NAME=SPEC``: an arm of your own on the command line, checked before LangChain loads.

SPEC is one of:

- ``module:factory``: a factory ``(task, model, settings) -> agent`` (see
  `loop_agents.evals.factory_arm`), imported from a module on the path (the current
  folder first), e.g. ``--arm mine=my_arms:fresh_log``;
- ``loop`` or ``judge-loop``, then options as ``,KEY=VALUE``: a loop built by
  `loop_agents.evals.loop_arm.loop` from the controls the options stand for, judged by the
  task's visible tests or checks (``loop``) or an LLM judge (``judge-loop``), e.g.
  ``--arm fresh=loop,history=feedback_log,feedback=plain,restart=on``.

The loop options (`LOOP_KEYS`) and the controls they stand for: ``history`` (``full``,
``last_attempt``, ``feedback_log``: `History`), ``feedback`` (``default``: the review,
fenced; ``plain``: the evaluator's text as it is: `FeedbackStyle`), ``candidates`` (N >= 2
answers per iteration: `Candidates`), ``select`` (``last``, ``best``: `AnswerSelection`),
``patience`` (N: `Plateau`), ``restart`` (``on``, or N: the most repairs in a row; a
`Restart` control told what must hold), ``first`` (k >= 2: a `DiverseFirst` control) and
``stagnation`` (``on``: a `Stagnation` stop). The table (`controls_of`) is the eval's own
until the core's table of control shorthands exists; it is shaped to be swapped for it.

Every error is a `ValueError` naming the option and the fix (with the closest name for a
mistyped key), raised before any model is called; the arguments are checked before
LangChain or LangGraph is imported (only a valid loop's controls import them).

Example:
    ```python
    name, arm = parse_arm_spec("fresh=loop,history=feedback_log,restart=on")
    ```
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from loop_agents.evals.settings import ARMS, check_arm_name, did_you_mean

__all__ = ["LOOP_KEYS", "check_factory", "controls_of", "load_factory", "parse_arm_spec"]

LOOP_KEYS = (
    "history",
    "feedback",
    "candidates",
    "select",
    "patience",
    "restart",
    "first",
    "stagnation",
)
"""The options a loop takes on the command line, in the order their controls run."""

FACTORY_SIGNATURE = "(task, model, settings) -> agent"

_FACTORY = re.compile(r"(?P<module>[A-Za-z_][\w.]*):(?P<attribute>[A-Za-z_][\w.]*)")
_CHOICES = {
    "history": ("full", "last_attempt", "feedback_log"),
    "feedback": ("default", "plain"),
    "select": ("last", "best"),
}
_LEAST = {"candidates": 2, "patience": 1, "first": 2, "restart": 0}
SYNTAX = (
    f"NAME=module:factory (a function {FACTORY_SIGNATURE}), or "
    "NAME=loop[,KEY=VALUE...] / NAME=judge-loop[,KEY=VALUE...] with KEY one of "
    f"{', '.join(LOOP_KEYS)}"
)


def check_factory(factory: object, *, where: str = "the arm factory") -> None:
    """Raise `TypeError` unless ``factory`` can be called as ``factory(task, model, settings)``.

    Example:
        ```python
        check_factory(lambda task, model, settings: model)  # fine
        ```
    """
    if isinstance(factory, type) or not callable(factory):
        raise TypeError(
            f"{where} must be a function {FACTORY_SIGNATURE}; got {type(factory).__name__} "
            f"{factory!r:.60}"
        )
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a signature that cannot be read: found out when called
        return
    try:
        signature.bind(None, None, None)
    except TypeError as exc:
        name = getattr(factory, "__qualname__", None) or type(factory).__name__
        raise TypeError(
            f"{where} {name!r} cannot be called as {FACTORY_SIGNATURE}: its signature is "
            f"{signature} ({exc})"
        ) from None


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
                + did_you_mean(part, [n for n in dir(value) if not n.startswith("_")])
            )
        value = getattr(value, part)
    try:
        check_factory(value, where=f"{module_name}:{attribute}")
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return value


def _loop_options(options: list[str]) -> dict[str, str | int | None]:
    """The ``KEY=VALUE`` options of a loop, each checked (no control is built yet)."""
    found: dict[str, str | int | None] = {}
    for option in options:
        key, sep, value = option.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in LOOP_KEYS:
            raise ValueError(
                f"{option!r} is not KEY=VALUE with KEY one of {', '.join(LOOP_KEYS)}"
                + did_you_mean(key, LOOP_KEYS)
            )
        if key in found:
            raise ValueError(f"{key} is given twice")
        if key == "stagnation" and value != "on":
            raise ValueError(f"stagnation={value!r}: give stagnation=on")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ValueError(
                f"{key}={value!r}: give one of {', '.join(_CHOICES[key])}"
                + did_you_mean(value, _CHOICES[key])
            )
        if key in _LEAST and not (key == "restart" and value == "on"):
            low = _LEAST[key]
            if not value.isdigit() or int(value) < low:
                also = "give restart=on, or " if key == "restart" else ""
                raise ValueError(f"{key}={value!r}: {also}give a whole number >= {low}")
            found[key] = int(value)
        else:
            found[key] = None if value == "on" else value
    return found


def controls_of(options: Mapping[str, str | int | None]) -> list[Any]:
    """The controls a loop's checked options stand for, in the order they run.

    ``history`` and ``feedback`` (with ``history=feedback_log`` the log is written in
    that format), ``candidates``, ``patience``, ``select``, then ``first``, ``restart``
    and ``stagnation`` in the order given.

    Example:
        ```python
        controls_of({"history": "feedback_log", "restart": None})
        # [History('feedback_log'), Restart(requirements=requirement_points)]
        ```
    """
    from loop_agents.evals.grading import requirement_points
    from loop_agents.loop.controls import (
        AnswerSelection,
        Candidates,
        DiverseFirst,
        FeedbackStyle,
        History,
        Plateau,
        Restart,
        Stagnation,
    )
    from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, PLAIN_FEEDBACK

    feedback = PLAIN_FEEDBACK if options.get("feedback") == "plain" else DEFAULT_FEEDBACK_FORMAT
    built: dict[str, Any] = {
        "history": lambda value: History(value, feedback_format=feedback),
        "candidates": Candidates,
        "feedback": lambda value: FeedbackStyle(feedback),
        "patience": Plateau,
        "select": AnswerSelection,
    }
    later: dict[str, Any] = {
        "first": DiverseFirst,
        "restart": lambda value: Restart(max_repairs=value, requirements=requirement_points),
        "stagnation": lambda value: Stagnation(),
    }
    controls = [made(options[key]) for key, made in built.items() if key in options]
    controls = [c for c in controls if c.active]  # the defaults build nothing
    return controls + [later[key](value) for key, value in options.items() if key in later]


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
            raise ValueError(
                f"{base!r} is neither a loop nor module:factory"
                f"{did_you_mean(base, ('loop', 'judge-loop'))}; give {SYNTAX}"
            )
        checked = _loop_options(options)
        from loop_agents.evals.loop_arm import loop

        controls = controls_of(checked)
        return name, loop(evaluator="judge" if base == "judge-loop" else "tests", controls=controls)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--arm {text!r}: {exc}") from None
