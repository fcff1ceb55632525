"""The loop's two nodes, ``invoke_agent`` and ``evaluate``, each written once.

Each is a program (`loop_agents.runtime.steps`), run by ``invoke`` and ``ainvoke`` alike,
that runs its controls' hooks (`loop_agents.loop.protocol`) at the loop's points.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from functools import partial
from operator import methodcaller
from typing import Any, NamedTuple, TypeVar, cast

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from loop_agents.loop._reporting import LoopReporter
from loop_agents.loop.agent_state import changes, no_change, selected_state
from loop_agents.loop.agents import answer_of, check_count, with_fresh_ids
from loop_agents.loop.evaluation import Evaluator, EvaluatorCaller
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat, feedback_message
from loop_agents.loop.hook_checks import checked_choice, checked_messages, checked_outcome
from loop_agents.loop.outcomes import (
    EMPTY_RUN,
    attempts_of,
    check_decided,
    record_of,
    verdict_of,
)
from loop_agents.loop.protocol import (
    NO_USAGE,
    Attempt,
    CallName,
    Judged,
    LoopControl,
    Outcome,
    Progress,
    Turn,
    overrides,
)
from loop_agents.loop.records import answer_copy, choose
from loop_agents.loop.state import AgentRun, IterationRecord, LoopContext, LoopState, StopReason
from loop_agents.loop.tracing import candidate_config, iteration_config
from loop_agents.loop.turns import start_iteration
from loop_agents.runtime.steps import Call, Fanout, Measured, Program, RetryPolicies
from loop_agents.runtime.time_limits import NodeName, TimeLimit
from loop_agents.runtime.usage import CallUsage

T = TypeVar("T")

DEFAULT_MAX_ITERATIONS = 100
"""The cap when none is given (seed 001's default), the same in both forms."""

STEPS_PER_ITERATION = 2
"""LangGraph steps one iteration takes: ``invoke_agent`` then ``evaluate``."""

_OPENING = frozenset(
    {"messages", "init_messages", "iteration", "last_response", "stop_reason", "agent_state"}
    | {"loop_init_ids"}
)
_JUDGING = frozenset(
    {"messages", "init_messages", "iteration", "last_response", "feedback", "records"}
    | {"agent_state", "agent_run", "remaining_steps"}
)


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
    """An iteration as `LoopNodes.open_turn` opened it, before the agent call."""

    updates: dict[str, Any]  # the state updates that open it
    history: list[AnyMessage]  # the conversation before it (with a new loop's request)
    messages: list[AnyMessage]  # what the agent is sent, as the shape_input hooks chose
    agent_state: dict[str, Any]  # a graph agent's state from its latest attempt
    shaping: CallUsage  # the model calls the shape_input hooks made (a summary)
    iteration: int


class LoopNodes:
    """The two nodes of one loop: its evaluator, its cap and its controls (assembled)."""

    def __init__(
        self,
        evaluator: Evaluator,
        max_iterations: int,
        *,
        name: str = "loop_agent",
        controls: Sequence[LoopControl] = (),
    ) -> None:
        self.evaluator = EvaluatorCaller(evaluator)
        self.max_iterations = max_iterations
        self.controls = list(controls)
        self.shapers = [c for c in self.controls if overrides(c, "shape_input")]
        self.retry_kinds = [c for c in self.controls if overrides(c, "retry_kind")]
        self.wrappers = [c for c in self.controls if overrides(c, "around_agent")]
        self.deciders = [c for c in self.controls if overrides(c, "after_verdict")]
        self.rules = [c for c in self.controls if overrides(c, "stop_reason")]
        self.choosers = [c for c in self.controls if overrides(c, "choose")]
        self.pricing = _declared(self.controls, lambda c: c.pricing())
        self.feedback_format: FeedbackFormat = (
            _declared(self.controls, lambda c: c.feedback_format()) or DEFAULT_FEEDBACK_FORMAT
        )
        # what the controls declare, read once: the nodes ask on every call
        self._retry: dict[str, RetryPolicies | None] = {}
        self._seconds: dict[str, float | None] = {}
        for call in ("agent", "evaluator"):
            self._retry[call] = _declared(self.controls, methodcaller("retry_policy", call))
            self._seconds[call] = _declared(self.controls, methodcaller("time_limit", call))
        self.report = LoopReporter(name, max_iterations)
        self._judge = self.report.traced("evaluator", self.evaluator.invoke, self.evaluator.ainvoke)
        self.stepped: dict[NodeName, bool] = {
            "invoke_agent": any(calls_models(c, "shape_input") for c in self.shapers),
            "evaluate": any(calls_models(c, "after_verdict") for c in self.deciders),
        }

    def retry_policy(self, call: CallName) -> RetryPolicies | None:
        """The retry policy the controls set for ``call`` (``None``: none)."""
        return self._retry.get(call)

    def time_limit(
        self, call: CallName, iteration: int, seconds: float | None = None
    ) -> TimeLimit | None:
        """The time limit of ``call`` at ``iteration`` (``seconds``, or the controls')."""
        if seconds is None:
            seconds = self._seconds.get(call)
        node: NodeName = "invoke_agent" if call == "agent" else "evaluate"
        return None if seconds is None else TimeLimit(node, iteration, seconds)

    def reads(self, name: NodeName) -> frozenset[str]:
        """The state keys node ``name`` reads (its input schema): what it and its controls use.

        Each key costs LangGraph a read at every step (an empty one, an exception).
        """
        if name == "invoke_agent":
            shaping = self.shapers or self.retry_kinds
            return _OPENING | ({"feedback", "records", "history_memory"} if shaping else set())
        return _JUDGING | (
            ({"started_at"} if self.rules else set())
            | ({"attempt_states"} if self.choosers else set())
            | ({"candidate_runs"} if self.wrappers else set())  # a wrapper may fan out
        )

    def open_turn(self, state: LoopState, config: RunnableConfig) -> Program[OpenedTurn]:
        """Open the iteration and shape what the agent is sent (``shape_input`` hooks).

        Run before the agent call, by either host.
        """
        updates, history, iteration = start_iteration(state)
        self.report.iteration_started(iteration)
        agent_state = dict(state.get("agent_state") or {})
        messages, shaping = history, NO_USAGE
        if not self.shapers:
            return OpenedTurn(updates, history, messages, agent_state, shaping, iteration)
        named = partial(self.report.config, config, iteration)  # the config of a hook's calls
        feedback_format = self.feedback_format
        turn = Turn(
            iteration, history, agent_state, config, state, updates, feedback_format, _config=named
        )
        for control in self.retry_kinds:
            kind = control.retry_kind(turn)
            if kind is not None and not isinstance(kind, str):
                raise TypeError(
                    f"control {control.describe()!r}: retry_kind returned {kind!r:.40}; it "
                    f"must return the kind's name (a str, e.g. 'repair') or None"
                )
            if kind is not None:
                turn = replace(turn, retry_kind=kind)
                break
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

    def evaluate(self, state: LoopState, config: RunnableConfig) -> Program[dict[str, Any]]:
        """Judge the answer(s), let the controls work on the verdicts, decide, record."""
        iteration = state.get("iteration", 0)
        attempts, shaping = attempts_of(state)
        answered = [a for a in attempts if a.produced]
        contexts = [_context_of(state, a, len(attempts) > 1) for a in answered]
        verdicts: list[dict[str, Any]] = []
        if len(attempts) > 1 and contexts:
            programs = [partial(self._judge_program, c, config) for c in contexts]
            names = [f"evaluator (candidate {c['candidate']})" for c in contexts]
            verdicts = yield Fanout(programs, names, self.retry_policy("evaluator"))
        elif contexts:
            verdicts = [(yield from self._judge_program(contexts[0], config))]
        judged = iter(verdicts)
        name = self.evaluator.name
        outcome = Outcome(
            iteration,
            [Judged(a, verdict_of(next(judged), name) if a.produced else None) for a in attempts],
            request=list(state.get("init_messages") or []),
            records=list(state.get("records") or []),
            evaluator=name,
            _config=partial(self.report.config, config, iteration),
        )
        outcome.selected = next((i for i, j in enumerate(outcome.judged) if j.verdict), None)
        if shaping.requests:
            outcome.usage["history"] = shaping
        run = state.get("agent_run") or EMPTY_RUN
        if self.deciders:
            outcome._ends = partial(self._ends, state, run)
        for control in self.deciders:
            changed = control.after_verdict(outcome)
            if isinstance(changed, Generator):
                changed, used = yield from tapped(changed)
                for call_name, usage in used.items():
                    outcome.add_usage(call_name, usage)
            outcome = checked_outcome(control, changed)
        check_decided(outcome, self.evaluator.where(iteration))
        record = self._record(outcome, run)
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
        measured = yield Call(
            name,
            self._judge.invoke,
            self._judge.ainvoke,
            context,
            role_config,
            limit=self.time_limit("evaluator", iteration),
            retry=self._retry["evaluator"],
        )
        usage = measured.usage.stored()
        return {"evaluation": measured.value, "seconds": measured.seconds, "usage": usage}

    def _record(self, outcome: Outcome, run: AgentRun) -> IterationRecord:
        record = record_of(outcome, run, self.evaluator.name)
        if self.pricing is not None:
            record["cost"] = self.pricing.cost(outcome.total_usage)
        return record

    def _ends(self, state: LoopState, run: AgentRun, outcome: Outcome) -> bool:
        """Whether the loop would end with ``outcome`` as it stands."""
        return outcome.stop or self._stop_reason(state, self._record(outcome, run)) is not None

    def _stop_reason(self, state: LoopState, record: IterationRecord) -> str | None:
        if record["stop"]:
            return "accepted"
        iteration = state.get("iteration", 0)
        remaining = state.get("remaining_steps")
        out_of_steps = remaining is not None and remaining <= STEPS_PER_ITERATION
        records = [*state.get("records", []), record] if self.rules or out_of_steps else []
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
            iteration
            - sum(1 for r in (*state.get("records", []), record) if r.get("counted") is False)
            >= self.max_iterations
        ):
            return "max_iterations"
        return "recursion_limit" if out_of_steps else None

    def _evaluation_updates(
        self, state: LoopState, outcome: Outcome, record: IterationRecord, reason: str | None
    ) -> dict[str, Any]:
        iteration = record["iteration"]
        answer = outcome.answer
        updates: dict[str, Any] = {
            "stop": record["stop"],
            "feedback": [record["feedback"]],
            "records": [record],
        }
        if reason is not None:  # None since the loop started: no write while it runs
            updates["stop_reason"] = reason
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
                message = feedback_message(
                    outcome.feedback_text, iteration=iteration, feedback_format=self.feedback_format
                )
                if message.id is None:
                    message.id = str(uuid.uuid4())
            updates["messages"] = [*updates.get("messages", []), message]
            return updates
        updates |= self._selection(state, record, updates, latest or before)
        final = updates.get("last_response", answer)
        if final is None and updates.get("selected_iteration") is not None:
            final = state.get("last_response")
        records = [*state.get("records", []), record]
        self.report.loop_finished(
            cast(StopReason, reason), records, updates["selected_iteration"], final
        )
        return updates

    def _selection(
        self,
        state: LoopState,
        record: IterationRecord,
        updates: dict[str, Any],
        latest: dict[str, Any],  # the agent state after the latest answered attempt
    ) -> dict[str, Any]:
        """Which attempt is the loop's answer: the last one, or what the choosers pick."""
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


def _declared(controls: Sequence[LoopControl], read: Callable[[LoopControl], T | None]) -> T | None:
    """What the first control that declares it says (``None`` when none does)."""
    return next((value for value in map(read, controls) if value is not None), None)


def check_max_iterations(max_iterations: object) -> int:
    """Validate the cap: an int >= 1."""
    return check_count("max_iterations", max_iterations, "the agent is called at least once")


def check_name(name: object) -> str:
    """Validate the loop's name: a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(
            f"name must be a non-empty string (the loop's name in traces, events and a "
            f"parent graph); got {type(name).__name__} {name!r:.60}"
        )
    return name


def _context_of(state: LoopState, attempt: Attempt, candidate: bool) -> LoopContext:
    """The evaluator's `LoopContext` for ``attempt`` (a candidate's when ``candidate``)."""
    produced = attempt.produced or []
    messages = list(state.get("messages") or [])
    context: LoopContext = {
        "iteration": state.get("iteration", 0),
        "init_messages": list(state.get("init_messages") or []),
        "last_response": answer_of(produced),
        "feedback": list(state.get("feedback") or []),
        "messages": [*messages, *produced] if candidate else messages,
        "agent_state": dict(attempt.agent_state),
    }
    if candidate:  # its own answer, messages and agent state
        context["candidate"] = attempt.candidate or 1
    return context
