"""Loop events: what a running loop reports on LangGraph's ``custom`` stream.

Each event is a plain ``dict`` (a `TypedDict`) whose ``type`` tells which it is; each
field is described in ``docs/streaming.md``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, TypeGuard, get_args

from loop_agents.loop.state import StopReason


class IterationStarted(TypedDict):
    """An iteration has started: the agent is about to be called."""

    type: Literal["iteration_started"]
    loop: str
    iteration: int
    max_iterations: int


class AgentFinished(TypedDict):
    """The agent has answered (one event per candidate with ``Candidates(k)``)."""

    type: Literal["agent_finished"]
    loop: str
    iteration: int
    answer: str
    seconds: float
    input_tokens: int
    output_tokens: int
    candidate: NotRequired[int]


class AgentFailed(TypedDict):
    """The agent call failed with an error the model caused, fed back (`AgentErrors`)."""

    type: Literal["agent_failed"]
    loop: str
    iteration: int
    error: str
    candidate: NotRequired[int]


class CandidateScore(TypedDict):
    """One candidate's verdict in a `CandidatesJudged` event."""

    candidate: int
    stop: bool
    score: float | None
    error: str | None


class CandidatesJudged(TypedDict):
    """With ``Candidates(k)``: every candidate has been judged (before the evaluation's)."""

    type: Literal["candidates_judged"]
    loop: str
    iteration: int
    candidates: list[CandidateScore]
    selected: int


class EvaluationFinished(TypedDict):
    """The evaluator has judged the iteration's answer.

    ``requests`` and ``cost`` are the whole iteration's calls; ``error`` says the agent
    call failed.
    """

    type: Literal["evaluation_finished"]
    loop: str
    iteration: int
    stop: bool
    score: float | None
    feedback: str
    evaluator: str
    decided_by: list[str]
    seconds: float
    input_tokens: int
    output_tokens: int
    requests: NotRequired[int]
    cost: NotRequired[float | None]
    error: NotRequired[str]
    strategy: NotRequired[dict[str, Any]]


class HistoryCompacted(TypedDict):
    """A ``compacting`` history made a summary of older attempts before the agent call."""

    type: Literal["history_compacted"]
    loop: str
    iteration: int
    summarized: list[int]
    added: list[int]
    tokens_before: int
    tokens_after: int
    max_tokens: int
    seconds: float
    input_tokens: int
    output_tokens: int


class LoopFinished(TypedDict):
    """The loop has ended (``best_iteration``: the later one on a tie)."""

    type: Literal["loop_finished"]
    loop: str
    stop_reason: StopReason
    iterations: int
    best_score: float | None
    best_iteration: int | None
    selected_iteration: int | None
    answer: str


LoopEvent: TypeAlias = (
    IterationStarted
    | AgentFinished
    | AgentFailed
    | CandidatesJudged
    | EvaluationFinished
    | LoopFinished
    | HistoryCompacted
)
"""Any event a loop writes on the ``custom`` stream; tell them apart by ``type``."""

LoopEventType: TypeAlias = Literal[
    "iteration_started",
    "agent_finished",
    "agent_failed",
    "candidates_judged",
    "evaluation_finished",
    "loop_finished",
    "history_compacted",
]
"""The values of a `LoopEvent`'s ``type`` key."""

LOOP_EVENT_TYPES: frozenset[str] = frozenset(get_args(LoopEventType))
"""Every `LoopEventType`, for membership tests."""


def is_loop_event(value: object) -> TypeGuard[LoopEvent]:
    """Tell a loop event (a mapping with a known ``type`` and a ``loop``) from other writes.

    Example:
        ```python
        async for chunk in loop.astream(inputs, stream_mode="custom"):
            if is_loop_event(chunk) and chunk["type"] == "loop_finished":
                print(chunk["stop_reason"], chunk["best_score"])
        ```
    """
    return (
        isinstance(value, dict)
        and value.get("type") in LOOP_EVENT_TYPES
        and isinstance(value.get("loop"), str)
    )
