"""Working with a loop's checkpoints: evaluations that are not repeated, and going back.

`checkpointed` saves an evaluator's verdict with the checkpoint, so a node run again (an
answered ``interrupt``, a resume) does not call it twice; `checkpoint_before_iteration`
finds the checkpoint an iteration starts from, to fork from it (``docs/durability.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.config import get_config
from langgraph.func import task
from langgraph.pregel.protocol import PregelProtocol
from langgraph.runtime import get_runtime
from langgraph.types import StateSnapshot

from loop_agents.loop.evaluation import (
    Evaluator,
    EvaluatorCaller,
    LoopEvaluatorRunnable,
    criteria_of,
)
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.steps import Call, Program, arun, run

LoopGraph = PregelProtocol[Any, Any, Any, Any]
"""A compiled loop (what `create_loop_agent` returns)."""


def in_graph_run() -> bool:
    """Tell whether the caller runs inside a LangGraph node (so tasks can be used)."""
    try:
        return get_runtime() is not None
    except RuntimeError:  # no runnable context at all
        return False


def checkpointed(evaluator: Evaluator, *, name: str | None = None) -> Runnable[Any, Any]:
    """An evaluator whose verdict is saved with the checkpoint and never recomputed.

    It runs as a LangGraph task, so when LangGraph runs the node again its saved verdict
    is returned without a second call; outside a graph run the evaluator is just called.

    Args:
        evaluator: Any evaluator (sync or async function, or a Runnable).
        name: The task's name in traces (default: the evaluator's). LangGraph finds a
            saved verdict by name and call order, so checkpointed evaluators that run
            at the same time (members of a ``panel``) need distinct names.

    Example:
        ```python
        evaluator = all_of(checkpointed(judge), human_review())  # one judge call an answer
        ```
    """
    return checkpointed_caller(EvaluatorCaller(evaluator), name=name)


def checkpointed_caller(caller: EvaluatorCaller, *, name: str | None = None) -> Runnable[Any, Any]:
    """`checkpointed` for an evaluator already wrapped (and so checked) as ``caller``."""
    evaluator = caller.evaluator
    label = name or caller.name

    def run_sync(context: LoopContext) -> LoopEvaluation:
        return caller.invoke(context, get_config())

    async def run_async(context: LoopContext) -> LoopEvaluation:
        return await caller.ainvoke(context, get_config())

    run_sync.__name__ = run_async.__name__ = label  # the tasks' names in traces
    sync_task = task(run_sync)
    async_task = task(run_async)

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if not in_graph_run():
            return caller.invoke(context, config)
        return sync_task(context).result()

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if not in_graph_run():
            return await caller.ainvoke(context, config)
        verdict: LoopEvaluation = await async_task(context)
        return verdict

    wrapped = LoopEvaluatorRunnable(evaluate, afunc=aevaluate, name=label)
    wrapped.criteria = criteria_of(evaluator)
    return wrapped


def upcoming_iteration(values: dict[str, Any]) -> int:
    """The iteration the next agent call of a checkpoint's state would make."""
    if values.get("stop_reason") is not None or not values.get("iteration"):
        return 1
    return int(values["iteration"]) + 1


def checkpoint_before_iteration(
    loop: LoopGraph, config: RunnableConfig, iteration: int
) -> StateSnapshot:
    """The checkpoint from which ``iteration`` of the thread's latest loop starts.

    Its state holds the earlier iterations; ``loop.invoke(None, snapshot.config)`` forks
    a new attempt from there (the thread's other checkpoints are kept). The search
    follows the branch of the thread's current checkpoint, or of ``config``'s
    ``checkpoint_id``.

    Args:
        loop: The compiled loop, with a checkpointer.
        config: The config the loop ran with (``thread_id``, optionally ``checkpoint_id``).
        iteration: The iteration to go back to (1 = before the first answer).

    Raises:
        ValueError: no such checkpoint, no thread, or no checkpointer.

    Example:
        ```python
        snapshot = checkpoint_before_iteration(loop, config, 2)
        fork = loop.update_state(snapshot.config, {"messages": [HumanMessage("Use rain.")]})
        result = loop.invoke(None, fork)  # iterations 2.. again, on a new branch
        ```
    """
    return run(_search(loop, config, iteration))


async def acheckpoint_before_iteration(
    loop: LoopGraph, config: RunnableConfig, iteration: int
) -> StateSnapshot:
    """Async form of `checkpoint_before_iteration`, for async checkpointers.

    Example:
        ```python
        snapshot = await acheckpoint_before_iteration(loop, config, 2)
        ```
    """
    return await arun(_search(loop, config, iteration))


def _search(loop: LoopGraph, config: RunnableConfig, iteration: int) -> Program[StateSnapshot]:
    """The search, written once for `run` and `arun`: checked now, it then yields its reads."""
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 1:
        raise ValueError(f"iteration must be an int >= 1; got {iteration!r}")
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise ValueError(
            "config has no thread_id; pass the config the loop ran with, e.g. "
            "{'configurable': {'thread_id': 'my-thread'}}"
        )
    if configurable.get("checkpoint_id") is None:
        ns = configurable.get("checkpoint_ns", "")
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    saver = _saver(loop)
    reads: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
        "saved": (lambda c, _: saver.get_tuple(c), lambda c, _: saver.aget_tuple(c)),
        "state": (lambda c, _: loop.get_state(c), lambda c, _: loop.aget_state(c)),
    }
    return _walk(lambda kind, at: Call(kind, *reads[kind], at, {}), config, thread_id, iteration)


def _walk(
    read: Callable[[str, RunnableConfig], Call],
    config: RunnableConfig,
    thread_id: object,
    iteration: int,
) -> Program[StateSnapshot]:
    # from the head to the parents as stored; a full snapshot (which delta storage
    # rebuilds by replaying writes) is loaded only where the plain `iteration` and
    # `stop_reason` say the checkpoint may start the iteration sought
    later: dict[int, list[RunnableConfig]] = {}  # other iterations' starts, to confirm
    done = False  # the start of the latest loop was seen: older checkpoints are earlier
    saved: CheckpointTuple | None = (yield read("saved", config)).value
    started = saved is not None
    while saved is not None and not done:
        upcoming = upcoming_iteration(saved.checkpoint["channel_values"])
        if upcoming in (iteration, 1):
            snapshot: StateSnapshot = (yield read("state", saved.config)).value
            if snapshot.next == ("invoke_agent",):
                if upcoming_iteration(snapshot.values) == iteration:
                    return snapshot
                done = upcoming_iteration(snapshot.values) == 1
        else:
            later.setdefault(upcoming, []).append(saved.config)
        if saved.parent_config is None:
            break
        saved = (yield read("saved", saved.parent_config)).value
    latest = 1 if started and done else 0
    for number in sorted(later, reverse=True):
        for candidate in later[number] if number > latest else ():
            if (yield read("state", candidate)).value.next == ("invoke_agent",):
                latest = number
                break
    found = ", ".join(map(str, range(1, latest + 1))) or "none"
    raise ValueError(
        f"thread {thread_id!r} has no checkpoint before iteration {iteration} in its "
        f"latest loop (checkpoints before iterations: {found}). An iteration can be "
        f"gone back to once the loop has started it; check the thread_id and the "
        f"iteration number."
    )


def _saver(loop: LoopGraph) -> BaseCheckpointSaver[Any]:
    saver = getattr(loop, "checkpointer", None)
    if not isinstance(saver, BaseCheckpointSaver):
        raise ValueError(
            f"the loop has no checkpointer of its own (got {saver!r}); going back to an "
            f"iteration needs the saved checkpoints: create the loop with "
            f"checkpointer=InMemorySaver() / SqliteSaver(...) / PostgresSaver(...)"
        )
    return saver
