"""What each hook of a control must give back, checked where it gives it.

A wrong value fails the node before it writes anything, with an error that names the
control, the hook, what it returned and what is expected.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import AnyMessage, BaseMessage

from loop_agents.loop.agents import _shape
from loop_agents.loop.protocol import AgentCall, Attempt, LoopControl, Outcome
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.numbers import finite_float

AROUND_AGENT_FORM = "def around_agent(self, call): attempt = yield call; return attempt"


def _where(control: LoopControl, hook: str) -> str:
    return f"control {control.describe()!r}: {hook}"


def checked_messages(control: LoopControl, shaped: object) -> list[AnyMessage]:
    """What ``shape_input`` returned, as the messages the agent is sent (a non-empty list)."""
    expected = (
        "it must return the non-empty list of messages the agent is sent (HumanMessage, "
        "AIMessage, SystemMessage, ...: the messages it was given, changed or not)"
    )
    if isinstance(shaped, str | bytes | Mapping) or not isinstance(shaped, Sequence):
        raise TypeError(f"{_where(control, 'shape_input')} returned {_shape(shaped)}; {expected}")
    messages = list(shaped)
    if not messages:
        raise ValueError(f"{_where(control, 'shape_input')} returned an empty list; {expected}")
    for index, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise TypeError(
                f"{_where(control, 'shape_input')} returned a list whose item {index} is "
                f"{_shape(message)}, not a message; {expected}"
            )
    return cast(list[AnyMessage], messages)


def checked_around(control: LoopControl, hook: object) -> Generator[Any, Any, Any]:
    """What calling ``around_agent`` gave: a generator, else `TypeError`."""
    if not isinstance(hook, Generator):
        raise TypeError(
            f"{_where(control, 'around_agent')} returned {_shape(hook)} instead of a "
            f"generator; write it as a generator that yields the call and returns the "
            f"attempt: {AROUND_AGENT_FORM}"
        )
    return hook


def checked_calls(control: LoopControl, yielded: object) -> AgentCall | list[AgentCall]:
    """What ``around_agent`` yielded: an `AgentCall`, or a non-empty list of them."""
    if isinstance(yielded, AgentCall):
        return yielded
    expected = (
        "it must yield the AgentCall it was given (changed or not, e.g. "
        "call.but(timeout=60)) or a non-empty list of them (several calls at once)"
    )
    if isinstance(yielded, list):
        if not yielded:
            raise ValueError(f"{_where(control, 'around_agent')} yielded an empty list; {expected}")
        if all(isinstance(c, AgentCall) for c in yielded):
            return cast(list[AgentCall], yielded)
    raise TypeError(f"{_where(control, 'around_agent')} yielded {_shape(yielded)}; {expected}")


def checked_attempts(control: LoopControl, returned: object) -> Attempt | list[Attempt]:
    """What ``around_agent`` returned: an `Attempt`, or a list of them, else `TypeError`."""
    if isinstance(returned, Attempt):
        return returned
    if isinstance(returned, list) and returned and all(isinstance(a, Attempt) for a in returned):
        return cast(list[Attempt], returned)
    raise TypeError(
        f"{_where(control, 'around_agent')} returned {_shape(returned)}; it must return "
        f"the Attempt it received (or one of its own, or the list of Attempts a list of "
        f"calls gave): {AROUND_AGENT_FORM}"
    )


def checked_outcome(control: LoopControl, outcome: object) -> Outcome:
    """What ``after_verdict`` returned: the `Outcome`, its fields of the right types and range."""
    where = _where(control, "after_verdict")
    if not isinstance(outcome, Outcome):
        raise TypeError(
            f"{where} returned {_shape(outcome)}; it must return the Outcome it was given "
            f"(changed or not)"
        )
    selected = outcome.selected
    if selected is not None:
        if isinstance(selected, bool) or not isinstance(selected, int):
            raise TypeError(
                f"{where} set outcome.selected to {_shape(selected)}; it must be the index "
                f"in outcome.judged of the attempt that is the iteration's answer, or None"
            )
        count = len(outcome.judged)
        if not 0 <= selected < count or outcome.judged[selected].verdict is None:
            judged = [i for i, j in enumerate(outcome.judged) if j.verdict is not None]
            raise ValueError(
                f"{where} set outcome.selected to {selected}; it must be the index of a "
                f"judged attempt in outcome.judged ({count} attempt(s); judged: {judged}), "
                f"or None"
            )
    for index, judged_attempt in enumerate(outcome.judged):
        verdict = judged_attempt.verdict
        if verdict is None:
            continue
        name = "outcome" if index == selected else f"outcome.judged[{index}].verdict"
        if verdict.stop is not None and not isinstance(verdict.stop, bool):
            raise TypeError(
                f"{where} set {name}.stop to {_shape(verdict.stop)}; it must be True "
                f"(accept), False (another attempt) or None (undecided)"
            )
        if verdict.feedback is not None and not isinstance(verdict.feedback, str):
            raise TypeError(
                f"{where} set {name}.feedback to {_shape(verdict.feedback)}; it must be a "
                f"text (what the agent should improve) or None"
            )
        if verdict.score is not None and finite_float(verdict.score) is None:
            error = TypeError if not isinstance(verdict.score, int | float) else ValueError
            raise error(
                f"{where} set {name}.score to {_shape(verdict.score)}; it must be a finite "
                f"number (int or float, not a text or a bool) or None"
            )
    for field, value in (
        ("failure_feedback", outcome.failure_feedback),
        ("error", outcome.error),
    ):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where} set outcome.{field} to {_shape(value)}; it must be a text")
    if not isinstance(outcome.counted, bool):
        raise TypeError(f"{where} set outcome.counted to {_shape(outcome.counted)}; use a bool")
    if outcome.message is not None and not isinstance(outcome.message, BaseMessage):
        raise TypeError(
            f"{where} set outcome.message to {_shape(outcome.message)}; it must be the "
            f"message the agent reads next (a HumanMessage) or None"
        )
    return outcome


def checked_choice(
    control: LoopControl, picked: object, records: Sequence[IterationRecord]
) -> IterationRecord | None:
    """What ``choose`` returned: one of ``records`` (or a copy of one), or ``None``."""
    if picked is None:
        return None
    # a copy is taken for its record (records differ at least by their iteration)
    found = next((r for r in records if r is picked or r == picked), None)
    if found is not None and isinstance(picked, Mapping):
        return found
    iterations = [r.get("iteration") for r in records]
    raise TypeError(
        f"{_where(control, 'choose')} returned {_shape(picked)}; it must return one of the "
        f"records it was given (the record of the winning iteration; iterations "
        f"{iterations}) or None to keep the choice made so far"
    )
