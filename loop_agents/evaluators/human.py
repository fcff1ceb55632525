"""A person as the loop's judge: `human_review` pauses the loop until someone answers.

It calls LangGraph's ``interrupt()`` with a `ReviewRequest`; ``Command(resume=...)`` brings
the answer (`parse_review`). The request and the accepted answers: docs/durability.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.errors import is_invalid_resume
from langgraph.types import interrupt
from pydantic import PlainValidator, ValidationError, WithJsonSchema

from loop_agents.evaluators.base import check_name, step, stepped_evaluator
from loop_agents.loop.agents import describe
from loop_agents.loop.checkpoints import checkpointed, in_graph_run
from loop_agents.loop.evaluation import Evaluator, criteria_of
from loop_agents.loop.input_checks import HOW_TO_ANSWER
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.steps import Program

REVIEW_KIND: Literal["loop_agents.human_review"] = "loop_agents.human_review"


class ReviewRequest(TypedDict):
    """What the reviewer is shown: the value of the loop's interrupt.

    The request's and the answer's texts, the answer's iteration, earlier feedback, the
    verdict of the judge that ran first (or ``None``) and how to answer.
    """

    kind: Literal["loop_agents.human_review"]
    request: str
    answer: str
    iteration: int
    feedback: list[str]
    judge: LoopEvaluation | None
    instructions: str


class ReviewDecision(TypedDict, total=False):
    """A reviewer's answer as a mapping.

    ``approve`` (else another attempt, which needs ``feedback``), ``feedback`` (with an
    approval, a note only recorded), ``score``.
    """

    approve: bool
    feedback: str
    score: float


class InvalidReviewError(ValueError):
    """A reviewer's answer is not one of the accepted shapes; the loop stays paused."""


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r:.80}"


def parse_review(value: object) -> LoopEvaluation:
    """The `LoopEvaluation` a reviewer's answer stands for.

    ``True``, a feedback text or a `ReviewDecision`; anything else raises
    `InvalidReviewError` saying what is accepted.

    Example:
        ```python
        assert parse_review(True) == {"stop": True}
        assert parse_review("Shorter.") == {"stop": False, "feedback": "Shorter."}
        assert parse_review({"approve": True, "score": 90}) == {"stop": True, "score": 90.0}
        ```
    """
    if value is True:
        return {"stop": True}
    if isinstance(value, str):
        if not value.strip():
            raise InvalidReviewError(
                f"the review answer is an empty string; give the feedback for the next "
                f"attempt, or True to accept. {HOW_TO_ANSWER}"
            )
        return {"stop": False, "feedback": value}
    if not isinstance(value, Mapping):
        hint = " (False alone says nothing to improve: send the feedback text)" * (value is False)
        raise InvalidReviewError(
            f"the review answer is {_describe(value)}{hint}; expected True, a feedback "
            f"string or a mapping. {HOW_TO_ANSWER}"
        )
    return _parse_mapping(value)


def _parse_mapping(value: Mapping[Any, Any]) -> LoopEvaluation:
    unknown = sorted(map(str, set(value) - {"approve", "feedback", "score"}))
    if unknown:
        raise InvalidReviewError(
            f"the review answer has unknown keys {unknown}; a mapping may have 'approve', "
            f"'feedback' and 'score'. {HOW_TO_ANSWER}"
        )
    approve = value.get("approve", False)
    feedback, score = value.get("feedback"), value.get("score")
    number = None if score is None else finite_float(score)
    for key, given, fits, must in (
        ("approve", approve, isinstance(approve, bool), "True or False"),
        ("feedback", feedback, feedback is None or isinstance(feedback, str), "a string"),
        ("score", score, score is None or number is not None, "a finite number"),
    ):
        if not fits:
            huge_int = key == "score" and isinstance(given, int) and not isinstance(given, bool)
            shown = describe_number(given) if huge_int else _describe(given)
            raise InvalidReviewError(f"the review answer's {key!r} is {shown}; it must be {must}")
    if not approve and not (feedback and feedback.strip()):
        raise InvalidReviewError(
            f"the review answer {dict(value)!r:.120} neither approves nor gives feedback; "
            f"send {{'approve': True}} or {{'feedback': 'what to improve'}}"
        )
    evaluation: LoopEvaluation = {"stop": approve}
    if feedback:
        evaluation["feedback"] = feedback
    if number is not None:
        evaluation["score"] = number
    return evaluation


RESPONSE_SCHEMA: dict[str, Any] = {
    "title": "Review",
    "description": HOW_TO_ANSWER,
    "anyOf": [
        {"const": True, "title": "Approve"},
        {"type": "string", "minLength": 1, "title": "Feedback for another attempt"},
        {
            "type": "object",
            "title": "Decision",
            "properties": {
                "approve": {"type": "boolean"},
                "feedback": {"type": "string"},
                "score": {"type": "number"},
            },
            "additionalProperties": False,
        },
    ],
}
# The interrupt's response_schema: LangGraph validates the answer with parse_review before
# it is saved, so a malformed answer leaves the interrupt unanswered.
ReviewAnswer = Annotated[Any, PlainValidator(parse_review), WithJsonSchema(RESPONSE_SCHEMA)]


def review_request(context: LoopContext, judge: LoopEvaluation | None) -> ReviewRequest:
    """What the reviewer is shown for ``context``."""
    return {
        "kind": REVIEW_KIND,
        "request": "\n\n".join(m.text for m in context["init_messages"]),
        "answer": context["last_response"].text,
        "iteration": context["iteration"],
        "feedback": list(context["feedback"]),
        "judge": judge,
        "instructions": HOW_TO_ANSWER,
    }


def _check_can_pause(name: str) -> None:
    if not in_graph_run():
        raise RuntimeError(
            f"{name} pauses a running loop with interrupt(); call it only as the loop's "
            f"evaluator (create_loop_agent(agent, {name}, ...)), not directly"
        )
    if get_config()["configurable"].get(CONFIG_KEY_CHECKPOINTER) is None:
        raise ValueError(
            f"{name} needs a checkpointer to pause the loop until the review arrives: "
            f"create_loop_agent(..., checkpointer=InMemorySaver()) (or SqliteSaver, "
            f"PostgresSaver) and run it with a thread_id in the config"
        )


def _ask(context: LoopContext, judge: LoopEvaluation | None, name: str) -> LoopEvaluation:
    try:
        decision: LoopEvaluation = interrupt(
            review_request(context, judge), response_schema=ReviewAnswer
        )
    except ValidationError as exc:
        if not is_invalid_resume(exc):
            raise
        reason = next(
            (str(e["ctx"]["error"]) for e in exc.errors() if "error" in e.get("ctx", {})),
            str(exc),
        )
        raise InvalidReviewError(
            f"{name} at iteration {context['iteration']}: {reason.rstrip('.')}. The loop is still "
            f"paused; resume it again with a valid answer."
        ) from exc
    if "score" not in decision and judge is not None and "score" in judge:
        decision["score"] = judge["score"]
    decision["decided_by"] = [name]
    return decision


def human_review(
    judge: Evaluator | None = None, *, name: str = "human_review"
) -> Runnable[Any, Any]:
    """An evaluator that asks a person: the loop pauses until they approve or give feedback.

    Resume with ``Command(resume=answer)``: ``True`` accepts, a feedback text asks for
    another attempt; a malformed answer raises `InvalidReviewError` and the loop stays
    paused. The loop needs a checkpointer. A ``judge`` evaluates first (as a LangGraph
    task, so it is not called again on resume); the person is asked only when it accepts.

    Example:
        ```python
        loop = create_loop_agent(agent, human_review(), 5, checkpointer=InMemorySaver())
        paused = loop.invoke({"messages": [HumanMessage("Draft the note.")]}, config)
        loop.invoke(Command(resume="Mention the new CLI."), config)  # another attempt
        ```
    """
    label = check_name(name, "human_review")
    first = checkpointed(judge, name=f"{label}.judge") if judge is not None else None

    def review(context: LoopContext, config: RunnableConfig) -> Program[LoopEvaluation]:
        _check_can_pause(label)
        verdict: LoopEvaluation | None = None
        if first is not None:
            verdict = (yield step(label, first.invoke, first.ainvoke, context, config)).value
        if verdict is not None and not verdict["stop"]:  # the judge asked for changes
            return {**verdict, "decided_by": verdict.get("decided_by") or [describe(judge)]}
        return _ask(context, verdict, label)

    criteria = criteria_of(judge) if judge is not None else None
    return stepped_evaluator(label, review, criteria=criteria)
