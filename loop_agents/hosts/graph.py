r"""`create_loop_agent`: the loop as a LangGraph graph of two nodes.

```
START -> invoke_agent -> evaluate --(continue)--> invoke_agent
                                 \--(stop)------> END
```

The loop's logic is the core's (`LoopNodes`); the graph adds its state schema, storage,
retry policies, output mode and a step limit that fits the cap. ``evaluate`` routes with a
``Command``: a router after it would cost a copy of the whole state at every iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer, Command

from loop_agents.hosts.agent_step import AgentStep
from loop_agents.hosts.loop_agent import LoopAgent
from loop_agents.hosts.removed_keywords import refuse_removed_keywords
from loop_agents.loop.agents import AgentLike
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.nodes import (
    DEFAULT_MAX_ITERATIONS,
    STEPS_PER_ITERATION,
    LoopNodes,
    check_max_iterations,
    check_name,
)
from loop_agents.loop.output import OutputMode, check_output_mode, keep_final_answer, output_schema
from loop_agents.loop.protocol import (
    CallName,
    LoopControl,
    LoopSpec,
    assemble_controls,
    check_controls,
)
from loop_agents.loop.records import KeptAnswers
from loop_agents.loop.state import LoopInput, LoopState
from loop_agents.loop.storage import (
    Storage,
    StorageLayout,
    check_storage,
    resolve_storage,
    with_storage,
)
from loop_agents.runtime._function_runnable import FunctionRunnable
from loop_agents.runtime.steps import arun, run
from loop_agents.runtime.thread_locking import ConcurrentRuns
from loop_agents.runtime.time_limits import NodeName

MIN_RECURSION_LIMIT = 10_000
"""The least recursion limit a loop carries: a run's limit also applies to the graphs its
agent runs (a tool-using agent's steps). Under a caller's lower explicit limit the loop ends
cleanly with ``stop_reason="recursion_limit"``."""


@refuse_removed_keywords
def create_loop_agent(
    agent: AgentLike,
    evaluator: Evaluator,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    *,
    controls: Sequence[LoopControl] = (),
    name: str = "loop_agent",
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    output_mode: OutputMode = "full_state",
    storage: Storage = "auto",
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
    share_agent_state: bool = False,
) -> LoopAgent:
    """Build a loop agent: call ``agent``, let ``evaluator`` judge, repeat until accepted.

    The result is a `LoopAgent`: a compiled LangGraph graph (``loop.graph``) with two
    nodes, ``invoke_agent`` and ``evaluate``, whose runs check their input and hold their
    thread first. Each answer is appended to ``messages`` and judged from a `LoopContext`;
    the loop ends when the evaluator says stop or after ``max_iterations`` answers. By
    default a retry is sent the request, the answers so far and the evaluator's feedback
    on each, fenced as a review (seed 001's loop). Everything else is a control in
    ``controls=[...]`` (docs/loop-control.md), run in the order of their stage.

    It streams the agent's tokens (``stream_mode="messages"``, with ``loop_iteration`` and
    ``loop_role`` in their metadata) and loop events (``stream_mode="custom"``); each call
    is a run named ``"iteration N: agent"`` (or ``evaluator``). See docs/streaming.md.

    Args:
        agent: What produces the answers. A compiled graph with a ``messages`` key
            (e.g. ``create_agent(...)``) is given ``{"messages": [...]}``; a chat model,
            any other ``Runnable`` or a sync or async function is given the list of
            messages and may return an ``AIMessage``, a string, or a mapping with
            ``messages``. Everything it produced is appended; its last AI message is
            the answer.
        evaluator: A sync or async function of `LoopContext` returning a
            `LoopEvaluation` (``stop``, ``feedback``, optional ``score``), or a
            ready-made evaluator (``llm_judge``, ``rule``, ...).
        max_iterations: The most times the agent is called in one loop (an int >= 1;
            default 100, as seed 001 has it).
        controls: The loop's controls (`loop_agents.controls`), yours included.
        name: The graph's name (in traces, in the loop events, in a parent graph).
        checkpointer: A LangGraph checkpointer; with it a loop resumes after an error
            (``invoke(None, config)``; after a hard kill exactly with
            ``durability="sync"``), and a second run on the same thread starts a new
            loop on the same conversation.
        store: A LangGraph store for the compiled graph (``Adaptive(store="graph")``
            keeps what it learns there).
        output_mode: What the loop returns, to its caller or a parent graph:
            ``"full_state"`` (the default) every key listed under Returns;
            ``"full_history"`` ``messages`` only, the whole transcript;
            ``"last_message"`` ``messages`` only, without the loop's attempts and
            feedback, so a parent gains just the final answer.
        storage: How checkpoints store the growing keys: ``"auto"`` (the default) as
            LangGraph delta channels when the checkpointer supports them, else whole;
            ``"delta"`` or ``"full"`` force one. See `loop_agents.loop.storage`.
        concurrent_runs: When another run is in progress on the thread: ``"reject"``
            (the default) fails at once with `ThreadBusyError`; ``"wait"`` waits.
        busy_timeout: With ``"wait"``, the longest wait (seconds or a ``timedelta``;
            ``None``: as long as it takes).
        share_agent_state: As a node of a parent graph, take the parent's
            ``agent_state`` as the agent's and write the selected iteration's back
            (``False``, the default: it stays the parent's). See docs/composition.md.

    Returns:
        A `LoopAgent`. A malformed input raises `LoopInputError`, naming the field,
        before anything runs or is stored. Its output has ``messages`` (ending with
        the accepted or selected answer), ``init_messages``, ``iteration``,
        ``last_response``, ``stop``, ``feedback``, ``stop_reason``, ``records``,
        ``selected_iteration``, ``selected_score`` and ``agent_state`` (a graph
        agent's state beyond messages, the selected iteration's); with
        ``output_mode="full_history"`` or ``"last_message"``, ``messages`` only.

    Raises:
        TypeError: ``agent`` or ``evaluator`` cannot be called with one argument, an
            option or a control has the wrong type, or an unknown keyword is given.
        ValueError: ``max_iterations`` below 1, an option out of range, or controls
            that cannot work together or with this agent or evaluator (each error
            names the control and its parameter).

    Example:
        ```python
        from langchain.agents import create_agent
        from langchain_core.messages import HumanMessage
        from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
        from loop_agents.controls import AnswerSelection


        def evaluate(context: LoopContext) -> LoopEvaluation:
            text = context["last_response"].text
            if len(text) <= 280:
                return {"stop": True}
            return {"stop": False, "feedback": f"{len(text)} characters; keep it to 280."}


        loop = create_loop_agent(
            create_agent("openai:gpt-5.4-mini"), evaluate, 3, controls=[AnswerSelection("best")]
        )
        result = loop.invoke({"messages": [HumanMessage("Announce our release.")]})
        print(result["last_response"].text, result["stop_reason"])
        ```

    """
    given = check_controls(controls)
    cap = check_max_iterations(max_iterations)
    if store is not None and not isinstance(store, BaseStore):
        raise TypeError(
            f"store must be a LangGraph store (langgraph.store.base.BaseStore, e.g. "
            f"InMemoryStore()) or None; got {type(store).__name__} {store!r:.60}"
        )
    mode = check_output_mode(output_mode)
    kept = [KeptAnswers()] if mode == "last_message" else []
    parts = assemble_controls([*given, *kept], LoopSpec(agent, evaluator, cap))
    core = LoopNodes(evaluator, cap, name=check_name(name), controls=parts)
    step = AgentStep(core, agent)
    layout = resolve_storage(check_storage(storage), checkpointer)
    builder = _builder(core, step, mode, layout)
    most = max([cap, *(c.agent_calls_at_most(cap) for c in parts)])
    graph = builder.compile(checkpointer=checkpointer, store=store, name=name).with_config(
        recursion_limit=max(STEPS_PER_ITERATION * (most + 1) + 1, MIN_RECURSION_LIMIT)
    )
    return LoopAgent(
        graph,
        concurrent_runs=concurrent_runs,
        busy_timeout=busy_timeout,
        share_agent_state=share_agent_state,
    )


def _builder(
    core: LoopNodes, step: AgentStep, mode: OutputMode, layout: StorageLayout
) -> StateGraph[Any, None, Any, Any]:
    """The loop's graph, not compiled: two nodes, a static edge and the routed one."""
    builder: StateGraph[Any, None, Any, Any] = StateGraph(
        with_storage(LoopState, layout),
        input_schema=with_storage(LoopInput, layout),
        output_schema=with_storage(output_schema(mode), layout),
    )
    for node in ("invoke_agent", "evaluate"):
        # a node that makes its paid calls as LangGraph tasks retries each task, not itself
        tasks = core.stepped[node] or step.fans_out
        call: CallName = "agent" if node == "invoke_agent" else "evaluator"
        reads = core.reads(node) | ({"loop_init_ids"} if mode == "last_message" else set())
        if node == "invoke_agent" and not (step.takes_state or core.shapers or core.wrappers):
            reads -= {"agent_state"}  # nothing in the node uses it (an empty read raises)
        builder.add_node(
            node,
            _node(core, step, node, mode),
            input_schema=with_storage(LoopState, layout, keys=reads),
            retry_policy=None if tasks else core.retry_policy(call),
            destinations=("invoke_agent", END) if node == "evaluate" else None,
        )
    builder.add_edge(START, "invoke_agent")
    builder.add_edge("invoke_agent", "evaluate")
    return builder


def _node(
    core: LoopNodes, step: AgentStep, name: NodeName, mode: OutputMode
) -> FunctionRunnable[LoopState, Any]:
    """The runnable of node ``name``: its program, run by ``invoke`` or ``ainvoke``."""
    agent = name == "invoke_agent"
    program = step.invoke_agent if agent else core.evaluate
    stepped, one_answer = core.stepped[name], mode == "last_message"

    def sync(state: LoopState, config: RunnableConfig) -> Any:
        updates = run(program(state, config), stepped=stepped)
        return updates if agent else _routed(state, updates, one_answer)

    async def async_(state: LoopState, config: RunnableConfig) -> Any:
        updates = await arun(program(state, config), stepped=stepped)
        return updates if agent else _routed(state, updates, one_answer)

    return FunctionRunnable(sync, async_, name=name, trace=False)


def _routed(state: LoopState, updates: dict[str, Any], one_answer: bool) -> Command[str]:
    """The evaluate node's updates, and where the loop goes: the agent, or the end."""
    if updates.get("stop_reason") is None:
        return Command(update=updates, goto="invoke_agent")
    if one_answer:  # output_mode="last_message": the loop's messages become one answer
        updates = keep_final_answer(state, updates)
    return Command(update=updates, goto=END)


__all__ = ["DEFAULT_MAX_ITERATIONS", "MIN_RECURSION_LIMIT", "create_loop_agent"]
