"""Controls that return the wrong thing fail where they return it, naming themselves.

Each broken control below is a mistake a tired user makes: ``around_agent`` written as a
plain function, a generator that forgets to return the attempt, ``after_verdict`` setting
a field to a value of the wrong type, ``choose`` returning something that is no record,
``shape_input`` returning no messages. Each is a `TypeError` or `ValueError` naming the
control, the hook, what it returned and what is expected, raised in the iteration the
hook returned it (not when the loop ends), and the thread resumes once the control is
fixed (a checkpointer keeps the iterations done before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import (
    Advice,
    AgentErrors,
    AnswerSelection,
    Candidates,
    History,
    LoopControl,
    Plateau,
)
from tests.fakes import FakeChat

REQUEST = HumanMessage("Write a haiku about rain.")


def scored(context: LoopContext) -> LoopEvaluation:
    """Never accepts; scores 10, 30, 20, ... so that best-of has something to choose."""
    score = [10.0, 30.0, 20.0][(context["iteration"] - 1) % 3]
    return {"stop": False, "feedback": f"again {context['iteration']}", "score": score}


class Named(LoopControl):
    name = "my_control"


class PlainAround(Named):
    def around_agent(self, call):  # type: ignore[override]
        return call  # a plain function: no yield


class AroundReturnsNone(Named):
    def around_agent(self, call):
        yield call  # the attempt is not returned


class AroundReturnsText(Named):
    def around_agent(self, call):
        yield call
        return "done"


class AroundYieldsText(Named):
    def around_agent(self, call):
        attempt = yield "call the agent"
        return attempt


class SetsFeedback(Named):
    def after_verdict(self, outcome):
        outcome.feedback = 12345
        return outcome


class SetsSelected(Named):
    def after_verdict(self, outcome):
        outcome.selected = 7
        return outcome


class SetsTextScore(Named):
    def after_verdict(self, outcome):
        outcome.verdict.score = "high"
        return outcome


class SetsStop(Named):
    def after_verdict(self, outcome):
        outcome.stop = "yes"
        return outcome


class ChoosesText(Named):
    def choose(self, records):
        return "x"


class ShapesNothing(Named):
    def shape_input(self, messages, turn):
        return []


class ShapesText(Named):
    def shape_input(self, messages, turn):
        return ["text"]


class Fixed(Named):
    """The same control, fixed: every hook as it should be."""

    def around_agent(self, call):
        attempt = yield call
        return attempt

    def after_verdict(self, outcome):
        return outcome

    def choose(self, records):
        return records[0]

    def shape_input(self, messages, turn):
        return messages


CASES = [
    # (control, error, the words of the message, agent calls when it is raised, and in all
    # once resumed: an error after the agent call in the same node repeats that call)
    (PlainAround, TypeError, r"around_agent returned AgentCall .* instead of a generator", 0, 3),
    (AroundReturnsNone, TypeError, r"around_agent returned NoneType None; it must return", 1, 4),
    (AroundReturnsText, TypeError, r"around_agent returned str 'done'; it must return", 1, 4),
    (AroundYieldsText, TypeError, r"around_agent yielded str 'call the agent'; it must", 0, 3),
    (SetsFeedback, TypeError, r"after_verdict set outcome.feedback to int 12345; it must", 1, 3),
    (SetsSelected, ValueError, r"after_verdict set outcome.selected to 7; it must be the", 1, 3),
    (SetsTextScore, TypeError, r"after_verdict set outcome.score to str 'high'; it must", 1, 3),
    (SetsStop, TypeError, r"after_verdict set outcome.stop to str 'yes'; it must be True", 1, 3),
    (ChoosesText, TypeError, r"choose returned str 'x'; it must return one of the records", 3, 3),
    (ShapesNothing, ValueError, r"shape_input returned an empty list; it must return", 0, 3),
    (ShapesText, TypeError, r"shape_input returned a list whose item 0 is str 'text'", 0, 3),
]


def build(control: LoopControl, agent: FakeChat, saver: Any) -> Any:
    return create_loop_agent(
        agent, scored, 3, controls=[control, AnswerSelection("best")], checkpointer=saver
    )


@pytest.mark.parametrize(
    ("control", "error", "message", "calls", "in_all"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_a_wrong_return_is_an_error_naming_the_control_and_the_thread_resumes(
    control: Callable[[], LoopControl],
    error: type[Exception],
    message: str,
    calls: int,
    in_all: int,
):
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": control.__name__}}
    agent = FakeChat.of(*(f"haiku {i}" for i in range(1, 10)))
    with pytest.raises(error, match=rf"^control 'my_control': {message}") as raised:
        build(control(), agent, saver).invoke({"messages": [REQUEST]}, config)
    assert len(agent.calls) == calls, str(raised.value)  # where it was returned
    # fixed, the loop goes on from the last step it saved
    result = build(Fixed(), agent, saver).invoke(None, config)
    assert result["stop_reason"] == "max_iterations"
    assert [r["iteration"] for r in result["records"]] == [1, 2, 3]
    assert len(agent.calls) == in_all
    assert result["selected_iteration"] == 1  # Fixed chooses the first


def test_the_string_score_is_caught_in_its_iteration_not_at_the_end():
    agent = FakeChat.of("haiku")
    loop = create_loop_agent(agent, scored, 5, controls=[SetsTextScore(), AnswerSelection("best")])
    with pytest.raises(TypeError, match="control 'my_control': after_verdict"):
        loop.invoke({"messages": [REQUEST]})
    assert len(agent.calls) == 1


def test_a_copy_of_a_record_chosen_stands_for_the_record():
    class ChoosesCopy(Named):
        def choose(self, records):
            return dict(records[1])

    result = create_loop_agent(
        FakeChat.of("a", "b", "c"), scored, 3, controls=[ChoosesCopy()]
    ).invoke({"messages": [REQUEST]})
    assert result["selected_iteration"] == 2
    assert result["last_response"].text == "b"


def test_the_loop_s_own_controls_pass_the_checks():
    result = create_loop_agent(
        FakeChat.of("a", "b", "c"),
        scored,
        3,
        controls=[
            History("last_attempt"),
            Candidates(2),
            AgentErrors("feedback"),
            Advice(50),
            Plateau(5),
            AnswerSelection("best"),
        ],
        checkpointer=InMemorySaver(),
    ).invoke({"messages": [REQUEST]}, {"configurable": {"thread_id": "own"}})
    assert result["stop_reason"] == "max_iterations"
    assert result["selected_score"] == 30.0
