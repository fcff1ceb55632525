"""The loop's state, what an evaluator sees and returns, and the per-iteration record."""

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
"""Why a loop ended.

- ``accepted``: the evaluator said stop.
- ``max_iterations``: the agent was called ``max_iterations`` times without acceptance.
- ``plateau``: the score stopped improving (``patience`` iterations without a gain of
  at least ``min_delta``).
- ``token_budget``: the tokens used by the agent and the evaluator reached
  ``token_budget``.
- ``time_budget``: the loop's wall-clock time reached ``time_budget`` seconds.
- ``request_budget``: the model calls (agent, evaluator, advisor, history policy)
  reached ``request_budget``, or the next iteration would pass it.
- ``cost_budget``: what the model calls cost (by ``prices``) reached ``cost_budget``,
  or the next iteration would pass it.
- ``agent_errors``: with `AgentErrors`, the agent failed
  ``max_agent_errors`` times in a row.
- ``stagnation``: with a `loop_agents.controls.Stagnation` control, the latest
  answer repeated an earlier one.
- ``recursion_limit``: the graph's step budget (a parent graph's ``recursion_limit``)
  had no room for another iteration, so the loop ended cleanly instead of raising.
- ``model_call_limit``, ``tool_call_limit``: with `LoopMiddleware`, LangChain's
  ``ModelCallLimitMiddleware`` or ``ToolCallLimitMiddleware`` (``exit_behavior="end"``)
  ended an attempt before the model answered; its note is not judged, and the answer is
  chosen among the answered attempts.
- ``agent_stopped``: with `LoopMiddleware`, another middleware ended an attempt before
  the model answered (without calling the model, or with a message of its own).

A stop rule of your own (a `loop_agents.controls.LoopControl`) may give any other
short string.
"""


class LoopContext(TypedDict):
    """What an evaluator is given after each answer of the agent.

    Attributes:
        iteration: How many times the agent has answered in this loop (1 after the
            first answer).
        init_messages: The messages the loop started from (the request).
        last_response: The agent's latest answer.
        feedback: The feedback of earlier evaluations in this loop, oldest first.
        messages: The whole conversation so far, the latest answer included.
        agent_state: A graph agent's state keys beyond ``messages`` after this
            attempt (a deep agent's ``files`` and ``todos``, ``create_agent``'s
            ``structured_response``); ``{}`` for agents that are not graphs.
        candidate: Only with ``Candidates(k)`` (k > 1): which of the iteration's k
            answers this is (1 to k). Each candidate is judged on its own:
            ``last_response`` is that candidate's answer, ``messages`` end with it and
            ``agent_state`` is its own.

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
        stop: ``True`` to accept the answer and end the loop, ``False`` to ask for
            another attempt. May be left out when the loop has ``Advice(threshold)`` and
            a ``score`` is given: the answer is accepted when ``score >= threshold``.
        feedback: What the agent should improve, sent to the agent as the next user
            turn. Required (a non-empty string) when ``stop`` is ``False``, unless the
            loop has an `Advice` control, which writes it: its advisor
            (``Advice(model=...)``), or a default sentence naming the score and the
            threshold.
        score: An optional number describing the answer's quality; it is recorded
            per iteration and used by best-of selection and the plateau stop.
        decided_by: Optional: the names of the evaluators that decided the verdict;
            combinators such as ``all_of`` and ``panel`` set it. Recorded per
            iteration (default: the evaluator's own name).

    """

    stop: bool
    feedback: NotRequired[str]
    score: NotRequired[float]
    decided_by: NotRequired[list[str]]


FeedbackSource = Literal["evaluator", "advisor", "default", "agent_error"]
"""Where an iteration's feedback came from: the evaluator, the ``advisor``, the default
sentence (score and threshold), or the agent's failure (`AgentErrors`)."""


class CandidateRecord(TypedDict):
    """One of the k answers of an iteration with ``Candidates(k)`` (k > 1).

    Attributes:
        candidate: Its number, 1 to k.
        answer_id: The id of its answer (``None`` when the call failed).
        answer: Its answer, for the candidates that were not selected (they are not
            in ``messages``); the selected one's is in ``messages`` (`record_answer`).
        selected: Whether it became the iteration's answer.
        stop: The evaluator's verdict on it (``False`` when the call failed).
        feedback: The evaluator's feedback on it ("" when none).
        score: Its score, or ``None``.
        error: The error of a failed call (`AgentErrors`), else ``None``.
        agent_seconds: Wall-clock seconds of its agent call.
        evaluation_seconds: Wall-clock seconds of its evaluation.
        input_tokens: Prompt tokens of its answer (``usage_metadata``).
        output_tokens: Completion tokens of its answer.
        evaluator_input_tokens: Prompt tokens of its evaluation's model calls.
        evaluator_output_tokens: Completion tokens of those calls.
        requests: Model calls of its agent call and its evaluation.

    """

    candidate: int
    answer_id: str | None
    answer: NotRequired[AIMessage]
    selected: bool
    stop: bool
    feedback: str
    score: float | None
    error: str | None
    agent_seconds: float
    evaluation_seconds: float
    input_tokens: int
    output_tokens: int
    evaluator_input_tokens: int
    evaluator_output_tokens: int
    requests: int


class IterationRecord(TypedDict):
    """What happened in one iteration of a loop.

    Attributes:
        iteration: The iteration number, starting at 1.
        answer_id: The id of the agent's answer in this iteration: the message in the
            loop's ``messages``. `record_answer` returns it. ``None`` when the agent
            call failed (`AgentErrors`; see ``error``).
        answer: Only with ``output_mode="last_message"`` (which takes the attempts out
            of ``messages`` when the loop ends): the answer itself.
        stop: The evaluator's verdict.
        feedback: The evaluator's feedback ("" when it gave none).
        score: The evaluator's score, or ``None`` when it gave none.
        evaluator: The name of the evaluator given to the loop.
        decided_by: The names of the evaluators that decided the verdict: the
            evaluator itself, or the members a combinator (``all_of``, ``panel``)
            names.
        agent_seconds: Wall-clock seconds spent in the agent call.
        evaluation_seconds: Wall-clock seconds spent in the evaluator.
        input_tokens: Prompt tokens the agent reported (``usage_metadata``), 0 if none.
        output_tokens: Completion tokens the agent reported, 0 if none.
        cached_input_tokens: Of the agent's prompt tokens, those the server read from
            its prompt cache (``input_token_details["cache_read"]``), 0 if none.
        evaluator_input_tokens: Prompt tokens of the chat-model calls made while the
            evaluator ran (an LLM judge's calls), 0 if none.
        evaluator_output_tokens: Completion tokens of those calls, 0 if none.
        evaluator_cached_tokens: Of the evaluator's prompt tokens, those read from a
            prompt cache.
        history_cached_tokens: The same for the history policy's calls.
        advisor_cached_tokens: The same for the advisor's call.
        history_input_tokens: Prompt tokens of the model calls the history policy made
            before the agent call (a ``compacting`` policy's summaries), 0 if none.
        history_output_tokens: Completion tokens of those calls, 0 if none.
        advisor_input_tokens: Prompt tokens of the advisor's call (`Advice`), when
            it was called.
        advisor_output_tokens: Completion tokens of that call.
        requests: The model calls of this iteration: the agent's (every candidate's),
            the evaluator's, the advisor's and the history policy's.
        cost: What those calls cost by ``Budgets(prices=...)`` (in its currency);
            ``None`` when the loop has no prices or a call's model is not in them.
        feedback_from: Where ``feedback`` came from (see `FeedbackSource`).
        error: With `AgentErrors`: the error of the agent's failed
            call (the iteration has no answer); absent otherwise.
        counted: ``False`` for a failed attempt that does not count toward
            ``max_iterations`` (``AgentErrors(count_failed_attempts=False)``).
        candidate: With ``Candidates(k)``: the number of the selected candidate.
        candidates: With ``Candidates(k)``: every candidate's record, selected or not.
        strategy: With an `loop_agents.controls.Adaptive` control: the attempt's
            kind of retry (``"repair"``, ``"fresh"``, ...), the estimates when it was
            chosen, whether it succeeded, and the kind chosen next.

    """

    iteration: int
    answer_id: str | None
    answer: NotRequired[AIMessage]
    stop: bool
    feedback: str
    score: float | None
    evaluator: str
    decided_by: list[str]
    agent_seconds: float
    evaluation_seconds: float
    input_tokens: int
    output_tokens: int
    evaluator_input_tokens: int
    evaluator_output_tokens: int
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
    """The latest agent call, kept between the two nodes and completed into a record.

    ``usage`` and ``history`` are the stored forms of the model calls of the agent and of
    the history policy (tokens, requests, tokens by model name for pricing, calls that
    reported no usage); ``error`` is set when the call failed and the failure is fed back
    (`AgentErrors`); ``agent_state_undo``, when an answer other than the
    last may be chosen, is the change set from the agent state after the call back to the
    one before it (see `loop_agents.loop.agent_state`).
    """

    seconds: float
    input_tokens: int
    output_tokens: int
    cached_input_tokens: NotRequired[int]
    usage: NotRequired[dict[str, Any]]
    history: NotRequired[dict[str, Any]]
    error: NotRequired[str]
    agent_state_undo: NotRequired[dict[str, Any] | None]


class CandidateRun(TypedDict):
    """One candidate's agent call, kept between the two nodes (``Candidates(k)``).

    ``changes`` is its agent state as a change set from the state before the iteration
    (threads written before change sets hold it whole, in ``state``).
    """

    candidate: int
    produced: list[AnyMessage]
    run: AgentRun
    changes: NotRequired[dict[str, Any] | None]
    state: NotRequired[dict[str, Any]]


class LoopInput(TypedDict, total=False):
    """What a loop accepts: ``messages``, the seed's ``init_messages``, ``agent_state``.

    ``init_messages`` is optional; so is ``agent_state``, a graph agent's starting state
    (e.g. ``{"files": {...}}`` for a deep agent).
    """

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
    """The loop's state; the reducers are part of the public contract.

    With delta storage (``create_loop_agent``'s default where the checkpointer supports
    it) ``messages``, ``feedback``, ``records`` and ``agent_state`` are LangGraph delta
    channels that update by the same rules; see `loop_agents.loop.storage`.

    Attributes:
        messages: The whole conversation: input, answers, tool traffic and feedback
            (reducer ``add_messages``).
        init_messages: The messages the current loop started from.
        iteration: Agent calls made in the current loop (reducer ``operator.add``).
        last_response: The agent's latest answer; once the loop ends, the selected
            answer (with ``AnswerSelection("best")`` a copy of the best-scoring one, also
            appended to ``messages``).
        stop: The evaluator's latest verdict.
        feedback: Every evaluation's feedback in the current loop, oldest first
            (reducer ``operator.add``).
        stop_reason: Why the loop ended; ``None`` while it runs.
        records: One `IterationRecord` per iteration (reducer ``operator.add``).
        selected_iteration: The iteration whose answer is the loop's answer (the last
            one, or with ``AnswerSelection("best")`` the best-scoring one); ``None`` while the
            loop runs.
        selected_score: That iteration's score (``None`` if it had none).
        agent_state: A graph agent's state keys beyond ``messages`` (a deep agent's
            ``files`` and ``todos``, ``create_agent``'s ``structured_response``): while the
            loop runs, its latest attempt's; once it ends, the selected iteration's. Given
            back to the agent on its next attempt (the keys it takes as input) and shown
            to the evaluator (``context["agent_state"]``). See `loop_agents.loop.agent_state`.
        loop_init_ids: Internal: the ids of ``init_messages`` as the loop recorded
            them, used to tell a new request from a resumed one. Not in the output.
        agent_run: Internal: measurements of the latest agent call. Not in the output.
        candidate_runs: Internal, with ``Candidates(k)``: the k answers of the current
            iteration between the agent call and their evaluation (emptied once they
            are judged; only the selected one enters ``messages``). Not in the output.
        started_at: Internal: when the current loop started (seconds since the epoch),
            for the time budget; kept in the state so that it survives a resume.
        history_memory: Internal: what a stateful history policy (``compacting``) keeps
            between iterations, e.g. its running summary; saved with the state so that
            a resumed loop does not redo it. Not in the output.
        attempt_states: Internal: each iteration's agent state, kept when an answer other
            than the last may be chosen (``AnswerSelection("best")``). Not in the output.
        remaining_steps: Managed by LangGraph: steps left under the recursion limit.

    """

    loop_init_ids: list[str]
    attempt_states: Annotated[list[dict[str, Any]], operator.add]
    agent_run: AgentRun
    candidate_runs: list[CandidateRun]
    started_at: float
    history_memory: dict[str, Any] | None
    remaining_steps: RemainingSteps
