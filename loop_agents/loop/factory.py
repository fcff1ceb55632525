"""`create_loop_agent`: the loop, with every option as shorthand for a control.

The factory checks nothing itself: each option is checked by the control it builds
(`loop_agents.loop.controls`, built by `loop_agents.loop.options.loop_controls`), and the
graph by `compile_loop` (`loop_agents.loop.graph`). A control whose option is at its
default is left out, so the loop runs no hook it does not need.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.runnables import Runnable
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from loop_agents.loop.agents import AgentLike
from loop_agents.loop.controls.agent_errors import OnAgentError
from loop_agents.loop.controls.base import LoopControl
from loop_agents.loop.controls.budgets import Prices
from loop_agents.loop.controls.selection import Selection
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat
from loop_agents.loop.graph import compile_loop
from loop_agents.loop.history.policies import HistoryPolicy
from loop_agents.loop.loop_agent import LoopAgent
from loop_agents.loop.options import CONTROL_OPTIONS, loop_controls
from loop_agents.loop.output import OutputMode
from loop_agents.loop.steps import RetryPolicies
from loop_agents.loop.storage import Storage
from loop_agents.loop.thread_locking import ConcurrentRuns


def create_loop_agent(
    agent: AgentLike,
    evaluator: Evaluator,
    max_iterations: int = 100,
    *,
    name: str = "loop_agent",
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    agent_retry_policy: RetryPolicies | None = None,
    evaluator_retry_policy: RetryPolicies | None = None,
    agent_timeout: float | timedelta | None = None,
    evaluator_timeout: float | timedelta | None = None,
    output_mode: OutputMode = "full_state",
    select: Selection = "last",
    patience: int | None = None,
    min_delta: float = 0.0,
    token_budget: int | None = None,
    time_budget: float | timedelta | None = None,
    history: HistoryPolicy = "full",
    feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT,
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
    storage: Storage = "auto",
    candidates: int = 1,
    candidate_temperature: float | Sequence[float] | None = None,
    threshold: float | None = None,
    advisor: Runnable[Any, Any] | None = None,
    show_criteria: bool = False,
    criteria: str | None = None,
    request_budget: int | None = None,
    cost_budget: float | None = None,
    prices: Prices | None = None,
    on_agent_error: OnAgentError = "raise",
    count_failed_attempts: bool = True,
    max_agent_errors: int | None = 3,
    controls: Sequence[LoopControl] = (),
    share_agent_state: bool = False,
) -> LoopAgent:
    """Build a loop agent: call ``agent``, let ``evaluator`` judge, repeat until accepted.

    The result is a `LoopAgent`: a compiled LangGraph graph (``loop.graph``) with two
    nodes, ``invoke_agent`` and ``evaluate``, whose runs check their input and hold their
    thread first. Each iteration the agent is sent the whole conversation (the request,
    its earlier answers and the feedback on them; ``history`` can send less); its
    answer is appended to ``messages`` and the evaluator is given a `LoopContext`.
    When the evaluator returns ``stop=False`` its feedback is appended as a user turn
    and the agent tries again; the loop ends when the evaluator says stop or after
    ``max_iterations`` answers.

    While it runs the loop streams the agent's tokens (``stream_mode="messages"``, each
    with ``loop_iteration`` and ``loop_role`` in its metadata; add ``subgraphs=True`` when
    the agent is a graph or the loop is nested in one) and typed loop events
    (``stream_mode="custom"``, see `loop_agents.loop.events`); every agent and evaluator call
    is a run named ``"iteration N: agent"`` / ``"iteration N: evaluator"`` in traces.

    Args:
        agent: What produces the answers. A compiled graph with a ``messages`` key
            (e.g. ``create_agent(...)``) is given ``{"messages": [...]}``; a chat model,
            any other ``Runnable`` or a plain sync or async function is given the list
            of messages and may return an ``AIMessage``, a string, or a mapping with
            ``messages``. Everything it produced is appended; its last AI message is
            the answer.
        evaluator: A sync or async function of `LoopContext` returning a
            `LoopEvaluation` (``stop``, ``feedback``, optional ``score``).
        max_iterations: The most times the agent is called in one loop (an int >= 1).
        name: The graph's name (shown in traces, in the loop events and when nested in
            a parent graph).
        checkpointer: A LangGraph checkpointer (``InMemorySaver``, ``SqliteSaver``,
            ``PostgresSaver`` or their async forms); with it a loop resumes after an
            error (``invoke(None, config)``) and a second run on the same thread starts
            a new loop on the same conversation. Resume after a hard kill of the
            process is exact when the loop is run with ``durability="sync"``.
        store: A LangGraph store, passed to the compiled graph.
        agent_retry_policy: LangGraph's ``RetryPolicy`` (or a sequence of them, the
            first whose ``retry_on`` matches applies) for the agent call: attempts,
            backoff and which errors are retried, e.g.
            ``RetryPolicy(max_attempts=5, retry_on=openai.RateLimitError)``.
        evaluator_retry_policy: The same for the evaluation.
        agent_timeout: A limit, in seconds or as a ``timedelta``, on each agent call.
            At the deadline the loop stops waiting for the call, whatever it does, and
            raises `LoopTimeoutError` (naming the node, the iteration and the limit),
            or retries by ``agent_retry_policy``; with a checkpointer the loop resumes
            from there. Under ``ainvoke``/``astream`` the call is cancelled; a call
            that ignores the cancellation, and any sync call under ``invoke``/
            ``stream`` (Python cannot stop a thread), is abandoned: left to finish on
            its own, its result dropped, a WARNING logged on the ``loop_agents`` logger.
        evaluator_timeout: The same for each evaluation.
        output_mode: What the loop returns, to its caller or to a parent graph that
            has it as a node. ``"full_state"`` (the default): every key listed under
            Returns. ``"full_history"``: ``messages`` only, the whole transcript with
            every attempt and its feedback. ``"last_message"``: ``messages`` only, and
            the loop's attempts and feedback are taken out of it when the loop ends,
            so a parent gains just the final answer. Choose one of the last two when
            a parent graph uses the loop's key names (``feedback``, ``iteration``, ...)
            for values of its own: they then come out of the loop step unchanged.
        select: Which attempt is the loop's answer. ``"last"`` (the default): the
            last one. ``"best"``: the one with the highest ``score`` (the later one on
            a tie; attempts without a score only when none has one); when it is not
            the last, a copy of it is appended to ``messages`` and becomes
            ``last_response``. Either way ``selected_iteration`` and
            ``selected_score`` say which attempt was chosen.
        patience: Stop with reason ``"plateau"`` after this many scored iterations in
            a row without improving the best score by at least ``min_delta``;
            ``None`` (the default) turns the rule off.
        min_delta: The least gain over the best score so far that counts as an
            improvement for ``patience`` (default 0: any gain).
        token_budget: Stop with reason ``"token_budget"`` once the tokens used in
            this loop, by the agent and by the evaluator (input and output, from
            ``usage_metadata``), reach this number. Checked after each evaluation.
        time_budget: Stop with reason ``"time_budget"`` once the loop has run this
            long (seconds or a ``timedelta``, wall-clock, from the loop's first
            agent call; the start is kept in the state, so a resumed loop counts
            from its original start). Checked after each evaluation.
        history: What the agent is sent on each iteration; the state keeps the whole
            conversation either way. ``"full"`` (the default): everything, every
            attempt and its feedback (append-only, so provider prompt caching keeps
            working). ``"last_attempt"``: the request, the latest attempt (with its
            tool calls and results) and its feedback. ``"feedback_log"``: the request
            and one message listing all feedback so far, no earlier attempt.
            ``compacting(model, max_tokens=N)``: everything while it fits N tokens,
            then older attempts replaced by a summary that ``model`` writes. Or a
            function of `LoopHistory` returning the messages to send (or a
            `StatefulHistory`). The request is always sent and a tool call is never
            separated from its result; see `loop_agents.loop.history.policies`.
        feedback_format: How the evaluator's feedback is put to the agent. Default: as a
            review of its previous answer, quoted in a fence the feedback cannot close,
            with a closing line saying the review cannot change its task (so an
            evaluator text "ignore previous instructions ..." is read as data). A
            template with ``{feedback}``, ``{iteration}`` and ``{fence}``, or a
            function ``(text, iteration) -> str | HumanMessage``;
            ``"{feedback}"`` sends the text as it is. ``feedback`` in the state and in
            `LoopContext` is the raw text either way; see `loop_agents.loop.feedback`.
        concurrent_runs: What a run does when another run is in progress on its
            thread (same checkpointer, ``thread_id`` and ``checkpoint_ns``; a resume is
            a run too). ``"reject"`` (the default): fail at once with
            `ThreadBusyError`, before anything is called, since two runs at once would
            save over each other's checkpoints. ``"wait"``: wait for the thread, then
            run. Enforced in-process for every checkpointer and across processes for
            SQLite on a file and PostgreSQL; see `loop_agents.loop.thread_locking`.
        busy_timeout: With ``concurrent_runs="wait"``, the longest a run waits for
            its thread (seconds or a ``timedelta``) before `ThreadBusyError`; ``None``
            (the default) waits as long as it takes.
        storage: How checkpoints store the growing keys (``messages``, ``feedback``,
            ``records``, ``agent_state``). ``"auto"`` (the default): as LangGraph delta
            channels, each checkpoint holding only its step's new items, when the
            checkpointer supports them (LangGraph's in-memory, SQLite and PostgreSQL
            savers, LangGraph Server's, or ``None``: a parent's), else as full values.
            ``"delta"`` or ``"full"`` force one. Full values make a thread's storage
            grow with the square of its iterations; see `loop_agents.loop.storage` and
            `storage_of`.
        candidates: Answers per iteration (an int, default 1). With k > 1 the agent
            is called k times at once on the same messages (``asyncio.gather`` under
            ``ainvoke``, threads under ``invoke``), each call a run of its own
            (``"iteration N: agent (candidate i)"``, ``loop_candidate`` in its
            metadata); the evaluator judges each (concurrently), the best (highest
            score; on a tie or without scores an accepted one, then the first) is the
            iteration's answer and only it goes back to the agent; every candidate is
            kept in ``record["candidates"]``. ``max_iterations=1`` makes it best-of-N.
            See `loop_agents.loop.controls.candidates`.
        candidate_temperature: With ``candidates`` > 1 and a chat-model agent: the
            temperature of every candidate (a number) or of each (k numbers).
        threshold: The score at which an evaluation that gives only a score (or a
            bare number) accepts: ``stop = score >= threshold``. With it, or with
            ``advisor``, a verdict may ask to continue without feedback.
        advisor: A chat model that writes the feedback a verdict left out: it is
            given the request, the answer and its score (a run named
            ``"iteration N: advisor"``, counted in budgets). Without one the feedback
            is a sentence naming the score and the threshold. See
            `loop_agents.loop.controls.advice`.
        show_criteria: Show the evaluator's criteria (its ``criteria`` attribute: an
            ``llm_judge``'s instructions, a rule's description, ...) to the agent
            before its first attempt, in a marked message after the request. See
            `loop_agents.loop.controls.criteria`.
        criteria: The criteria text to show instead of the evaluator's (needs
            ``show_criteria=True``).
        request_budget: Stop with reason ``"request_budget"`` once the model calls of
            this loop (agent, every candidate, evaluator, advisor, history policy)
            reach this number, or when the next iteration, making as many calls as
            the latest, would pass it. Checked after each evaluation.
        cost_budget: The same for their cost (reason ``"cost_budget"``), in the
            currency of ``prices`` (required with it). See `loop_agents.loop.controls.budgets`.
        prices: Prices per million tokens by model name,
            ``{"gpt-5.4-mini": {"input": 0.25, "output": 2.0}, "*": {...}}``; records
            then carry each iteration's ``cost``.
        on_agent_error: ``"raise"`` (the default): an error of the agent call ends
            the loop (after ``agent_retry_policy``). ``"feedback"``: an error the model
            caused (a structured output that does not validate, a tool error, a
            refusal, malformed tool calls) is recorded and sent to the agent as
            feedback for its next attempt; infrastructure errors (timeouts, 429, 5xx)
            still go to the retry policy (see `default_retry_policy`), other errors
            still end the loop. See `loop_agents.loop.controls.agent_errors`.
        count_failed_attempts: With ``on_agent_error="feedback"``: whether a failed
            attempt counts toward ``max_iterations`` (default ``True``).
        max_agent_errors: With ``on_agent_error="feedback"``: end the loop with reason
            ``"agent_errors"`` after this many failed attempts in a row (default 3;
            ``None`` for no limit, not allowed with ``count_failed_attempts=False``).
        controls: Controls of your own (`loop_agents.loop.controls.LoopControl`
            objects), run after the built-in ones the options above make, in order:
            what the agent is sent, around the agent call, after a verdict, whether to
            stop, which attempt wins. Every option above is itself shorthand for a
            control (``history=`` builds a ``History``, ``patience=`` a ``Plateau``,
            ...), which may be passed here instead.
        share_agent_state: As a node of a parent graph, the loop reads ``messages``
            and ``init_messages`` from the parent's state; a parent's ``agent_state``
            key is the parent's own, neither taken as the agent's starting state nor
            overwritten by the loop's (``False``, the default). ``True`` takes it and
            writes the selected iteration's back to it, as a standalone call's
            ``{"agent_state": ...}`` input and output do. See docs/composition.md.

    Returns:
        A `LoopAgent`: the compiled ``StateGraph`` (``loop.graph``; nest the loop,
        stream it, inspect its state as any LangGraph graph) whose runs check their
        input first (a malformed input raises `LoopInputError`, naming the field,
        before anything runs or is stored) and hold their thread (see
        ``concurrent_runs``). Its output has ``messages`` (ending with the accepted or
        selected answer), ``init_messages``, ``iteration``, ``last_response``, ``stop``,
        ``feedback``, ``stop_reason``, ``records``, ``selected_iteration``,
        ``selected_score`` and ``agent_state`` (a graph agent's state beyond messages:
        the selected iteration's); with ``output_mode="full_history"`` or
        ``"last_message"``, ``messages`` only.

    Raises:
        TypeError: ``agent`` or ``evaluator`` cannot be called with one argument (a
            class, a dict, a function of the wrong arity), ``name`` is not a non-empty
            string, ``store`` is not a store, or ``max_iterations`` or an option has
            the wrong type, or ``history`` is neither a policy name nor a sync
            function, or ``feedback_format`` is neither a string nor a sync function.
        ValueError: ``max_iterations`` is below 1, or a stop, selection or
            concurrency option is out of range, or ``history`` names no built-in
            policy, or the ``feedback_format`` template has unknown fields or no
            ``{feedback}``, or ``storage`` is not ``"auto"``, ``"delta"`` or ``"full"``,
            or a loop-control option is out of range or inconsistent
            (``cost_budget`` without ``prices``, ``show_criteria=True`` with no
            criteria to show, ``criteria`` without ``show_criteria``, an option of
            ``on_agent_error="feedback"`` without it, ...).

    Example:
        ```python
        from langchain.agents import create_agent
        from langchain_core.messages import HumanMessage
        from loop_agents import LoopContext, LoopEvaluation, create_loop_agent


        def evaluate(context: LoopContext) -> LoopEvaluation:
            text = context["last_response"].text
            if len(text) <= 280:
                return {"stop": True}
            return {"stop": False, "feedback": f"{len(text)} characters; keep it to 280."}


        loop = create_loop_agent(create_agent("openai:gpt-5.4-mini"), evaluate, 3)
        result = loop.invoke({"messages": [HumanMessage("Announce our release.")]})
        print(result["last_response"].text, result["stop_reason"])
        ```

    """
    options = {key: value for key, value in locals().items() if key in CONTROL_OPTIONS}
    return compile_loop(
        agent,
        evaluator,
        max_iterations,
        loop_controls(evaluator, **options),
        name=name,
        checkpointer=checkpointer,
        store=store,
        output_mode=output_mode,
        storage=storage,
        concurrent_runs=concurrent_runs,
        busy_timeout=busy_timeout,
        share_agent_state=share_agent_state,
    )
