"""`LoopMiddleware`: the loop inside a ``create_agent`` agent, as LangChain middleware.

The same `LoopNodes` as `create_loop_agent`'s, at ``create_agent``'s points:
``before_agent`` opens the loop, ``wrap_model_call`` runs and counts each model call of an
attempt, ``after_agent`` judges the attempt and jumps back to the model or lets the agent
end. See docs/inside-create-agent.md.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    hook_config,
)
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.config import get_config
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.types import Command, Overwrite

from loop_agents.hosts.middleware_state import (
    DEFAULT_STATE_KEYS,
    LOOP_AGENT_STATE_FULL,
    OUTPUT_KEYS,
    REDUCED_BY_DEFAULT,
    STOPPED,
    AttemptMark,
    LoopAgentState,
    agent_updates,
    attempt_part,
    attempt_start,
    attempt_view,
    keys_with_reducers,
    loop_output,
    loop_view,
    stopped_reason,
)
from loop_agents.hosts.removed_keywords import refuse_removed_keywords
from loop_agents.loop.agents import encodable
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.nodes import (
    DEFAULT_MAX_ITERATIONS,
    LoopNodes,
    OpenedTurn,
    check_max_iterations,
    check_name,
)
from loop_agents.loop.protocol import (
    LoopControl,
    LoopSpec,
    Outcome,
    Progress,
    Stage,
    assemble_controls,
    check_controls,
    overrides,
)
from loop_agents.loop.records import KeptAnswers
from loop_agents.loop.state import LoopState
from loop_agents.loop.storage import Storage, check_storage
from loop_agents.runtime.steps import Program, arun, run
from loop_agents.runtime.usage import NO_USAGE, usage_of_answer


class LoopMiddleware(AgentMiddleware[Any, Any, Any]):
    """The loop of `create_loop_agent` inside ``create_agent``: judge, feed back, retry.

    Add it to ``create_agent(..., middleware=[...])`` (or ``create_deep_agent``'s): each
    time the agent would finish, ``evaluator`` judges its answer; while it is not
    satisfied, its feedback becomes the next user turn (fenced as a review, tagged
    ``name="loop_feedback"``) and the model runs again, at most ``max_iterations`` answers
    in all. The agent's output has the loop's keys beside its own (`LoopAgentState`;
    `loop_output` gives them under `create_loop_agent`'s names); with a checkpointer on
    the agent, a run resumes after an error or a kill (``invoke(None, config)``).

    Args:
        evaluator: A sync or async function of `LoopContext` returning a
            `LoopEvaluation`, or a ready-made evaluator (``llm_judge``, ``rule``, ...).
            Its context's ``agent_state`` holds the agent's ``state_keys``
            (``structured_response``, a deep agent's ``files`` and ``todos``).
        max_iterations: The most answers the agent gives in one run (an int >= 1;
            default 100, as `create_loop_agent`'s).
        controls: The loop's controls, as `create_loop_agent` takes them, but for those
            that need the agent call as one step (`Candidates`, `DiverseFirst`,
            `AgentErrors`, the agent's side of `Retries`).
        name: The loop's name in its events and traces.
        state_keys: The agent-state keys that belong to an attempt: shown to the
            evaluator, kept per iteration, and put back exactly as the selected attempt
            left them. Names among the defaults (``structured_response``, ``files``,
            ``todos``), or for any other key a state schema (a ``TypedDict``: its keys
            but ``messages``, each with its reducer read from its annotation).
        storage: ``"auto"`` (the default: the agent's checkpointer is not known yet)
            or ``"delta"`` store the loop's lists as LangGraph delta channels;
            ``"full"`` whole, for a checkpointer that keeps only the latest checkpoint.

    Raises:
        TypeError: an option, evaluator or control of the wrong type.
        ValueError: an option out of range, two controls that cannot work together, or
            a control that cannot apply inside one agent (it names
            ``create_loop_agent``, where it does).

    Example:
        ```python
        from langchain.agents import create_agent
        from loop_agents import LoopMiddleware, llm_judge

        judge = llm_judge("openai:gpt-5.4-mini", "Score 0-100: accurate, cited.", threshold=80)
        agent = create_agent("openai:gpt-5.4-mini", tools, middleware=[LoopMiddleware(judge, 3)])
        result = agent.invoke({"messages": [{"role": "user", "content": "..."}]})
        print(result["loop_stop_reason"], [r["score"] for r in result["loop_records"]])
        ```

    """

    state_schema = LoopAgentState

    @refuse_removed_keywords
    def __init__(
        self,
        evaluator: Evaluator,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        *,
        controls: Sequence[LoopControl] = (),
        name: str = "loop_agent",
        state_keys: Sequence[str] | type[Any] = DEFAULT_STATE_KEYS,
        storage: Storage = "auto",
    ) -> None:
        """Check every option and assemble the loop's controls (before any model call)."""
        super().__init__()
        given = check_controls(controls)
        cap = check_max_iterations(max_iterations)
        spec = LoopSpec(None, evaluator, cap, host="middleware")
        parts = assemble_controls([AgentStopped(), KeptAnswers(), *given], spec)
        for part in parts:
            _refuse_outside(part)
        self.state_keys, self._reduced = _check_state_keys(state_keys)
        if check_storage(storage) == "full":
            self.state_schema = LOOP_AGENT_STATE_FULL
        self.nodes = LoopNodes(evaluator, cap, name=check_name(name), controls=parts)
        self._open_stepped = self.nodes.stepped["invoke_agent"]
        self._close_stepped = (
            self.nodes.stepped["evaluate"]
            or self.nodes.stepped["invoke_agent"]
            or self.nodes.retry_policy("evaluator") is not None
        )

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Open the loop: its request, the criteria message, what the model is sent."""
        return run(self._opening(state), stepped=self._open_stepped)

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Open the loop (async)."""
        return await arun(self._opening(state), stepped=self._open_stepped)

    def _opening(self, state: Mapping[str, Any]) -> Program[dict[str, Any]]:
        _refuse_given_loop_keys(state)
        view = loop_view(state, self.state_keys)
        turn = yield from self.nodes.open_turn(view, get_config())
        return self._opened(state, turn)

    def _opened(self, state: Mapping[str, Any], turn: OpenedTurn) -> dict[str, Any]:
        """The agent-state updates that open ``turn``'s attempt."""
        updates = agent_updates(turn.updates, state, self.state_keys, self._reduced)
        known = {m.id for m in turn.history}
        conversation = [
            *turn.history,
            *(m for m in turn.updates.get("messages", []) if m.id not in known),
        ]
        mark: AttemptMark = {
            "iteration": turn.iteration,
            "after": conversation[-1].id if conversation else None,
            "opened_at": time.time(),
            "sent": _sent(turn.messages, conversation),
        }
        if turn.shaping.requests:
            mark["history"] = turn.shaping.stored()
        updates["loop_iteration"] = turn.iteration
        updates["loop_attempt"] = mark
        if self.nodes.choosers:  # the choice needs each attempt's state: keep where it starts
            start = attempt_start(state, self.state_keys)
            if start is not None:
                updates["loop_attempt_start"] = start
        updates["loop_model_calls"] = Overwrite({"calls": 0, "usage": {}})
        return updates

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Make the model call as ``"iteration N: agent"``, with what the history sends."""
        mark = _mark_of(request)
        if mark is None:
            return handler(request)
        call = _calling(handler)
        traced = self.nodes.report.traced("agent", call, call)
        config = self.nodes.report.config(get_config(), mark["iteration"], "agent")
        return _counted(traced.invoke(_shaped(request, mark), config))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Make the model call as ``"iteration N: agent"`` (async)."""
        mark = _mark_of(request)
        if mark is None:
            return await handler(request)
        call = _calling(handler)
        traced = self.nodes.report.traced("agent", call, call)
        config = self.nodes.report.config(get_config(), mark["iteration"], "agent")
        return _counted(await traced.ainvoke(_shaped(request, mark), config))

    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Judge the attempt; go back to the model with the feedback, or let it end."""
        return run(self._closing(state), stepped=self._close_stepped)

    @hook_config(can_jump_to=["model"])
    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Judge the attempt (async)."""
        return await arun(self._closing(state), stepped=self._close_stepped)

    def _closing(self, state: Mapping[str, Any]) -> Program[dict[str, Any] | None]:
        mark: AttemptMark | None = state.get("loop_attempt")
        if mark is None or state.get("loop_stop_reason") is not None:
            return None  # no loop is open (the loop ended, or never opened)
        config = get_config()
        view = attempt_view(state, self.state_keys, mark)
        updates = yield from self.nodes.evaluate(view, config)
        out = agent_updates(updates, state, self.state_keys, self._reduced)
        if updates.get("stop_reason") is not None:
            return out
        after = cast(LoopState, _continued(view, updates))
        turn = yield from self.nodes.open_turn(after, config)
        for key, value in self._opened(state, turn).items():
            out[key] = [*out[key], *value] if key == "messages" and key in out else value
        out["jump_to"] = "model"
        return out


class AgentStopped(LoopControl):
    """Ends the loop when another middleware ended an attempt before its model answered.

    (``ModelCallLimitMiddleware`` or ``ToolCallLimitMiddleware`` with
    ``exit_behavior="end"`` write a note as the last AI message.) The note is never judged,
    the attempt is recorded with its ``error``, and the stop reason names the limit
    (``"model_call_limit"``, ``"tool_call_limit"``; ``"agent_stopped"`` for another).
    """

    name = "agent_stopped"
    stage = Stage.AGENT_ERRORS

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Name the error of an attempt that another middleware ended."""
        if outcome.selected is None:
            for judged in outcome.judged:
                if (judged.attempt.error or "").startswith(STOPPED):
                    outcome.error = judged.attempt.error
        return outcome

    def stop_reason(self, progress: Progress) -> str | None:
        """The limit's name (or ``"agent_stopped"``) after such an attempt."""
        error = progress.latest.get("error") or ""
        return stopped_reason(error) if error.startswith(STOPPED) else None


def _continued(view: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """The loop's view after ``evaluate``'s ``updates`` when the loop goes on."""
    # only what opening the next iteration reads changes; evaluate sets no other key of
    # it while the loop goes on (no stop reason, no new iteration)
    after = dict(view)
    after["messages"] = add_messages(view.get("messages") or [], updates.get("messages", []))
    for key in ("feedback", "records"):
        after[key] = [*(view.get(key) or []), *updates.get(key, [])]
    return after


def _refuse_given_loop_keys(state: Mapping[str, Any]) -> None:
    """Raise when the agent's input gave a loop key (a schema of the user's declares it)."""
    # a schema that declares a loop key again wins over the loop's OmitFromInput; where no
    # loop ever ran, a loop key holding a value can only have come from the input
    if state.get("loop_init_ids") is not None or state.get("loop_attempt") is not None:
        return  # a loop ran on this thread: the values are its own
    given = [name for name in OUTPUT_KEYS if state.get(name)]
    if given:
        raise ValueError(
            f"LoopMiddleware: the agent's input gives {given[0]!r}, a key of the loop's own "
            f"(its bookkeeping, in the agent's output); a state schema of yours declares it, "
            f"which lets the input set it and would have it overwritten. Rename that key "
            f"(the loop's keys all start with 'loop_')"
        )


def _refuse_outside(control: LoopControl) -> None:
    """Raise for a control that needs the agent call as one step (`create_loop_agent`)."""
    why = None
    if overrides(control, "around_agent"):
        why = "acts around the agent call (around_agent)"
    elif control.retry_policy("agent") is not None:
        why = "retries the agent call as one call (agent_retry_policy)"
    elif control.time_limit("agent") is not None:
        why = "limits the agent call as one call (agent_timeout)"
    if why is not None:
        raise ValueError(
            f"LoopMiddleware: control {control.describe()!r} ({type(control).__name__}) "
            f"{why}, which cannot apply inside one agent: inside create_agent an attempt is "
            f"the agent's own model and tool steps. Use create_loop_agent(create_agent(...), "
            f"evaluator, ..., controls=[...]) for it (or, for model calls, LangChain's "
            f"ModelRetryMiddleware and the model's own timeout)"
        )


def _check_state_keys(keys: object) -> tuple[tuple[str, ...], frozenset[str]]:
    """The state keys, and those of them stored with a reducer (see `keys_with_reducers`)."""
    if isinstance(keys, type):
        return keys_with_reducers(keys)
    names = list(keys) if isinstance(keys, Sequence) and not isinstance(keys, str) else None
    if names is None or not all(isinstance(k, str) for k in names):
        raise TypeError(
            f"state_keys must be a list of state key names (e.g. ['structured_response', "
            f"'files']) or a state schema (a TypedDict); got {type(keys).__name__} {keys!r:.60}"
        )
    # a name does not say whether the agent stores its key with a reducer (operator.add
    # would append the selected attempt's value to the current one): its schema does
    unknown = [k for k in names if k not in DEFAULT_STATE_KEYS]
    if unknown:
        raise ValueError(
            f"state_keys may not hold {unknown[0]!r} by name: by name it takes only "
            f"{', '.join(DEFAULT_STATE_KEYS)} (the loop knows how they are stored). Give other "
            f"keys as a state schema annotated as the agent's state declares them, reducer "
            f"included (e.g. class Keys(TypedDict): notes: Annotated[list[str], operator.add], "
            f"then state_keys=Keys); 'messages', 'jump_to' and the 'loop_' keys are never "
            f"state keys (they are the agent's and the loop's own)"
        )
    return tuple(names), frozenset(names) & REDUCED_BY_DEFAULT


def _calling(handler: Callable[[ModelRequest[Any]], Any]) -> Callable[..., Any]:
    """The model call ``handler`` (sync, or async: a coroutine) as a traced function."""
    return lambda request, config: handler(request)


def _mark_of(request: ModelRequest[Any]) -> AttemptMark | None:
    """The open attempt of the request's state (``None`` outside a loop)."""
    return cast(AttemptMark | None, request.state.get("loop_attempt"))


def _sent(
    messages: Sequence[AnyMessage], conversation: Sequence[AnyMessage]
) -> list[str | AnyMessage] | None:
    """What the history policy chose, as ids of the conversation's messages (all: ``None``)."""
    if [m.id for m in messages] == [m.id for m in conversation]:
        return None
    known = {m.id for m in conversation if m.id is not None}
    return [m.id if m.id in known and m.id is not None else m for m in messages]


def _shaped(request: ModelRequest[Any], mark: AttemptMark) -> ModelRequest[Any]:
    """The request with what the history policy chose, then the attempt's own messages.

    The loop's request is always sent (first, when a summary took it out of the
    conversation), and every text encodable (`encodable`); the state keeps them as they are.
    """
    sent = mark.get("sent")
    task = cast(list[AnyMessage], request.state.get("loop_init_messages") or [])
    if sent is None:
        shown = {m.id for m in request.messages}
        missing = [] if any(m.id in shown for m in task) else task
        messages = encodable([*missing, *request.messages] if missing else request.messages)
        return request if messages is request.messages else request.override(messages=messages)
    by_id = {m.id: m for m in [*task, *request.messages] if m.id is not None}
    chosen = [
        by_id[item] if isinstance(item, str) else item
        for item in sent
        if not isinstance(item, str) or item in by_id
    ]
    shaped = [*chosen, *attempt_part(request.messages, mark["after"])]
    return request.override(messages=encodable(shaped))


def _counted(response: ModelResponse[Any]) -> ExtendedModelResponse[Any]:
    """The model's response, with its call and usage counted into ``loop_model_calls``.

    The ids of the AI messages the model wrote (given one if they have none) are kept,
    so that a message another middleware writes later is told from the model's answer.
    """
    # read from the answer rather than counted by a callback handler around the call (as
    # create_loop_agent counts a chat model agent): 3% of the loop's instructions here
    # (callgrind, benchmark 8). A middleware placed after this one that calls a model of
    # its own inside the call (a tool selector) is not counted, as one placed before never was.
    answers: list[str] = []
    usage = NO_USAGE
    for message in response.result:
        if isinstance(message, AIMessage):
            if message.id is None:
                message.id = str(uuid.uuid4())
            answers.append(message.id)
            usage = usage + usage_of_answer(message)
    calls = {"calls": 1, "usage": usage.stored(), "answers": answers}
    return ExtendedModelResponse(
        model_response=response, command=Command(update={"loop_model_calls": calls})
    )


__all__ = ["AgentStopped", "LoopMiddleware", "loop_output"]
