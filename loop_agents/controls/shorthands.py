"""Names that build controls: one table for the former keywords, the command and the arms.

A loop's behaviour beyond its agent, evaluator and cap is a list of controls
(``controls=[AnswerSelection("best"), Plateau(2)]``). Three places name controls
by a short name, and `SHORTHANDS` is the one table behind all of them:

- the keyword options `create_loop_agent` and `LoopMiddleware` took before controls
  were the API (``select="best"``, ``patience=2``, ...): still accepted in this release,
  each with a `DeprecationWarning` that names the control to pass instead
  (`controls_of_keywords`); they go in loop_agents 0.3;
- the ``loop-agents`` command's options (``run --select best``) and the eval's arm keys
  (``--arm fresh=loop,history=feedback_log,restart=on``): `control_of_key`.

| control | former keywords | key (command, arms) |
| --- | --- | --- |
| `Criteria` | ``show_criteria``, ``criteria`` | |
| `History` | ``history`` | ``history`` |
| `Candidates` | ``candidates``, ``candidate_temperature`` | ``candidates`` |
| `AgentErrors` | ``on_agent_error``, ``count_failed_attempts``, ``max_agent_errors`` | |
| `Advice` | ``threshold``, ``advisor`` | |
| `FeedbackStyle` | ``feedback_format`` | ``feedback`` |
| `Budgets` | ``token_budget``, ``time_budget``, ``request_budget``, ``cost_budget``, ``prices`` | |
| `Plateau` | ``patience``, ``min_delta`` | ``patience`` |
| `AnswerSelection` | ``select`` | ``select`` |
| `Retries` | ``agent_retry_policy``, ``evaluator_retry_policy``, ``agent_timeout``, |  |
|  | ``evaluator_timeout`` |  |
| `Restart` | | ``restart`` |
| `DiverseFirst` | | ``first`` |
| `Stagnation` | | ``stagnation`` |
| `Adaptive` | | ``adaptive`` |

Example:
    ```python
    control = control_of_key("history", "feedback_log")  # History("feedback_log")
    ```
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loop_agents.controls.adaptive import Adaptive
from loop_agents.controls.advice import Advice
from loop_agents.controls.agent_errors import AgentErrors
from loop_agents.controls.budgets import Budgets
from loop_agents.controls.candidates import Candidates
from loop_agents.controls.criteria import Criteria
from loop_agents.controls.diverse_first import DiverseFirst
from loop_agents.controls.feedback_format import FeedbackStyle
from loop_agents.controls.history import History
from loop_agents.controls.plateau import Plateau
from loop_agents.controls.restart import Requirements, Restart
from loop_agents.controls.retries import Retries
from loop_agents.controls.selection import AnswerSelection
from loop_agents.controls.stagnation import Stagnation
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, PLAIN_FEEDBACK
from loop_agents.loop.history.policies import HISTORY_NAMES
from loop_agents.loop.protocol import LoopControl
from loop_agents.loop.records import check_select

Arguments = tuple[tuple[Any, ...], dict[str, Any]]
"""A control constructor's positional and keyword arguments."""


@dataclass(frozen=True)
class Shorthand:
    """One control and the short names that build it.

    Attributes:
        control: The control's class.
        keywords: The former keyword options of `create_loop_agent` it stands for.
        arguments: From those keywords' values (each at its former default when not
            given), the constructor's arguments; ``None`` when they leave the loop as it
            is without the control.
        key: The command's option and the arms' key for it (``None``: none).
        values: What the key takes, for messages.
        parse: From a key's text (and the arm's ``requirements``), the arguments.

    """

    control: type[LoopControl]
    keywords: tuple[str, ...] = ()
    arguments: Callable[..., Arguments | None] | None = None
    key: str | None = None
    values: str = ""
    parse: Callable[[str, Requirements | None], Arguments] | None = None

    def build(self, arguments: Arguments) -> LoopControl:
        """The control, from its constructor's arguments."""
        args, kwargs = arguments
        return self.control(*args, **kwargs)

    def shown(self, arguments: Arguments) -> str:
        """How the control is written in code: ``Plateau(2, min_delta=5)``."""
        args, kwargs = arguments
        parts = [_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()]
        return f"{self.control.__name__}({', '.join(parts)})"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


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


# -- the former keywords, as constructor arguments (None: the loop as without the control) --


def _criteria(show_criteria: object = False, criteria: object = None) -> Arguments | None:
    if not isinstance(show_criteria, bool):
        raise TypeError(f"show_criteria must be True or False; got {show_criteria!r:.40}")
    if not show_criteria:
        if criteria is not None:
            raise ValueError(
                "criteria= is shown to the agent only with show_criteria=True; pass "
                "controls=[Criteria('...')] instead of both"
            )
        return None
    return ((criteria,), {}) if criteria is not None else ((), {})


def _history(history: object = "full") -> Arguments | None:
    return None if history == "full" else ((history,), {})


def _candidates(candidates: object = 1, candidate_temperature: object = None) -> Arguments | None:
    if candidates == 1 and not isinstance(candidates, bool):
        if candidate_temperature is not None:
            raise ValueError(
                "candidate_temperature applies with candidates=k (k > 1); pass "
                "controls=[Candidates(k, temperature=...)], or set the temperature on the model"
            )
        return None
    kwargs = {} if candidate_temperature is None else {"temperature": candidate_temperature}
    return (candidates,), kwargs


def _agent_errors(
    on_agent_error: object = "raise",
    count_failed_attempts: object = True,
    max_agent_errors: object = 3,
) -> Arguments | None:
    if on_agent_error == "raise" and count_failed_attempts is True and max_agent_errors == 3:
        return None
    kwargs: dict[str, Any] = {}
    if count_failed_attempts is not True:
        kwargs["count_failed_attempts"] = count_failed_attempts
    if max_agent_errors != 3:
        kwargs["max_agent_errors"] = max_agent_errors
    return (on_agent_error,), kwargs


def _advice(threshold: object = None, advisor: object = None) -> Arguments | None:
    if threshold is None and advisor is None:
        return None
    return ((threshold,) if threshold is not None else ()), (
        {"model": advisor} if advisor is not None else {}
    )


def _feedback_format(feedback_format: object = DEFAULT_FEEDBACK_FORMAT) -> Arguments | None:
    return None if feedback_format == DEFAULT_FEEDBACK_FORMAT else ((feedback_format,), {})


def _given(**values: Any) -> Arguments | None:
    kwargs = {k: v for k, v in values.items() if v is not None}
    return ((), kwargs) if kwargs else None


def _budgets(
    token_budget: object = None,
    time_budget: object = None,
    request_budget: object = None,
    cost_budget: object = None,
    prices: object = None,
) -> Arguments | None:
    return _given(
        token_budget=token_budget,
        time_budget=time_budget,
        request_budget=request_budget,
        cost_budget=cost_budget,
        prices=prices,
    )


def _plateau(patience: object = None, min_delta: object = 0.0) -> Arguments | None:
    if patience is None:
        if min_delta:
            raise ValueError(
                f"min_delta={min_delta!r} has no effect without patience; pass "
                f"controls=[Plateau(N, min_delta={min_delta!r})]"
            )
        return None
    return (patience,), ({"min_delta": min_delta} if min_delta else {})


def _select(select: object = "last") -> Arguments | None:
    return None if check_select(select) == "last" else ((select,), {})


def _retries(
    agent_retry_policy: object = None,
    evaluator_retry_policy: object = None,
    agent_timeout: object = None,
    evaluator_timeout: object = None,
) -> Arguments | None:
    return _given(
        agent_retry_policy=agent_retry_policy,
        evaluator_retry_policy=evaluator_retry_policy,
        agent_timeout=agent_timeout,
        evaluator_timeout=evaluator_timeout,
    )


# -- the keys of the command and the arms --------------------------------------------------


def _parse_restart(text: str, requirements: Requirements | None) -> Arguments:
    repairs = None if text == "on" else _whole("restart (on, or N repairs)", text, 0)
    kwargs: dict[str, Any] = {"max_repairs": repairs}
    if requirements is not None:
        kwargs["requirements"] = requirements
    return (), kwargs


def _parse_adaptive(text: str, requirements: Requirements | None) -> Arguments:
    _on("adaptive", text)
    return (), ({"requirements": requirements} if requirements is not None else {})


def _parse_stagnation(text: str, requirements: Requirements | None) -> Arguments:
    _on("stagnation", text)
    return (), {}


SHORTHANDS: tuple[Shorthand, ...] = (
    Shorthand(Criteria, ("show_criteria", "criteria"), _criteria),
    Shorthand(
        History,
        ("history",),
        _history,
        key="history",
        values=", ".join(HISTORY_NAMES),
        parse=lambda text, _: ((_choice("history", text, HISTORY_NAMES),), {}),
    ),
    Shorthand(
        Candidates,
        ("candidates", "candidate_temperature"),
        _candidates,
        key="candidates",
        values="N >= 2 (answers per iteration)",
        parse=lambda text, _: ((_whole("candidates", text, 2, 64),), {}),
    ),
    Shorthand(
        AgentErrors, ("on_agent_error", "count_failed_attempts", "max_agent_errors"), _agent_errors
    ),
    Shorthand(Advice, ("threshold", "advisor"), _advice),
    Shorthand(
        FeedbackStyle,
        ("feedback_format",),
        _feedback_format,
        key="feedback",
        values="default (the review, fenced), plain (the evaluator's text as it is)",
        parse=lambda text, _: (
            (
                DEFAULT_FEEDBACK_FORMAT
                if _choice("feedback", text, ("default", "plain")) == "default"
                else PLAIN_FEEDBACK,
            ),
            {},
        ),
    ),
    Shorthand(
        Budgets,
        ("token_budget", "time_budget", "request_budget", "cost_budget", "prices"),
        _budgets,
    ),
    Shorthand(
        Plateau,
        ("patience", "min_delta"),
        _plateau,
        key="patience",
        values="N >= 1 (scored iterations without a gain)",
        parse=lambda text, _: ((_whole("patience", text, 1),), {}),
    ),
    Shorthand(
        AnswerSelection,
        ("select",),
        _select,
        key="select",
        values="last, best",
        parse=lambda text, _: ((_choice("select", text, ("last", "best")),), {}),
    ),
    Shorthand(
        Retries,
        ("agent_retry_policy", "evaluator_retry_policy", "agent_timeout", "evaluator_timeout"),
        _retries,
    ),
    Shorthand(
        Restart,
        key="restart",
        values="on, or N (the most repairs in a row before a fresh sample)",
        parse=_parse_restart,
    ),
    Shorthand(
        DiverseFirst,
        key="first",
        values="k >= 2 (first answers)",
        parse=lambda text, _: ((_whole("first", text, 2, 64),), {}),
    ),
    Shorthand(Stagnation, key="stagnation", values="on", parse=_parse_stagnation),
    Shorthand(Adaptive, key="adaptive", values="on", parse=_parse_adaptive),
)
"""Every control that has a short name: former keywords, a key of the command and arms."""

KEYWORDS: dict[str, Shorthand] = {k: row for row in SHORTHANDS for k in row.keywords}
"""The former keyword options, each with its control's row."""

KEYWORD_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for row in SHORTHANDS
    if row.arguments is not None
    for name, parameter in inspect.signature(row.arguments).parameters.items()
}
"""Each former keyword option's default (where it leaves the loop as it is)."""

KEYS: dict[str, Shorthand] = {row.key: row for row in SHORTHANDS if row.key is not None}
"""The command's and the arms' keys, each with its control's row."""


def controls_of_keywords(options: Mapping[str, Any], *, where: str) -> list[LoopControl]:
    """The controls that former keyword options stand for, each with a `DeprecationWarning`.

    Args:
        options: The keywords given (``{"select": "best", "patience": 2}``).
        where: The callable they were given to, for messages (``"create_loop_agent"``).

    Raises:
        TypeError: a keyword that is neither a former option nor known (with the
            closest known name), or a value of the wrong type (from the control).
        ValueError: a value out of range (from the control).

    Example:
        ```python
        controls = controls_of_keywords({"select": "best"}, where="create_loop_agent")
        # [AnswerSelection('best')], and a DeprecationWarning naming it
        ```

    """
    unknown = [k for k in options if k not in KEYWORDS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*KEYWORDS, "controls"], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}{hint}")
    built: list[LoopControl] = []
    for row in SHORTHANDS:
        given = {k: options[k] for k in row.keywords if k in options}
        if not given or row.arguments is None:
            continue
        named = ", ".join(f"{k}=" for k in given)
        verb = "is" if len(given) == 1 else "are"
        arguments = row.arguments(**given)
        if arguments is None:
            message = f"{named} {verb} deprecated, and as given {verb} the default: leave it out"
        else:
            built.append(row.build(arguments))
            message = f"{named} {verb} deprecated: pass controls=[{row.shown(arguments)}]"
        warnings.warn(
            f"{where}: {message} (the former keyword options go in loop_agents 0.3)",
            DeprecationWarning,
            stacklevel=3,
        )
    return built


def control_of_key(
    key: str, value: str, *, requirements: Requirements | None = None
) -> LoopControl:
    """The control a command option or an arm key names: ``history=feedback_log``.

    Args:
        key: The key (`KEYS`).
        value: Its text.
        requirements: For ``restart`` and ``adaptive``: what one feedback says must hold
            (the eval gives its own).

    Raises:
        ValueError: an unknown key (with the closest one), or a value it does not take.

    Example:
        ```python
        control_of_key("select", "best")  # AnswerSelection('best')
        ```

    """
    row = KEYS.get(key)
    if row is None or row.parse is None:
        close = difflib.get_close_matches(key, list(KEYS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{key!r} is not a key: give one of {', '.join(KEYS)}{hint}")
    try:
        return row.build(row.parse(value, requirements))
    except (TypeError, ValueError) as exc:
        text = str(exc)
        raise ValueError(
            text if text.startswith(f"{key}=") else f"{key}={value!r}: {text}"
        ) from None


__all__ = [
    "KEYS",
    "KEYWORDS",
    "KEYWORD_DEFAULTS",
    "SHORTHANDS",
    "Shorthand",
    "control_of_key",
    "controls_of_keywords",
]
