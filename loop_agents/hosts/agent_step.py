"""The ``invoke_agent`` node of `create_loop_agent`'s graph: the agent called as one step.

After the core opens the iteration, the agent is called (``"iteration N: agent"``, within
its time limit) through the controls around it, and what it gave is kept.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.pregel.protocol import PregelProtocol

from loop_agents.loop.agent_state import carried, changes, restored
from loop_agents.loop.agents import AgentCaller, AgentInput, AgentLike, answer_of, with_fresh_ids
from loop_agents.loop.hook_checks import checked_around, checked_attempts, checked_calls
from loop_agents.loop.nodes import LoopNodes, OpenedTurn
from loop_agents.loop.outcomes import run_of
from loop_agents.loop.protocol import AgentCall, Attempt
from loop_agents.loop.state import AgentRun, CandidateRun, LoopState
from loop_agents.loop.tracing import candidate_config
from loop_agents.runtime._function_runnable import FunctionRunnable
from loop_agents.runtime.steps import Call, Fanout, Program
from loop_agents.runtime.usage import CallUsage, usage_of_answer


class AgentStep:
    """The ``invoke_agent`` node's program: open the iteration, call the agent, keep it."""

    def __init__(self, core: LoopNodes, agent: AgentLike) -> None:
        """The step of ``core``'s loop that calls ``agent``."""
        self.core = core
        self.agent = AgentCaller(agent)
        # a graph agent is given its state; a chat model or a function is not
        self.takes_state = isinstance(agent, Pregel | PregelProtocol)
        self._traced: dict[int, FunctionRunnable[AgentInput, dict[str, Any]]] = {}
        self.fans_out = any(c.fans_out for c in core.wrappers)

    def invoke_agent(self, state: LoopState, config: RunnableConfig) -> Program[dict[str, Any]]:
        """Open the iteration, shape what the agent is sent, call it, keep what it gave."""
        turn = yield from self.core.open_turn(state, config)
        call = AgentCall(
            turn.messages, carried(turn.agent_state, self.agent.input_keys), turn.iteration
        )
        result = yield from self._around(0, call, config)
        known = [*turn.history, *turn.updates.get("messages", [])]
        if isinstance(result, list):
            attempts = [_after(turn.agent_state, a) for a in result]
            return self._candidates_updates(turn, known, attempts)
        return self._attempt_updates(turn, known, _after(turn.agent_state, result))

    def _around(self, index: int, call: AgentCall, config: RunnableConfig) -> Program[Any]:
        """The agent call through the controls around it, from the ``index``-th inward."""
        if index == len(self.core.wrappers):
            return (yield from self._agent_call(call, config))
        control = self.core.wrappers[index]
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
        stored = yield Fanout(programs, names, self.core.retry_policy("agent"))
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
        role_config = self.core.report.config(config, call.iteration, "agent")
        name = "agent"
        if call.candidate is not None:
            role_config = candidate_config(role_config, call.candidate)
            name = f"agent (candidate {call.candidate})"
        traced = self._traced_agent(caller)
        limit = self.core.time_limit("agent", call.iteration, call.timeout)
        measured = yield Call(
            name,
            traced.invoke,
            traced.ainvoke,
            AgentInput(call.messages, call.agent_state),
            role_config,
            limit=limit,
            retry=self.core.retry_policy("agent"),
            counted=_answer_usage if isinstance(caller.agent, BaseChatModel) else None,
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

            traced = self.core.report.traced("agent", sync, async_)
            self._traced[id(caller)] = traced
        return traced

    def _attempt_updates(
        self, turn: OpenedTurn, known: list[AnyMessage], attempt: Attempt
    ) -> dict[str, Any]:
        updates, iteration, shaping = turn.updates, turn.iteration, turn.shaping
        if attempt.produced is None:
            updates["agent_run"] = run_of(attempt, shaping)
            self.core.report.agent_failed(iteration, attempt.error or "the agent call failed")
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
            change = changes(turn.agent_state, after)
            if change is not None:
                updates["agent_state"] = change
            if self.core.choosers:  # the way back, to rebuild this state if it is chosen
                run["agent_state_undo"] = changes(after, turn.agent_state)
        self.core.report.agent_finished(iteration, updates["last_response"], run)
        return updates

    def _candidates_updates(
        self, turn: OpenedTurn, known: list[AnyMessage], attempts: list[Attempt]
    ) -> dict[str, Any]:
        iteration = turn.iteration
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
                entry["changes"] = changes(turn.agent_state, dict(attempt.agent_state))
            runs.append(entry)
            if not produced:
                self.core.report.agent_failed(iteration, attempt.error or "", candidate=number)
            else:
                answer = answer_of(produced)
                self.core.report.agent_finished(iteration, answer, run, candidate=number)
        combined: AgentRun = {
            "seconds": seconds,
            "input_tokens": sum(r["run"]["input_tokens"] for r in runs),
            "output_tokens": sum(r["run"]["output_tokens"] for r in runs),
            "cached_input_tokens": sum(r["run"].get("cached_input_tokens", 0) for r in runs),
        }
        if turn.shaping.requests:
            combined["history"] = turn.shaping.stored()
        return turn.updates | {"candidate_runs": runs, "agent_run": combined}


def _answer_usage(value: dict[str, Any]) -> CallUsage:
    """The usage of a chat model agent's one call, read from its answer."""
    # what the token counter would count, without LangChain's callback machinery around
    # the call: 2.7% of the Repair() loop's instructions (callgrind, benchmark 1)
    return usage_of_answer(value["produced"][-1])


def _after(before: dict[str, Any], attempt: Attempt) -> Attempt:
    """``attempt`` with the agent's whole state after it: what it returned over what it had."""
    if not attempt.agent_state or not before:
        return attempt
    return replace(attempt, agent_state={**before, **attempt.agent_state})


__all__ = ["AgentStep"]
