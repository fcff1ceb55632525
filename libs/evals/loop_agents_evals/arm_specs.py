"""``--arm NAME=SPEC``: an arm of your own on the command line, checked before LangChain loads.

SPEC is ``module:factory`` (imported from the current folder first), or ``loop`` /
``judge-loop`` followed by ``,KEY=VALUE`` options, each building the control of the
command's table (`loop_agents_cli.control_options`), in the table's order (the keys are in
docs/eval.md, "On the command line"). Every error is a `ValueError` naming the fix.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any

from loop_agents_evals.settings import ARMS, check_arm_name, did_you_mean

__all__ = ["check_factory", "load_factory", "parse_arm_spec"]

FACTORY_SIGNATURE = "(task, model, settings) -> agent"

_FACTORY = re.compile(r"(?P<module>[A-Za-z_][\w.]*):(?P<attribute>[A-Za-z_][\w.]*)")
SYNTAX = (
    f"NAME=module:factory (a function {FACTORY_SIGNATURE}), or "
    "NAME=loop[,KEY=VALUE...] / NAME=judge-loop[,KEY=VALUE...] with KEY one of history, "
    "feedback, candidates, select, patience, restart, first, stagnation, adaptive"
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
        ValueError: it cannot be imported, or is not a function ``(task, model, settings)``.

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


def _loop(base: str, options: list[str]) -> Any:
    """The loop of ``KEY=VALUE`` options, each the control `KEYS` gives its key."""
    from loop_agents_cli.control_options import KEYS, control_of_key
    from loop_agents_evals.grading import requirement_points
    from loop_agents_evals.loop_arm import loop

    given: dict[str, str] = {}
    for option in options:
        key, sep, value = (part.strip() for part in option.partition("="))
        if not sep or key not in KEYS:
            raise ValueError(
                f"{option!r} is not KEY=VALUE with KEY one of {', '.join(KEYS)}"
                + did_you_mean(key, KEYS)
            )
        if key in given:
            raise ValueError(f"{key} is given twice")
        given[key] = value
    if {"adaptive", "restart"} <= set(given):
        raise ValueError("adaptive and restart both choose what a retry is sent; give one of them")
    order = list(KEYS)  # the table's order, which is the order the controls run in
    controls = [
        control_of_key(key, given[key], requirements=requirement_points)
        for key in sorted(given, key=order.index)
    ]
    return loop(evaluator="judge" if base == "judge-loop" else "tests", controls=controls)


def parse_arm_spec(text: str) -> tuple[str, Any]:
    """``NAME=SPEC`` -> the arm's name and the arm (a `loop(...)`, or a factory).

    Raises:
        ValueError: the text, the name, an option or the factory is wrong.

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
        return name, _loop(base, options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--arm {text!r}: {exc}") from None
