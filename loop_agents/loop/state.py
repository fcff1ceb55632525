"""The loop's state, what an evaluator sees and returns, and the per-iteration record.

The keys and reducers are the public contract, described in ``docs/concepts.md``.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, NotRequired, Required

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (JSON schemas)

from loop_agents.loop.agent_state import AgentStateChannel

StopReason = Literal[
    "accepted",
    "max_iterations",
    "plateau",
    "token_budget",
    "time_budget",
    "request_budget",
    "cost_budget",
    "agent_errors",
    "recursion_limit",
    "stagnation",
    "agent_stopped",
    "model_call_limit",
    "tool_call_limit",
]
"""Why a loop ended (``docs/concepts.md``, stop reasons); a control may give another."""


class LoopContext(TypedDict):
    """What an evaluator is given after each answer of the agent.

    Attributes:
        iteration: Answers so far in this loop (1 after the first).
        init_messages: The messages the loop started from (the request).
        last_response: The agent's latest answer.
        feedback: The feedback of earlier evaluations in this loop, oldest first.
        messages: The whole conversation so far, the latest answer included.
        agent_state: A graph agent's state keys beyond ``messages`` after this attempt
            (``files``, ``structured_response``); ``{}`` for other agents.
        candidate: Only with ``Candidates(k)`` (k > 1): which answer this is (1 to k);
            ``last_response``, ``messages`` and ``agent_state`` are then its own.
    """

    iteration: int
    init_messages: list[AnyMessage]
    last_response: AIMessage
    feedback: list[str]
    messages: list[AnyMessage]
    agent_state: NotRequired[dict[str, Any]]
    candidate: NotRequired[int]


class LoopEvaluation(TypedDict):
    """What an evaluator returns.

    Attributes:
        stop: ``True`` accepts the answer and ends the loop, ``False`` asks for another
            attempt. May be left out when a ``score`` is given and an `Advice` control
            decides by it.
        feedback: What the agent should improve (its next user turn); a non-empty
            string when ``stop`` is ``False``, unless an `Advice` control writes it.
        score: Optional; recorded, and read by selection and the plateau stop.
        decided_by: Optional: the names of the evaluators that decided (combinators
            set it; default: the evaluator's own name).
    """

    stop: bool
    feedback: NotRequired[str]
    score: NotRequired[float]
    decided_by: NotRequired[list[str]]


FeedbackSource = Literal["evaluator", "advisor", "default", "agent_error"]
"""Where an iteration's feedback came from: the evaluator, the ``advisor``, the default
sentence (score and threshold), or the agent's failure (`AgentErrors`)."""


class _AnswerRecord(TypedDict):
    """The keys of an `IterationRecord` that a `CandidateRecord` has too, for its answer."""

    answer_id: str | None
    answer: NotRequired[AIMessage]
    stop: bool
    feedback: str
    score: float | None
    agent_seconds: float
    evaluation_seconds: float
    input_tokens: int
    output_tokens: int
    evaluator_input_tokens: int
    evaluator_output_tokens: int


class CandidateRecord(_AnswerRecord):
    """One of the k answers of an iteration with ``Candidates(k)`` (k > 1).

    ``answer`` is kept for the candidates not selected (they are not in ``messages``).
    """

    candidate: int
    selected: bool
    error: str | None
    requests: int


class IterationRecord(_AnswerRecord):
    """What happened in one iteration of a loop (each key: ``docs/concepts.md``).

    ``answer_id`` names the answer in ``messages`` (`record_answer` finds it; ``None``
    when the agent call failed, see ``error``); ``*_cached_tokens`` are the prompt tokens
    read from a prompt cache (``input_token_details["cache_read"]``).
    """

    iteration: int
    evaluator: str
    decided_by: list[str]
    cached_input_tokens: NotRequired[int]
    evaluator_cached_tokens: NotRequired[int]
    history_input_tokens: NotRequired[int]
    history_output_tokens: NotRequired[int]
    history_cached_tokens: NotRequired[int]
    advisor_input_tokens: NotRequired[int]
    advisor_output_tokens: NotRequired[int]
    advisor_cached_tokens: NotRequired[int]
    requests: NotRequired[int]
    cost: NotRequired[float | None]
    feedback_from: NotRequired[FeedbackSource]
    error: NotRequired[str]
    counted: NotRequired[bool]
    candidate: NotRequired[int]
    candidates: NotRequired[list[CandidateRecord]]
    answer_digest: NotRequired[str]
    strategy: NotRequired[dict[str, Any]]


class AgentRun(TypedDict):
    """The latest agent call, kept between the two nodes and completed into a record."""

    seconds: float
    input_tokens: int
    output_tokens: int
    cached_input_tokens: NotRequired[int]
    usage: NotRequired[dict[str, Any]]  # the agent's model calls, stored
    history: NotRequired[dict[str, Any]]  # the history policy's model calls, stored
    error: NotRequired[str]  # the failure fed back (AgentErrors)
    agent_state_undo: NotRequired[dict[str, Any] | None]  # the change set back to before


class CandidateRun(TypedDict):
    """One candidate's agent call, kept between the two nodes (``Candidates(k)``)."""

    candidate: int
    produced: list[AnyMessage]
    run: AgentRun
    changes: NotRequired[dict[str, Any] | None]  # its agent state, from the one before
    state: NotRequired[dict[str, Any]]  # the same, whole, in older threads


class LoopInput(TypedDict, total=False):
    """What a loop accepts: ``messages``, the seed's ``init_messages``, ``agent_state``."""

    messages: Required[Annotated[list[AnyMessage], add_messages]]
    init_messages: list[AnyMessage]
    agent_state: Annotated[dict[str, Any], AgentStateChannel()]


class LoopOutput(TypedDict, total=False):
    """What a loop returns: the public keys of `LoopState`."""

    messages: Required[Annotated[list[AnyMessage], add_messages]]
    init_messages: list[AnyMessage]
    iteration: Annotated[int, operator.add]
    last_response: AIMessage
    stop: bool
    feedback: Annotated[list[str], operator.add]
    stop_reason: StopReason | None
    records: Annotated[list[IterationRecord], operator.add]
    selected_iteration: int | None
    selected_score: float | None
    agent_state: Annotated[dict[str, Any], AgentStateChannel()]


class LoopState(LoopOutput, total=False):
    """The loop's state; its public keys and reducers are in ``docs/concepts.md``.

    With delta storage the append-only keys are LangGraph delta channels with the same
    update rules (`loop_agents.loop.storage`). The keys below are internal.
    """

    loop_init_ids: list[str]  # the ids of init_messages as recorded (a new request or not)
    attempt_states: Annotated[list[dict[str, Any]], operator.add]  # to choose an earlier one
    agent_run: AgentRun  # the latest agent call
    candidate_runs: list[CandidateRun]  # with Candidates(k): the answers until judged
    started_at: float  # when the current loop started (seconds since the epoch)
    history_memory: dict[str, Any] | None  # what a stateful history policy keeps
    remaining_steps: RemainingSteps  # managed by LangGraph: steps left under the limit
