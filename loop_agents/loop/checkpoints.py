"""Working with a loop's checkpoints: evaluations that are not repeated, and going back.

- `checkpointed` runs an evaluator as a LangGraph task, so its verdict is saved with
  the checkpoint: when LangGraph runs the ``evaluate`` node again (after an
  ``interrupt`` is answered, or after a later part of the evaluation failed), the saved
  verdict is used and the evaluator is not called a second time.
- `checkpoint_before_iteration` / `acheckpoint_before_iteration` find, in a thread's
  history, the checkpoint from which an iteration starts: invoking the loop from it
  (``invoke(None, snapshot.config)``) forks a new attempt from that iteration on.
"""

from __future__ import annotations

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

LoopGraph = PregelProtocol[Any, Any, Any, Any]
"""A compiled loop (what `create_loop_agent` returns)."""


def in_graph_run() -> bool:
    """Tell whether the caller runs inside a LangGraph node (so tasks can be used)."""
    try:
        return get_runtime() is not None
    except RuntimeError:  # no runnable context at all
        return False


def checkpointed(evaluator: Evaluator, *, name: str | None = None) -> Runnable[Any, Any]:
    """Make an evaluator whose verdict is saved with the checkpoint and never recomputed.

    LangGraph runs a node again from its start when an ``interrupt`` in it is answered,
    and when a failed node is resumed. Code in the evaluation before that point runs
    again; an LLM judge would be called (and paid for) twice and might change its mind.
    Wrapped with ``checkpointed``, the evaluator runs as a LangGraph task: its verdict
    is stored with the run's checkpoint and, when the node runs again, returned from
    there without a second call. Outside a graph run the evaluator is simply called.

    Args:
        evaluator: Any evaluator (sync or async function, or a Runnable).
        name: The name shown in traces and records; default: the evaluator's name.
            LangGraph finds a saved verdict by the task's name and the order of the
            calls in the node, so checkpointed evaluators that run at the same time
            (e.g. members of a ``panel``) need distinct names.

    Returns:
        An evaluator (a Runnable that works with both ``invoke`` and ``ainvoke``).

    Example:
        ```python
        from loop_agents import all_of, human_review, llm_judge
        from loop_agents.loop.checkpoints import checkpointed

        judge = llm_judge(model, "Score the haiku from 0 to 100.", threshold=75)
        # the judge's verdict is saved; answering the review does not call it again
        evaluator = all_of(checkpointed(judge), human_review())
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
        verdict: LoopEvaluation = sync_task(context).result()
        return verdict

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        if not in_graph_run():
            return await caller.ainvoke(context, config)
        verdict: LoopEvaluation = await async_task(context)
        return verdict

    wrapped = LoopEvaluatorRunnable(evaluate, afunc=aevaluate, name=label)
    wrapped.criteria = criteria_of(evaluator)
    return wrapped


# -- going back to an iteration --------------------------------------------------------


def upcoming_iteration(values: dict[str, Any]) -> int:
    """The iteration the next agent call of a checkpoint's state would make."""
    if values.get("stop_reason") is not None or not values.get("iteration"):
        return 1
    return int(values["iteration"]) + 1


def _thread_config(config: RunnableConfig) -> RunnableConfig:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise ValueError(
            "config has no thread_id; pass the config the loop ran with, e.g. "
            "{'configurable': {'thread_id': 'my-thread'}}"
        )
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        }
    }


def _checkpoint_id(config: RunnableConfig | None) -> str | None:
    if config is None:
        return None
    value = (config.get("configurable") or {}).get("checkpoint_id")
    return str(value) if value is not None else None


def _check_iteration(iteration: object) -> int:
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 1:
        raise ValueError(f"iteration must be an int >= 1; got {iteration!r}")
    return iteration


def _saver(loop: LoopGraph) -> BaseCheckpointSaver[Any]:
    saver = getattr(loop, "checkpointer", None)
    if not isinstance(saver, BaseCheckpointSaver):
        raise ValueError(
            f"the loop has no checkpointer of its own (got {saver!r}); going back to an "
            f"iteration needs the saved checkpoints: create the loop with "
            f"checkpointer=InMemorySaver() / SqliteSaver(...) / PostgresSaver(...)"
        )
    return saver


class _Search:
    """The search of `checkpoint_before_iteration`, shared by its sync and async forms.

    It walks the thread's checkpoints from the head to their parents as the saver
    stores them (no state is rebuilt for most of them) and decides from the plain
    ``iteration`` and ``stop_reason`` values which ones may start the iteration sought;
    only those are loaded as full snapshots (``get_state``), to check that the agent
    runs next. A thread stored with delta channels rebuilds a snapshot by replaying
    writes, so loading every snapshot of a long thread would take time in proportion
    to the square of its length.
    """

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration
        self.later: dict[int, list[RunnableConfig]] = {}  # other starts seen: to confirm
        self.done = False

    def wants(self, saved: CheckpointTuple) -> bool:
        """Whether ``saved`` may be what is sought (or the start of the latest loop)."""
        upcoming = upcoming_iteration(saved.checkpoint["channel_values"])
        if upcoming in (self.iteration, 1):
            return True
        self.later.setdefault(upcoming, []).append(saved.config)
        return False

    def found(self, snapshot: StateSnapshot) -> StateSnapshot | None:
        """``snapshot`` if it starts the iteration sought; notes the latest loop's start."""
        if snapshot.next != ("invoke_agent",):
            return None
        upcoming = upcoming_iteration(snapshot.values)
        if upcoming == self.iteration:
            return snapshot
        if upcoming == 1:
            self.done = True  # the start of the latest loop: older checkpoints are earlier
        return None

    def to_confirm(self) -> list[tuple[int, RunnableConfig]]:
        """Checkpoints that may start other iterations, the latest iteration first."""
        return [(n, c) for n in sorted(self.later, reverse=True) for c in self.later[n]]

    def error(self, config: RunnableConfig, latest_start: int) -> ValueError:
        thread = (config.get("configurable") or {}).get("thread_id")
        found = ", ".join(map(str, range(1, latest_start + 1))) or "none"
        return ValueError(
            f"thread {thread!r} has no checkpoint before iteration {self.iteration} in its "
            f"latest loop (checkpoints before iterations: {found}). An iteration can be "
            f"gone back to once the loop has started it; check the thread_id and the "
            f"iteration number."
        )


def checkpoint_before_iteration(
    loop: LoopGraph, config: RunnableConfig, iteration: int
) -> StateSnapshot:
    """Find the checkpoint from which ``iteration`` of the thread's latest loop starts.

    The snapshot holds the state after the earlier iterations (their answers and
    feedback) and has ``next == ("invoke_agent",)``. ``loop.invoke(None,
    snapshot.config)`` forks a new attempt from there; to change what the agent reads
    first, ``loop.update_state(snapshot.config, {"messages": [...]})`` and invoke with
    the config it returns. The thread's other checkpoints are kept. The search follows
    the branch of the thread's current checkpoint (or of ``config``'s
    ``checkpoint_id``) back to the start of its latest loop.

    Args:
        loop: The compiled loop, with a checkpointer.
        config: The config the loop ran with (``thread_id``; optionally a
            ``checkpoint_id`` to search from).
        iteration: The iteration to go back to (1 = before the first answer).

    Returns:
        The ``StateSnapshot`` before the agent call of ``iteration``.

    Raises:
        ValueError: no such checkpoint (the loop did not get that far, or the config
            names no thread).

    Example:
        ```python
        config = {"configurable": {"thread_id": "t1"}}
        loop.invoke({"messages": [HumanMessage("Write a haiku.")]}, config)
        snapshot = checkpoint_before_iteration(loop, config, 2)
        fork = loop.update_state(snapshot.config, {"messages": [HumanMessage("Use rain.")]})
        result = loop.invoke(None, fork)  # iterations 2.. again, on a new branch
        ```

    """
    iteration = _check_iteration(iteration)
    thread = _thread_config(config)
    saver = _saver(loop)
    search = _Search(iteration)
    saved = saver.get_tuple(config if _checkpoint_id(config) else thread)
    started = saved is not None
    while saved is not None and not search.done:
        if search.wants(saved) and (found := search.found(loop.get_state(saved.config))):
            return found
        saved = saver.get_tuple(saved.parent_config) if saved.parent_config else None
    latest = 1 if started and search.done else 0
    for number, candidate in search.to_confirm():
        if number > latest and loop.get_state(candidate).next == ("invoke_agent",):
            latest = number
            break
    raise search.error(config, latest)


async def acheckpoint_before_iteration(
    loop: LoopGraph, config: RunnableConfig, iteration: int
) -> StateSnapshot:
    """Async form of `checkpoint_before_iteration`, for async checkpointers.

    Example:
        ```python
        snapshot = await acheckpoint_before_iteration(loop, config, 2)
        result = await loop.ainvoke(None, snapshot.config)
        ```

    """
    iteration = _check_iteration(iteration)
    thread = _thread_config(config)
    saver = _saver(loop)
    search = _Search(iteration)
    saved = await saver.aget_tuple(config if _checkpoint_id(config) else thread)
    started = saved is not None
    while saved is not None and not search.done:
        if search.wants(saved) and (found := search.found(await loop.aget_state(saved.config))):
            return found
        saved = await saver.aget_tuple(saved.parent_config) if saved.parent_config else None
    latest = 1 if started and search.done else 0
    for number, candidate in search.to_confirm():
        if number > latest and (await loop.aget_state(candidate)).next == ("invoke_agent",):
            latest = number
            break
    raise search.error(config, latest)
