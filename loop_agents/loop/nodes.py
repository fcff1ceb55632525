"""The loop's two nodes, ``invoke_agent`` and ``evaluate``, each written once.

Each node is a program (`loop_agents.loop.steps`): it yields the calls it makes and
receives their results, and the same program runs under ``invoke`` and ``ainvoke``.
A node runs its controls' hooks at their points (`loop_agents.loop.controls.base`):

- ``invoke_agent``: open the iteration (`loop_agents.loop.turns`); each control shapes
  what the agent is sent (``shape_input``: criteria, history); the agent is called
  through the controls around it (``around_agent``: errors as feedback, candidates);
  its answer, its messages and its state beyond messages are kept.
- ``evaluate``: the evaluator judges each answer (each candidate's in a LangGraph task
  of its own); each control works on the verdicts (``after_verdict``: a threshold,
  the best candidate, an advisor's feedback, the feedback's format); the record is
  written; the stop rules decide (``stop_reason``); at the end, the choosers pick the
  answer (``choose``).

A node that makes more than one paid call runs each as a LangGraph task, so a failure
never repeats a call that already finished (see `stepped`).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Generator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple, cast

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command

from loop_agents.loop._function_runnable import FunctionRunnable
from loop_agents.loop._reporting import LoopReporter
from loop_agents.loop.agent_state import (
    carried,
    changes,
    no_change,
    restored,
    selected_state,
)
from loop_agents.loop.agents import AgentCaller, AgentInput, AgentLike, answer_of, with_fresh_ids
from loop_agents.loop.controls.base import (
    NO_USAGE,
    AgentCall,
    Attempt,
    LoopControl,
    Outcome,
    Progress,
    Turn,
    overrides,
)
from loop_agents.loop.controls.budgets import PriceTable
from loop_agents.loop.controls.candidates import candidate_context
from loop_agents.loop.controls.hook_results import (
    checked_around,
    checked_attempts,
    checked_calls,
    checked_choice,
    checked_messages,
    checked_outcome,
)
from loop_agents.loop.controls.retries import NodeName, Retries, TimeLimit
from loop_agents.loop.controls.selection import answer_copy, choose
from loop_agents.loop.evaluation import Evaluator, EvaluatorCaller, InvalidEvaluationError
from loop_agents.loop.feedback import feedback_message
from loop_agents.loop.outcomes import (
    EMPTY_RUN,
    attempts_of,
    check_decided,
    judged_of,
    record_of,
    run_of,
    verdict_of,
)
from loop_agents.loop.output import OutputMode, keep_final_answer
from loop_agents.loop.state import (
    AgentRun,
    CandidateRun,
    IterationRecord,
    LoopContext,
    LoopState,
    StopReason,
)
from loop_agents.loop.steps import Call, Fanout, Measured, Program, RetryPolicies, arun, run
from loop_agents.loop.tracing import candidate_config, iteration_config
from loop_agents.loop.turns import iteration_number, start_iteration
from loop_agents.loop.usage import CallUsage

STEPS_PER_ITERATION = 2
"""LangGraph steps one iteration takes: ``invoke_agent`` then ``evaluate``."""


def calls_models(control: LoopControl, hook: str) -> bool:
    """Whether ``control``'s ``hook`` may make a paid call of its own."""
    return bool(control.calls_models) or inspect.isgeneratorfunction(getattr(type(control), hook))


def tapped(program: Generator[Any, Any, Any]) -> Program[tuple[Any, dict[str, CallUsage]]]:
    """Run a hook's program, summing the usage of its calls by call name."""
    used: dict[str, CallUsage] = {}
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.throw(error) if error is not None else program.send(value)
        except StopIteration as done:
            return done.value, used
        error = None
        try:
            value = yield effect
        except Exception as exc:  # thrown into the hook, which may handle it
            error = exc
            continue
        if isinstance(effect, Call) and isinstance(value, Measured):
            used[effect.name] = used.get(effect.name, NO_USAGE) + value.usage


class OpenedTurn(NamedTuple):
    """An iteration as `LoopNodes.open_turn` opened it, before the agent call.

    Attributes:
        updates: The state updates that open it (``init_messages`` and the counters
            when a loop starts; the history policy's memory).
        history: The conversation before it (with the request when a loop starts).
        messages: What the agent is sent, as the ``shape_input`` hooks chose.
        agent_state: A graph agent's state beyond messages from its latest attempt.
        shaping: The model calls the ``shape_input`` hooks made (a summary).
        iteration: The iteration's number.

    """

    updates: dict[str, Any]
    history: list[AnyMessage]
    messages: list[AnyMessage]
    agent_state: dict[str, Any]
    shaping: CallUsage
    iteration: int


class LoopNodes:
    """The two nodes of one loop: its agent, its evaluator, its cap and its controls."""

    def __init__(
        self,
        agent: AgentLike,
        evaluator: Evaluator,
        max_iterations: int,
        *,
        name: str = "loop_agent",
        controls: Sequence[LoopControl] = (),
        output_mode: OutputMode = "full_state",
        node_retries: bool = True,
        keep_answers: bool = False,
    ) -> None:
        """Wrap the agent and the evaluator; sort the controls' hooks.

        ``node_retries=False``: the nodes run where no LangGraph retry policy can be set
        on them (`LoopMiddleware`'s hooks), so a call with a retry policy runs as a
        LangGraph task with it (run the program with ``stepped=True``).
        ``keep_answers=True``: every record keeps its answer (``record["answer"]``), as
        with ``output_mode="last_message"``, for a conversation that others may rewrite.
        """
        self.agent = AgentCaller(agent)
        self.evaluator = EvaluatorCaller(evaluator)
        self.max_iterations = max_iterations
        self.output_mode = output_mode
        self.keep_answers = keep_answers
        self.controls = list(controls)
        self.shapers = [c for c in self.controls if overrides(c, "shape_input")]
        self.wrappers = [c for c in self.controls if overrides(c, "around_agent")]
        self.deciders = [c for c in self.controls if overrides(c, "after_verdict")]
        self.rules = [c for c in self.controls if overrides(c, "stop_reason")]
        self.choosers = [c for c in self.controls if overrides(c, "choose")]
        self.retries = next((c for c in self.controls if isinstance(c, Retries)), None)
        self.prices: PriceTable | None = next(
            (p for c in self.controls if (p := getattr(c, "prices", None)) is not None), None
        )
        self.report = LoopReporter(name, max_iterations)
        self._judge = self.report.traced("evaluator", self.evaluator.invoke, self.evaluator.ainvoke)
        self._traced: dict[int, FunctionRunnable[AgentInput, dict[str, Any]]] = {}
        self.fans_out = any(c.fans_out for c in self.wrappers)
        self.stepped: dict[NodeName, bool] = {
            "invoke_agent": any(calls_models(c, "shape_input") for c in self.shapers),
            "evaluate": any(calls_models(c, "after_verdict") for c in self.deciders),
        }
        self.task_retries: dict[NodeName, bool] = {
            "invoke_agent": not node_retries or self.stepped["invoke_agent"] or self.fans_out,
            "evaluate": not node_retries or self.stepped["evaluate"] or self.fans_out,
        }
        # the retry policy of each call run as a LangGraph task (see `node_retry`)
        self._task_retries: dict[NodeName, RetryPolicies | None] = {
            name: None
            if self.retries is None or not self.task_retries[name]
            else self.retries.retry_policy[name]
            for name in ("invoke_agent", "evaluate")
        }

    # -- the nodes as LangGraph runs them ----------------------------------------------

    def reads(self, name: NodeName) -> frozenset[str]:
        """The state keys node ``name`` reads: its input schema (LangGraph reads no others).

        ``invoke_agent`` reads what opens an iteration; with controls that shape the
        agent's input, also what `Turn` gives them (`Turn.state`). ``evaluate`` reads what
        the evaluator is shown and the records, and what its controls need: the start
        time for stop rules, the kept agent states for choosers, the candidates' answers
        when a control wraps the agent call, the request's ids for
        ``output_mode="last_message"``.

        Example:
            ```python
            assert "messages" in LoopNodes(agent, judge, 3).reads("evaluate")
            ```

        """
        if name == "invoke_agent":
            keys = {
                "messages",
                "init_messages",
                "iteration",
                "last_response",
                "stop_reason",
                "agent_state",
                "loop_init_ids",
                "history_memory",
            }
            if self.shapers:
                keys |= {"feedback", "records"}
            return frozenset(keys)
        keys = {
            "messages",
            "init_messages",
            "iteration",
            "last_response",
            "feedback",
            "records",
            "agent_state",
            "agent_run",
            "remaining_steps",
        }
        if self.rules:
            keys.add("started_at")
        if self.choosers:
            keys.add("attempt_states")
        if self.wrappers:  # a control around the agent call may fan it out
            keys.add("candidate_runs")
        if self.output_mode == "last_message":
            keys.add("loop_init_ids")
        return frozenset(keys)

    def node(self, name: NodeName) -> FunctionRunnable[LoopState, Any]:
        """The runnable of node ``name``: the program run by ``invoke`` or ``ainvoke``.

        ``evaluate`` also says where the graph goes next (a ``Command``, see `routed`).
        """
        program = self.invoke_agent if name == "invoke_agent" else self.evaluate
        stepped = self.stepped[name]
        done = routed if name == "evaluate" else _as_they_are

        def sync(state: LoopState, config: RunnableConfig) -> Any:
            return done(run(program(state, config), stepped=stepped))

        async def async_(state: LoopState, config: RunnableConfig) -> Any:
            return done(await arun(program(state, config), stepped=stepped))

        return FunctionRunnable(sync, async_, name=name, trace=False)

    def node_retry(self, name: NodeName) -> RetryPolicies | None:
        """The node's LangGraph retry policy (``None`` when its calls retry as tasks)."""
        if self.retries is None or self.task_retries[name]:
            return None
        return self.retries.retry_policy[name]

    def _task_retry(self, name: NodeName) -> RetryPolicies | None:
        return self._task_retries[name]

    def _limit(self, name: NodeName, iteration: int, seconds: float | None) -> TimeLimit | None:
        if seconds is None and self.retries is not None:
            seconds = self.retries.timeout[name]
        return None if seconds is None else TimeLimit(name, iteration, seconds)

    # -- invoke_agent -------------------------------------------------------------------

    def invoke_agent(self, state: LoopState, config: RunnableConfig) -> Program[dict[str, Any]]:
        """Open the iteration, shape what the agent is sent, call it, keep what it gave."""
        turn = yield from self.open_turn(state, config)
        updates, history, iteration = turn.updates, turn.history, turn.iteration
        call = AgentCall(turn.messages, carried(turn.agent_state, self.agent.input_keys), iteration)
        result = yield from self._around(0, call, config)
        known = [*history, *updates.get("messages", [])]
        if isinstance(result, list):
            attempts = [_after(turn.agent_state, a) for a in result]
            return self._candidates_updates(
                updates, known, attempts, turn.shaping, iteration, turn.agent_state
            )
        single: Attempt = result
        attempt = _after(turn.agent_state, single)
        return self._attempt_updates(
            updates, known, attempt, turn.shaping, iteration, turn.agent_state
        )

    def open_turn(self, state: LoopState, config: RunnableConfig) -> Program[OpenedTurn]:
        """Open the iteration and shape what the agent is sent (``shape_input`` hooks).

        The first half of ``invoke_agent``, before the agent call; `LoopMiddleware` runs
        it where an iteration starts inside ``create_agent``.
        """
        updates, history = start_iteration(state)
        iteration = iteration_number(state, updates)
        self.report.iteration_started(iteration)
        agent_state = dict(state.get("agent_state") or {})
        turn = Turn(
            iteration,
            history,
            agent_state,
            config,
            state,
            updates,
            _config=partial(self.report.config, config, iteration),
        )
        messages = history
        shaping = NO_USAGE
        for control in self.shapers:
            shaped = control.shape_input(messages, turn)
            if isinstance(shaped, Generator):
                shaped, used = yield from tapped(shaped)
                for usage in used.values():
                    shaping = shaping + usage
            messages = checked_messages(control, shaped)
        if "memory" in turn.memory_kept:
            updates["history_memory"] = turn.memory_kept["memory"]
        elif turn.new_loop and state.get("history_memory") is not None:
            updates["history_memory"] = None
        return OpenedTurn(updates, history, messages, agent_state, shaping, iteration)

    def _around(self, index: int, call: AgentCall, config: RunnableConfig) -> Program[Any]:
        """The agent call through the controls around it, from the ``index``-th inward."""
        if index == len(self.wrappers):
            return (yield from self._agent_call(call, config))
        control = self.wrappers[index]
        hook = checked_around(control, control.around_agent(call))
        sent: Any = None
        error: BaseException | None = None
        while True:
            try:
                inner = hook.throw(error) if error is not None else hook.send(sent)
            except StopIteration as done:
                return checked_attempts(control, done.value)
            error = None
            inner = checked_calls(control, inner)
            try:
                if isinstance(inner, list):
                    sent = yield from self._fan_out(index + 1, inner, config)
                else:
                    sent = yield from self._around(index + 1, inner, config)
            except Exception as exc:  # thrown into the control, which may handle it
                error = exc

    def _fan_out(
        self, index: int, calls: list[AgentCall], config: RunnableConfig
    ) -> Program[list[Attempt]]:
        """Several agent calls at once, each a LangGraph task (see `Fanout`)."""
        programs = [partial(self._stored_attempt, index, call, config) for call in calls]
        names = [f"agent (candidate {call.candidate})" for call in calls]
        stored = yield Fanout(programs, names, self._task_retry("invoke_agent"))
        return [
            replace(
                Attempt.of_stored(s),
                agent_state=restored(call.agent_state, s, whole="agent_state", change="changes"),
            )
            for s, call in zip(stored, calls, strict=True)
        ]

    def _stored_attempt(
        self, index: int, call: AgentCall, config: RunnableConfig
    ) -> Program[dict[str, Any]]:
        attempt = yield from self._around(index, call, config)
        if not isinstance(attempt, Attempt):
            raise TypeError(
                f"a control around the agent call returned {type(attempt).__name__} for "
                f"candidate {call.candidate}; around_agent must return the Attempt it received "
                f"(or one of its own)"
            )
        # the state as a change set from what this call was given, not whole
        state = changes(call.agent_state, attempt.agent_state)
        stored: dict[str, Any] = replace(attempt, agent_state={}).stored()
        del stored["agent_state"]
        return stored | {"changes": state}

    def _agent_call(self, call: AgentCall, config: RunnableConfig) -> Program[Attempt]:
        """The agent call itself: one `Call`, measured."""
        caller = call.agent if isinstance(call.agent, AgentCaller) else self.agent
        role_config = iteration_config(
            config, loop=self.report.loop, iteration=call.iteration, role="agent"
        )
        name = "agent"
        if call.candidate is not None:
            role_config = candidate_config(role_config, call.candidate)
            name = f"agent (candidate {call.candidate})"
        traced = self._traced_agent(caller)
        limit = self._limit("invoke_agent", call.iteration, call.timeout)
        measured = yield Call(
            name,
            traced.invoke,
            traced.ainvoke,
            AgentInput(call.messages, call.agent_state),
            role_config,
            timeout=None if limit is None else limit.seconds,
            limit=limit,
            retry=self._task_retries["invoke_agent"],
        )
        value = measured.value
        return Attempt(
            value["produced"],
            None,
            restored(call.agent_state, value, whole="state", change="changes"),
            measured.seconds,
            measured.usage,
            call.candidate,
        )

    def _traced_agent(self, caller: AgentCaller) -> FunctionRunnable[AgentInput, dict[str, Any]]:
        traced = self._traced.get(id(caller))
        if traced is None:

            def sync(given: AgentInput, config: RunnableConfig) -> dict[str, Any]:
                reply = caller.invoke(given, config)
                return {"produced": reply.produced, "changes": changes(given.state, reply.state)}

            async def async_(given: AgentInput, config: RunnableConfig) -> dict[str, Any]:
                reply = await caller.ainvoke(given, config)
                return {"produced": reply.produced, "changes": changes(given.state, reply.state)}

            traced = self.report.traced("agent", sync, async_)
            self._traced[id(caller)] = traced
        return traced

    def _attempt_updates(
        self,
        updates: dict[str, Any],
        known: list[AnyMessage],
        attempt: Attempt,
        shaping: CallUsage,
        iteration: int,
        before: dict[str, Any],
    ) -> dict[str, Any]:
        if attempt.produced is None:
            updates["agent_run"] = run_of(attempt, shaping)
            self.report.agent_failed(iteration, attempt.error or "the agent call failed")
            return updates
        produced = with_fresh_ids(attempt.produced, known)
        run = run_of(
            Attempt(produced, None, attempt.agent_state, attempt.seconds, attempt.usage), shaping
        )
        updates["messages"] = [*updates.get("messages", []), *produced]
        updates["last_response"] = answer_of(produced)
        updates["agent_run"] = run
        if attempt.agent_state:  # what the attempt changed (a deep agent: the files it wrote)
            after = dict(attempt.agent_state)
            change = changes(before, after)
            if change is not None:
                updates["agent_state"] = change
            if self.choosers:  # the way back, to rebuild this state if it is chosen
                run["agent_state_undo"] = changes(after, before)
        self.report.agent_finished(iteration, updates["last_response"], run)
        return updates

    def _candidates_updates(
        self,
        updates: dict[str, Any],
        known: list[AnyMessage],
        attempts: list[Attempt],
        shaping: CallUsage,
        iteration: int,
        before: dict[str, Any],
    ) -> dict[str, Any]:
        runs: list[CandidateRun] = []
        taken = list(known)
        seconds = 0.0
        for number, attempt in enumerate(attempts, 1):
            produced = with_fresh_ids(attempt.produced, taken) if attempt.produced else []
            taken.extend(produced)
            fresh = Attempt(produced or None, attempt.error, {}, attempt.seconds, attempt.usage)
            run = run_of(fresh)
            seconds = max(seconds, attempt.seconds)
            entry: CandidateRun = {"candidate": number, "produced": produced, "run": run}
            if attempt.agent_state:  # as a change set from the state before the iteration
                entry["changes"] = changes(before, dict(attempt.agent_state))
            runs.append(entry)
            if not produced:
                self.report.agent_failed(iteration, attempt.error or "", candidate=number)
            else:
                self.report.agent_finished(iteration, answer_of(produced), run, candidate=number)
        combined: AgentRun = {
            "seconds": seconds,
            "input_tokens": sum(r["run"]["input_tokens"] for r in runs),
            "output_tokens": sum(r["run"]["output_tokens"] for r in runs),
            "cached_input_tokens": sum(r["run"].get("cached_input_tokens", 0) for r in runs),
        }
        if shaping.requests:
            combined["history"] = shaping.stored()
        return updates | {"candidate_runs": runs, "agent_run": combined}

    # -- evaluate -----------------------------------------------------------------------

    def evaluate(self, state: LoopState, config: RunnableConfig) -> Program[dict[str, Any]]:
        """Judge the answer(s), let the controls work on the verdicts, decide, record."""
        iteration = state.get("iteration", 0)
        attempts, shaping = attempts_of(state)
        base = loop_context(state, with_answer=False)
        contexts = [
            _context_of(base, attempt, len(attempts) > 1)
            for attempt in attempts
            if attempt.produced
        ]
        verdicts: list[dict[str, Any]]
        if len(attempts) > 1 and contexts:
            programs = [partial(self._judge_program, c, config) for c in contexts]
            names = [f"evaluator (candidate {c['candidate']})" for c in contexts]
            verdicts = yield Fanout(programs, names, self._task_retry("evaluate"))
        elif contexts:
            verdicts = [(yield from self._judge_program(contexts[0], config))]
        else:
            verdicts = []
        judged_verdicts = iter(verdicts)
        outcome = Outcome(
            iteration,
            judged_of(
                attempts,
                [
                    _verdict(next(judged_verdicts), self.evaluator.name) if a.produced else None
                    for a in attempts
                ],
            ),
            request=list(state.get("init_messages") or []),
            records=list(state.get("records") or []),
            evaluator=self.evaluator.name,
            _config=partial(self.report.config, config, iteration),
        )
        outcome.selected = next((i for i, j in enumerate(outcome.judged) if j.verdict), None)
        if shaping.requests:
            outcome.usage["history"] = shaping
        run = state.get("agent_run") or EMPTY_RUN
        outcome._ends = partial(self._ends, state, run)
        for control in self.deciders:
            changed = control.after_verdict(outcome)
            if isinstance(changed, Generator):
                changed, used = yield from tapped(changed)
                for call_name, usage in used.items():
                    outcome.add_usage(call_name, usage)
            outcome = checked_outcome(control, changed)
        check_decided(outcome, self.evaluator.where(iteration))
        record = record_of(outcome, run, self.evaluator.name)
        if self.prices is not None:
            record["cost"] = self.prices.cost(outcome.total_usage)
        reason = self._stop_reason(state, record)
        return self._evaluation_updates(state, outcome, record, reason)

    def _judge_program(
        self, context: LoopContext, config: RunnableConfig
    ) -> Program[dict[str, Any]]:
        iteration = context["iteration"]
        role_config = iteration_config(
            config, loop=self.report.loop, iteration=iteration, role="evaluator"
        )
        name = "evaluator"
        if "candidate" in context:
            role_config = candidate_config(role_config, context["candidate"])
            name = f"evaluator (candidate {context['candidate']})"
        limit = self._limit("evaluate", iteration, None)
        measured = yield Call(
            name,
            self._judge.invoke,
            self._judge.ainvoke,
            context,
            role_config,
            timeout=None if limit is None else limit.seconds,
            limit=limit,
            retry=self._task_retries["evaluate"],
        )
        return {
            "evaluation": measured.value,
            "seconds": measured.seconds,
            "usage": measured.usage.stored(),
        }

    def _ends(self, state: LoopState, run: AgentRun, outcome: Outcome) -> bool:
        """Whether the loop would end with ``outcome`` as it stands."""
        if outcome.stop:
            return True
        record = record_of(outcome, run, self.evaluator.name)
        if self.prices is not None:
            record["cost"] = self.prices.cost(outcome.total_usage)
        return self._stop_reason(state, record) is not None

    def _stop_reason(self, state: LoopState, record: IterationRecord) -> str | None:
        if record["stop"]:
            return "accepted"
        records = [*state.get("records", []), record]
        iteration = state.get("iteration", 0)
        remaining = state.get("remaining_steps")
        out_of_steps = remaining is not None and remaining <= STEPS_PER_ITERATION
        progress = Progress(iteration, records, False, state.get("started_at"), out_of_steps)
        for rule in self.rules:
            reason = rule.stop_reason(progress)
            if reason is not None:
                if not isinstance(reason, str) or not reason:
                    raise TypeError(
                        f"control {rule.describe()!r}: stop_reason returned {reason!r}; it must "
                        f"return a non-empty string (the stop reason) or None"
                    )
                return reason
        # the iterations that do not count are looked for only once enough were made
        if iteration >= self.max_iterations and (
            iteration - sum(1 for r in records if r.get("counted") is False) >= self.max_iterations
        ):
            return "max_iterations"
        if out_of_steps:
            return "recursion_limit"
        return None

    def _evaluation_updates(
        self,
        state: LoopState,
        outcome: Outcome,
        record: IterationRecord,
        reason: str | None,
    ) -> dict[str, Any]:
        iteration = record["iteration"]
        answer = outcome.answer
        if (self.output_mode == "last_message" or self.keep_answers) and answer is not None:
            record["answer"] = answer  # the attempts leave ``messages`` when the loop ends
        updates: dict[str, Any] = {
            "stop": record["stop"],
            "feedback": [record["feedback"]],
            "records": [record],
            "stop_reason": reason,
        }
        selected = outcome.attempt
        before = dict(state.get("agent_state") or {})  # the agent state before these updates
        latest = dict(selected.agent_state) if selected is not None else {}
        if len(outcome.judged) > 1:
            updates["candidate_runs"] = []
            if selected is not None and selected.produced:
                updates["messages"] = list(selected.produced)
                updates["last_response"] = answer
            if latest:
                updates["agent_state"] = changes(before, latest) or no_change()
            self.report.candidates_judged(record)
        if self.choosers and latest:
            # the way back to the previous iteration's state (invoke_agent computed it when
            # the state was written there), so that the chosen iteration's can be rebuilt
            if len(outcome.judged) > 1:
                undo = changes(latest, before)
            else:
                undo = (state.get("agent_run") or EMPTY_RUN).get("agent_state_undo")
            updates["attempt_states"] = [{"iteration": iteration, "undo": undo}]
        self.report.evaluation_finished(record)
        if reason is None:
            # with its id: a delta channel replays the stored write, and a message given
            # without one would get it only as it is stored, after the router read it
            message = outcome.message
            if isinstance(message, HumanMessage):
                message = with_fresh_ids([message], ())[0]
            else:  # a new message of the loop's own: its id is given in place
                message = feedback_message(outcome.feedback_text, iteration=iteration)
                if message.id is None:
                    message.id = str(uuid.uuid4())
            updates["messages"] = [*updates.get("messages", []), message]
        else:
            updates |= self._selection(state, record, updates, latest or before)
            final = updates.get("last_response", answer)
            if final is None and updates.get("selected_iteration") is not None:
                final = state.get("last_response")
            records = [*state.get("records", []), record]
            self.report.loop_finished(
                cast(StopReason, reason), records, updates["selected_iteration"], final
            )
        if reason is not None and self.output_mode == "last_message":
            updates = keep_final_answer(state, updates)
        return updates

    def _selection(
        self,
        state: LoopState,
        record: IterationRecord,
        updates: dict[str, Any],
        latest: dict[str, Any],
    ) -> dict[str, Any]:
        """Which attempt is the loop's answer: the last one, or what the choosers pick.

        ``latest`` is the agent state after the loop's latest answered attempt.
        """
        records = [*state.get("records", []), record]
        chosen = choose(records, "last")
        for chooser in self.choosers:
            picked = checked_choice(chooser, chooser.choose(records), records)
            if picked is not None:
                chosen = picked
        if chosen is None:
            return {"selected_iteration": None, "selected_score": None}
        selection: dict[str, Any] = {
            "selected_iteration": chosen["iteration"],
            "selected_score": chosen["score"],
        }
        if chosen is not record:
            conversation = {"messages": [*state.get("messages", []), *updates.get("messages", [])]}
            copy = answer_copy(chosen, conversation)
            selection["messages"] = [*updates.get("messages", []), copy]
            selection["last_response"] = copy
            entries = [*state.get("attempt_states", []), *updates.get("attempt_states", [])]
            chosen_state = selected_state(entries, chosen["iteration"], latest)
            if chosen_state:  # a change set from the state before this node's updates
                before = dict(state.get("agent_state") or {})
                selection["agent_state"] = changes(before, chosen_state) or no_change()
        return selection


def routed(updates: dict[str, Any]) -> Command[str]:
    """The evaluate node's updates, and where the loop goes next.

    Back to the agent, or to the end once the loop has a stop reason.
    """
    goto = END if updates.get("stop_reason") else "invoke_agent"
    return Command(update=updates, goto=goto)


def _as_they_are(updates: dict[str, Any]) -> dict[str, Any]:
    return updates


def _after(before: dict[str, Any], attempt: Attempt) -> Attempt:
    """``attempt`` with the agent's whole state after it: what it returned over what it had.

    A key the attempt did not return (a plan the agent did not rewrite) keeps its value.
    """
    if not attempt.agent_state or not before:
        return attempt
    return Attempt(
        attempt.produced,
        attempt.error,
        {**before, **attempt.agent_state},
        attempt.seconds,
        attempt.usage,
        attempt.candidate,
    )


def _verdict(stored: dict[str, Any], name: str) -> Any:
    verdict = verdict_of(stored["evaluation"], name)
    verdict.seconds = stored["seconds"]
    verdict.usage = CallUsage.of_stored(stored["usage"])
    return verdict


def _context_of(base: LoopContext, attempt: Attempt, candidate: bool) -> LoopContext:
    answer = answer_of(attempt.produced or [])
    if candidate:
        context = candidate_context(base, attempt.produced or [], answer, attempt.candidate or 1)
    else:
        context = LoopContext(**base, last_response=answer)
    context["agent_state"] = dict(attempt.agent_state)
    return context


def loop_context(state: LoopState, *, with_answer: bool = True) -> LoopContext:
    """The evaluator's `LoopContext` (without an answer: the base of candidates' ones)."""
    context: dict[str, Any] = {
        "iteration": state.get("iteration", 0),
        "init_messages": list(state.get("init_messages") or []),
        "feedback": list(state.get("feedback") or []),
        "messages": list(state.get("messages") or []),
        "agent_state": dict(state.get("agent_state") or {}),
    }
    if with_answer:
        context["last_response"] = state["last_response"]
    return cast(LoopContext, context)


__all__ = [
    "STEPS_PER_ITERATION",
    "InvalidEvaluationError",
    "LoopNodes",
    "OpenedTurn",
    "loop_context",
]
