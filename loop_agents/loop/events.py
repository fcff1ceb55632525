"""Loop events: what a running loop reports on LangGraph's ``custom`` stream.

A loop writes one event when an iteration starts, one when the agent has answered (one
per candidate with ``Candidates(k)``, and ``agent_failed`` instead when a model-caused
error is fed back), one when the evaluator has judged the answer (preceded by
``candidates_judged`` with ``Candidates(k)``) and one when the loop ends (and, with a
``compacting`` history, one each time older attempts are summarized). Each is a plain
``dict`` (a `TypedDict`) whose ``type`` key tells which it is, so it survives JSON (LangGraph
Server, your own UI) unchanged. Read them with ``stream_mode="custom"``:

```python
async for event in loop.astream({"messages": [request]}, stream_mode="custom"):
    if is_loop_event(event) and event["type"] == "evaluation_finished":
        print(event["iteration"], event["score"], event["feedback"])
```

The agent's tokens come on the ``messages`` stream, each with metadata that names the
iteration (``loop_iteration``), the role (``loop_role``: ``"agent"`` or ``"evaluator"``)
and the loop (``loop_name``); see `loop_agents.loop.tracing`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, TypeGuard

from loop_agents.loop.state import StopReason


class IterationStarted(TypedDict):
    """An iteration has started: the agent is about to be called.

    Attributes:
        type: Always ``"iteration_started"``.
        loop: The loop's name (``create_loop_agent(..., name=...)``).
        iteration: The iteration's number, starting at 1.
        max_iterations: The loop's cap on iterations.

    """

    type: Literal["iteration_started"]
    loop: str
    iteration: int
    max_iterations: int


class AgentFinished(TypedDict):
    """The agent has answered.

    Attributes:
        type: Always ``"agent_finished"``.
        loop: The loop's name.
        iteration: The iteration's number.
        answer: The text of the agent's answer.
        seconds: Wall-clock seconds spent in the agent call.
        input_tokens: Prompt tokens the agent reported (``usage_metadata``), 0 if none.
        output_tokens: Completion tokens the agent reported, 0 if none.

    """

    type: Literal["agent_finished"]
    loop: str
    iteration: int
    answer: str
    seconds: float
    input_tokens: int
    output_tokens: int
    candidate: NotRequired[int]


class AgentFailed(TypedDict):
    """The agent call failed with an error the model caused (with `AgentErrors`).

    The error becomes the feedback of the next attempt (see
    `loop_agents.controls.agent_errors`).

    Attributes:
        type: Always ``"agent_failed"``.
        loop: The loop's name.
        iteration: The iteration's number.
        error: The error (its type and message), or what was wrong with the answer.
        candidate: With ``Candidates(k)``: which candidate failed.

    """

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
    """With ``Candidates(k)``: every candidate of the iteration has been judged.

    Written before the iteration's `EvaluationFinished` (which reports the selected
    candidate's verdict).

    Attributes:
        type: Always ``"candidates_judged"``.
        loop: The loop's name.
        iteration: The iteration's number.
        candidates: Each candidate's verdict (failed ones with their ``error``).
        selected: The number of the candidate that became the iteration's answer.

    """

    type: Literal["candidates_judged"]
    loop: str
    iteration: int
    candidates: list[CandidateScore]
    selected: int


class EvaluationFinished(TypedDict):
    """The evaluator has judged the iteration's answer.

    Attributes:
        type: Always ``"evaluation_finished"``.
        loop: The loop's name.
        iteration: The iteration's number.
        stop: The evaluator's verdict: ``True`` accepts the answer.
        score: The evaluator's score, or ``None`` when it gave none.
        feedback: The evaluator's feedback (``""`` when it gave none).
        evaluator: The name of the loop's evaluator.
        decided_by: The names of the evaluators that decided the verdict: the
            evaluator itself, or the members a combinator (``all_of``, ``panel``) names.
        seconds: Wall-clock seconds spent in the evaluator.
        input_tokens: Prompt tokens of the chat-model calls the evaluator made (an LLM
            judge's), 0 if none.
        output_tokens: Completion tokens of those calls, 0 if none.
        requests: The model calls of the whole iteration (agent, evaluator, advisor,
            history policy; every candidate's).
        cost: What they cost by the loop's prices (`Budgets`), or ``None`` when unknown.
        error: Present when the iteration's agent call failed (no answer was judged).
        strategy: With an `loop_agents.controls.Adaptive` control: the attempt's
            kind of retry, why it was chosen, and the kind chosen next (the record's
            ``strategy``).

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
    """A ``compacting`` history summarized older attempts before the agent call.

    Written only when a summary is made (not when the previous one is reused).

    Attributes:
        type: Always ``"history_compacted"``.
        loop: The loop's name.
        iteration: The iteration about to call the agent.
        summarized: The iterations the summary now covers (1, 2, ... k).
        added: The iterations summarized by this call (those the previous summary
            did not cover).
        tokens_before: The estimated prompt tokens without compaction.
        tokens_after: The estimated prompt tokens sent.
        max_tokens: The policy's budget.
        seconds: Wall-clock seconds spent in the summary call.
        input_tokens: Prompt tokens of the summary call (``usage_metadata``), 0 if none.
        output_tokens: Completion tokens of that call, 0 if none.

    """

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
    """The loop has ended.

    Attributes:
        type: Always ``"loop_finished"``.
        loop: The loop's name.
        stop_reason: Why it ended (see `loop_agents.StopReason`).
        iterations: How many iterations ran.
        best_score: The highest score an evaluator gave in this loop, or ``None`` when
            no evaluation had a score.
        best_iteration: The iteration that got ``best_score`` (the later one on a tie),
            or ``None`` when no evaluation had a score.
        selected_iteration: The iteration whose answer is the loop's answer: the last
            one, or with ``AnswerSelection("best")`` the best-scoring one (``None`` when no
            attempt answered: every agent call failed).
        answer: The text of the loop's answer (that of ``selected_iteration``; ``""``
            when there is none).

    """

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

LOOP_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "iteration_started",
        "agent_finished",
        "agent_failed",
        "candidates_judged",
        "evaluation_finished",
        "loop_finished",
        "history_compacted",
    }
)
"""Every `LoopEventType`, for membership tests."""


def is_loop_event(value: object) -> TypeGuard[LoopEvent]:
    """Tell a loop event from anything else on the ``custom`` stream.

    Other nodes (or your own code, through ``get_stream_writer()``) may write to the same
    stream; a loop event is a mapping whose ``type`` is one of `LOOP_EVENT_TYPES` and that
    names its ``loop``.

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
