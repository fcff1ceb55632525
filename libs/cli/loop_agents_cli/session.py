"""Running a saved loop: stream it, keep its index up to date, read back what it did.

`run_session` drives the loop with ``durability="sync"`` (every completed step is on disk
before the next starts), so Ctrl-C or a failure loses nothing that was paid for: the
caller reads the state back, prints the result so far, and ``resume`` goes on from the
last completed step. A failure becomes a one-line error in the `Outcome`; Ctrl-C
(``asyncio`` cancels the run) is left to propagate.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import StreamMode

from loop_agents.hosts.middleware import loop_output
from loop_agents.loop.events import LoopEvent, is_loop_event
from loop_agents_cli.console.loop_console import LoopConsole
from loop_agents_cli.failures import context_overflow, describe_error, failure_reason
from loop_agents_cli.interrupt import CtrlC
from loop_agents_cli.loop import RunGraph, build_loop
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.spec import RunSpec
from loop_agents_cli.store import RunStore
from loop_agents_cli.store_errors import is_disk_full

__all__ = ["Outcome", "Progress", "checkpointer", "describe_error", "run_session", "stream_loop"]


@dataclass
class Progress:
    """What the run has done so far, from its loop events (for the index and messages)."""

    iterations: int = 0
    best_score: float | None = None
    stop_reason: str | None = None
    started_at_iteration: int = 1
    scores: list[float | None] = field(default_factory=list)

    def take(self, event: LoopEvent) -> bool:
        """Note ``event``; say whether the index should be updated."""
        if event["type"] == "evaluation_finished":
            self.iterations = event["iteration"]
            score = event["score"]
            if score is not None and (self.best_score is None or score > self.best_score):
                self.best_score = score
            return True
        if event["type"] == "loop_finished":
            self.stop_reason = event["stop_reason"]
            self.iterations = event["iterations"]
            return True
        return False


@dataclass
class Outcome:
    """How a session ended: the loop's state, and the error that stopped it, if any."""

    values: dict[str, Any]
    error: str | None = None
    failure: str | None = None
    store_error: BaseException | None = None
    """A write to (or read of) the runs file that failed: a full disk, a lock, damage."""
    resumable: bool = True
    """Whether a resume could go on (not for a prompt over the model's context)."""

    @property
    def finished(self) -> bool:
        """Whether the loop reached its end (a stop reason of its own)."""
        return self.error is None and self.values.get("stop_reason") is not None


@contextlib.asynccontextmanager
async def checkpointer(store: RunStore | None) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The store's SQLite saver, or an in-memory one for a run that is not saved."""
    if store is None:
        yield InMemorySaver()
        return
    async with store.checkpointer() as saver:
        yield saver


async def run_session(
    spec: RunSpec,
    endpoint: Endpoint,
    *,
    store: RunStore | None,
    run_id: str,
    view: LoopConsole | None,
    progress: Progress,
    resuming: bool = False,
    say: Callable[[str], None] = lambda line: None,
    ctrl_c: CtrlC | None = None,
) -> Outcome:
    """Run (or resume) the loop of ``spec`` on thread ``run_id``; return how it ended.

    Args:
        spec: The run's settings.
        endpoint: The opened endpoint.
        store: Where the run is saved; ``None`` for an unsaved run (kept in memory).
        run_id: The run's id, its thread.
        view: The console to stream to, or ``None`` (``--json``).
        progress: Filled in from the loop's events; the index is updated from it.
        resuming: Continue the saved thread instead of starting on the task.
        say: Prints a line of news (e.g. where a resumed run goes on from).
        ctrl_c: Takes over SIGINT while the loop runs (see `CtrlC`).

    Example:
        ```python
        outcome = await run_session(spec, endpoint, store=store, run_id=run_id,
                                    view=LoopConsole(), progress=Progress())
        ```
    """
    config: RunnableConfig = {"configurable": {"thread_id": run_id}}
    if ctrl_c is not None:
        ctrl_c.install()
    async with checkpointer(store) as saver:
        loop = build_loop(spec, endpoint, checkpointer=saver)
        request: Any = {"messages": [HumanMessage(spec.task)]}
        if resuming:
            snapshot = await loop.aget_state(config)
            values = loop_output(snapshot.values)
            if values and not snapshot.next:  # it had finished after all
                return Outcome(values)
            if values or snapshot.next:
                request = None  # go on from the last completed step
                records = list(values.get("records") or [])
                progress.iterations = len(records)
                progress.started_at_iteration = len(records) + 1
                pending = _unjudged_answer(values, len(records))
                done = f"{len(records)} of {spec.max_iterations} iterations were done"
                if pending is None:
                    say(f"resuming run {run_id}: {done}; going on from the last completed step")
                else:
                    say(
                        f"resuming run {run_id}: {done}; the answer of iteration {pending[0]} "
                        f"is saved and is judged now"
                    )
                if view is not None:
                    view.restore(records, spec.max_iterations)
                    if pending is not None:  # with its saved agent call's figures
                        run = snapshot.values.get("agent_run") or {}
                        view.show_saved_answer(
                            *pending,
                            seconds=float(run.get("seconds", 0.0)),
                            tokens=int(run.get("input_tokens", 0))
                            + int(run.get("output_tokens", 0)),
                        )

        async def on_event(event: LoopEvent) -> None:
            if progress.take(event):
                await _save_progress(store, saver, run_id, progress)

        return await stream_loop(
            loop, request, config, endpoint=endpoint, view=view, on_event=on_event
        )


async def stream_loop(
    loop: RunGraph,
    request: Any,
    config: RunnableConfig,
    *,
    endpoint: Endpoint,
    view: LoopConsole | None,
    on_event: Callable[[LoopEvent], Awaitable[None]] | None = None,
) -> Outcome:
    """Stream ``loop`` (it needs a checkpointer) to ``view``; return how it ended.

    The loop runs with ``durability="sync"``. A failure mid-run does not propagate: it
    becomes the `Outcome`'s one-line ``error`` (see `describe_error`) and ``failure``
    (``judge_invalid`` or ``error``), and the state read back holds every completed
    step. Ctrl-C (a cancellation) propagates.

    Args:
        loop: A compiled loop with a checkpointer (or an agent with the loop inside: its
            state is read back in the loop's form, `loop_output`).
        request: The loop's input, or ``None`` to go on from the last completed step.
        config: The run's config, with its thread id.
        endpoint: The endpoint, named in errors.
        view: The console to stream to, or ``None`` (loop events only).
        on_event: Awaited with each loop event (e.g. to save progress).

    Example:
        ```python
        outcome = await stream_loop(loop, {"messages": [HumanMessage("Hi")]}, config,
                                    endpoint=endpoint, view=LoopConsole())
        ```
    """
    modes: list[StreamMode] = ["messages", "custom"] if view is not None else ["custom"]
    error: str | None = None
    failure: str | None = None
    resumable = True
    try:
        async for _namespace, mode, payload in loop.astream(
            request, config, stream_mode=modes, subgraphs=True, durability="sync"
        ):
            if view is not None:
                view.handle(mode, payload)
            if mode == "custom" and is_loop_event(payload) and on_event is not None:
                await on_event(payload)
    except Exception as exc:  # a failure mid-run: the result so far is still printed
        if isinstance(exc, sqlite3.Error) or is_disk_full(exc):
            store_error: BaseException | None = exc
        else:
            store_error = None
            error = describe_error(exc, endpoint)
            failure = failure_reason(exc)
            resumable = context_overflow(exc) is None
    else:
        store_error = None
    finally:
        if view is not None:
            view.close()
    try:
        snapshot = await loop.aget_state(config)
    except sqlite3.Error as exc:
        return Outcome({}, error, failure, store_error or exc, resumable)
    return Outcome(loop_output(snapshot.values), error, failure, store_error, resumable)


def _unjudged_answer(values: dict[str, Any], judged: int) -> tuple[int, str] | None:
    """The iteration and text of an answer that was saved but not judged, if any."""
    iteration = int(values.get("iteration") or 0)
    last = values.get("last_response")
    if iteration > judged and last is not None and values.get("stop_reason") is None:
        return iteration, str(getattr(last, "text", ""))
    return None


async def _save_progress(
    store: RunStore | None, saver: BaseCheckpointSaver[Any], run_id: str, progress: Progress
) -> None:
    if store is not None and isinstance(saver, AsyncSqliteSaver):
        await store.aupdate(
            saver,
            run_id,
            iterations=progress.iterations,
            best_score=progress.best_score,
            stop_reason=progress.stop_reason,
        )
