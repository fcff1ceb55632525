"""Controls by short name: the keys the eval's loop arms are written with."""

from __future__ import annotations

import pytest

from loop_agents.controls import (
    Adaptive,
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
from loop_agents_cli.control_options import KEYS, control_of_key


def requirements(text: str) -> list[str]:
    return [text]


def test_each_key_builds_its_control_in_the_order_the_controls_run():
    assert list(KEYS) == [
        "history",
        "candidates",
        "feedback",
        "patience",
        "select",
        "restart",
        "first",
        "stagnation",
        "adaptive",
    ]
    built = [
        control_of_key("history", "feedback_log"),
        control_of_key("candidates", "3"),
        control_of_key("feedback", "plain"),
        control_of_key("patience", "2"),
        control_of_key("select", "best"),
        control_of_key("restart", "on"),
        control_of_key("first", "2"),
        control_of_key("stagnation", "on"),
        control_of_key("adaptive", "on"),
    ]
    kinds = [History, Candidates, FeedbackStyle, Plateau, AnswerSelection, Restart]
    kinds += [DiverseFirst, Stagnation, Adaptive]
    assert [type(c) for c in built] == kinds
    history, candidates, feedback, patience, select, restart, first = built[:7]
    assert history.policy == "feedback_log"  # type: ignore[attr-defined]
    assert candidates.k == 3  # type: ignore[attr-defined]
    assert feedback.format == PLAIN_FEEDBACK  # type: ignore[attr-defined]
    assert control_of_key("feedback", "default").format == DEFAULT_FEEDBACK_FORMAT  # type: ignore[attr-defined]
    assert patience.patience == 2  # type: ignore[attr-defined]
    assert select.select == "best"  # type: ignore[attr-defined]
    assert restart.max_repairs is None  # type: ignore[attr-defined]
    assert control_of_key("restart", "0").max_repairs == 0  # type: ignore[attr-defined]
    assert first.k == 2  # type: ignore[attr-defined]


def test_restart_and_adaptive_are_told_what_must_hold():
    restart = control_of_key("restart", "2", requirements=requirements)
    adaptive = control_of_key("adaptive", "on", requirements=requirements)
    assert restart.requirements is requirements  # type: ignore[attr-defined]
    assert restart.max_repairs == 2  # type: ignore[attr-defined]
    assert adaptive.requirements is requirements  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("histroy", "full", r"^'histroy' is not a key: give one of history, .*did you mean 'history'"),
        ("history", "ful", r"^history='ful': give one of .*did you mean 'full'"),
        ("first", "100000", r"^first='100000': give a whole number from 2 to 64$"),
        ("candidates", "1", r"^candidates='1': give a whole number from 2 to 64$"),
        ("patience", "x", r"^patience='x': give a whole number >= 1$"),
        ("select", "top", r"^select='top': give one of last, best$"),
        ("feedback", "fenced", r"^feedback='fenced': give one of default, plain$"),
        ("restart", "-1", r"^restart='-1': restart \(on, or N repairs\)='-1': give a whole number >= 0$"),
        ("stagnation", "yes", r"^stagnation='yes': give stagnation=on$"),
        ("adaptive", "off", r"^adaptive='off': give adaptive=on$"),
    ],
)  # fmt: skip
def test_a_wrong_key_or_value_is_a_value_error_naming_it(key, value, match):
    with pytest.raises(ValueError, match=match):
        control_of_key(key, value)
