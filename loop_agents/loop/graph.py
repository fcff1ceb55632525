r"""The loop's graph: two nodes, compiled with a step limit that fits the cap.

```
START -> invoke_agent -> evaluate --(continue)--> invoke_agent
                                 \--(stop)------> END
```

The ``evaluate`` node routes the loop itself: it returns a LangGraph ``Command`` whose
``goto`` is ``invoke_agent``, or the end once the loop has a stop reason (declared with
``destinations``, so the drawing shows both edges). A router after the node would cost
LangGraph a copy of the whole state at every iteration.

`compile_loop` builds it from the agent, the evaluator, the cap and the controls
(`create_loop_agent` is its shorthand) and returns the compiled graph in a `LoopAgent`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from loop_agents.loop.agents import AgentLike
from loop_agents.loop.controls.base import LoopControl
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.loop_agent import LoopAgent
from loop_agents.loop.nodes import STEPS_PER_ITERATION, LoopNodes
from loop_agents.loop.output import OutputMode, check_output_mode, output_schema
from loop_agents.loop.state import LoopInput, LoopState
from loop_agents.loop.storage import Storage, check_storage, resolve_storage, with_storage
from loop_agents.loop.thread_locking import ConcurrentRuns

MIN_RECURSION_LIMIT = 10_000
"""The least recursion limit a loop carries.

The limit in a run's config also applies to graphs the agent runs (a ``create_agent``
agent's model and tool steps); a limit sized to the loop alone would cut a tool-using
agent short. Under a caller's lower explicit limit the loop ends cleanly with
``stop_reason="recursion_limit"``."""


def check_max_iterations(max_iterations: object) -> int:
    """Validate the cap: an int >= 1."""
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
        raise TypeError(
            f"max_iterations must be an int >= 1; got {type(max_iterations).__name__} "
            f"{max_iterations!r}"
        )
    if max_iterations < 1:
        raise ValueError(
            f"max_iterations must be >= 1 (the agent is called at least once); got {max_iterations}"
        )
    return max_iterations


def check_name(name: object) -> str:
    """Validate the graph's name: a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(
            f"name must be a non-empty string (the loop's name in traces, events and a "
            f"parent graph); got {type(name).__name__} {name!r:.60}"
        )
    return name


def check_controls(controls: object) -> list[LoopControl]:
    """Validate ``controls=``: a sequence of `LoopControl` objects."""
    if isinstance(controls, LoopControl):
        controls = [controls]
    if isinstance(controls, str | bytes) or not isinstance(controls, Sequence):
        raise TypeError(
            f"controls must be a list of LoopControl objects (see "
            f"loop_agents.loop.controls); got {type(controls).__name__} {controls!r:.60}"
        )
    wrong = [c for c in controls if not isinstance(c, LoopControl)]
    if wrong:
        raise TypeError(
            f"controls must hold LoopControl objects (subclass "
            f"loop_agents.loop.controls.LoopControl); got {type(wrong[0]).__name__} "
            f"{wrong[0]!r:.60}"
        )
    return list(controls)


def compile_loop(
    agent: AgentLike,
    evaluator: Evaluator,
    max_iterations: int,
    controls: Sequence[LoopControl],
    *,
    name: str = "loop_agent",
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    output_mode: OutputMode = "full_state",
    storage: Storage = "auto",
    concurrent_runs: ConcurrentRuns = "reject",
    busy_timeout: float | timedelta | None = None,
    share_agent_state: bool = False,
) -> LoopAgent:
    """Build and compile the loop's graph from its parts.

    Args:
        agent: What produces the answers.
        evaluator: What judges them.
        max_iterations: The most agent calls in one loop.
        controls: The controls, in the order their hooks run.
        name: The graph's name.
        checkpointer: A LangGraph checkpointer.
        store: A LangGraph store.
        output_mode: What the loop returns (see `loop_agents.loop.output`).
        storage: How checkpoints store the append-only keys (`loop_agents.loop.storage`).
        concurrent_runs: What a run does while another holds its thread.
        busy_timeout: How long ``"wait"`` waits.
        share_agent_state: Nested in a parent graph, take the parent's ``agent_state``
            and write the loop's back to it (see `LoopAgent`).

    Returns:
        The compiled graph in a `LoopAgent`.

    Example:
        ```python
        loop = compile_loop(agent, judge, 5, [Plateau(2)], checkpointer=InMemorySaver())
        ```

    """
    cap = check_max_iterations(max_iterations)
    if store is not None and not isinstance(store, BaseStore):
        raise TypeError(
            f"store must be a LangGraph store (langgraph.store.base.BaseStore, e.g. "
            f"InMemoryStore()) or None; got {type(store).__name__} {store!r:.60}"
        )
    mode = check_output_mode(output_mode)
    parts = check_controls(controls)
    nodes = LoopNodes(
        agent, evaluator, cap, name=check_name(name), controls=parts, output_mode=mode
    )
    layout = resolve_storage(check_storage(storage), checkpointer)
    builder: StateGraph[Any, None, Any, Any] = StateGraph(
        with_storage(LoopState, layout),
        input_schema=with_storage(LoopInput, layout),
        output_schema=with_storage(output_schema(mode), layout),
    )
    for node in ("invoke_agent", "evaluate"):
        builder.add_node(
            node,
            nodes.node(node),
            input_schema=with_storage(LoopState, layout, keys=nodes.reads(node)),
            retry_policy=nodes.node_retry(node),
            destinations=("invoke_agent", END) if node == "evaluate" else None,
        )
    builder.add_edge(START, "invoke_agent")
    builder.add_edge("invoke_agent", "evaluate")
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
