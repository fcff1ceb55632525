"""Running a saved loop: stream it, keep its index up to date, read back what it did.

The loop runs with ``durability="sync"``: every completed step is on disk before the
next starts, so after Ctrl-C or a failure the state read back holds all that was paid
for, and ``resume`` goes on from the last completed step.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
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
from loop_agents_cli.errors import judge_switches
from loop_agents_cli.failures import Failure, explain
from loop_agents_cli.interrupt import CtrlC
from loop_agents_cli.loop import RunGraph, build_loop
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.spec import RunSpec
from loop_agents_cli.store import RunStore
from loop_agents_cli.store_errors import is_disk_full


@dataclass
class Progress:
    """What the run has done so far, from its loop events (for the index and messages)."""

    iterations: int = 0
    best_score: float | None = None
    stop_reason: str | None = None

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
    """How a session ended: the loop's state, and what stopped it, if anything did.

    Attributes:
        values: The loop's state, read back.
        failure: Why the run failed (``None`` when the loop ran).
        store_error: A write to (or read of) the runs file that failed.
    """

    values: dict[str, Any]
    failure: Failure | None = None
    store_error: BaseException | None = None

    @property
    def finished(self) -> bool:
        """Whether the loop reached its end (a stop reason of its own)."""
        return self.failure is None and self.values.get("stop_reason") is not None


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
    fix: Callable[[str], str] = lambda method: f"--structured-output {method}",
    ctrl_c: CtrlC | None = None,
) -> Outcome:
    """Run (or, ``resuming``, go on with) the loop of ``spec`` on thread ``run_id``.

    ``say`` prints news; ``fix(method)`` tells how to ask the judge's server for ``method``
    (`judge_switches`); ``ctrl_c`` takes SIGINT over; ``progress`` follows the loop's events.
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
                _say_resumed(spec, run_id, snapshot.values, values, view, progress, say)

        async def on_event(event: LoopEvent) -> None:
            if progress.take(event) and store is not None and isinstance(saver, AsyncSqliteSaver):
                await store.aupdate(
                    saver,
                    run_id,
                    iterations=progress.iterations,
                    best_score=progress.best_score,
                    stop_reason=progress.stop_reason,
                )

        with judge_switches(say, fix):
            return await stream_loop(
                loop, request, config, endpoint=endpoint, view=view, on_event=on_event
            )


def _say_resumed(
    spec: RunSpec,
    run_id: str,
    state: dict[str, Any],
    values: dict[str, Any],
    view: LoopConsole | None,
    progress: Progress,
    say: Callable[[str], None],
) -> None:
    """Say where a resumed run goes on from; show what the console would have shown."""
    records = list(values.get("records") or [])
    progress.iterations = len(records)
    done = f"{len(records)} of {spec.max_iterations} iterations were done"
    iteration, last = int(values.get("iteration") or 0), values.get("last_response")
    pending = iteration > len(records) and last is not None and values.get("stop_reason") is None
    if pending:
        say(
            f"resuming run {run_id}: {done}; the answer of iteration {iteration} is saved "
            f"and is judged now"
        )
    else:
        say(f"resuming run {run_id}: {done}; going on from the last completed step")
    if view is None:
        return
    view.restore(records, spec.max_iterations)
    if pending:  # with its saved agent call's figures
        run = state.get("agent_run") or {}
        tokens = int(run.get("input_tokens", 0)) + int(run.get("output_tokens", 0))
        view.show_saved_answer(
            iteration,
            str(getattr(last, "text", "")),
            seconds=float(run.get("seconds", 0.0)),
            tokens=tokens,
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

    A failure mid-run becomes the `Outcome`'s `Failure` (`explain`), with the state read back;
    Ctrl-C propagates. ``request`` ``None`` goes on from the last completed step.
    """
    modes: list[StreamMode] = ["messages", "custom"] if view is not None else ["custom"]
    failure: Failure | None = None
    store_error: BaseException | None = None
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
            store_error = exc
        else:
            failure = explain(exc, endpoint)
    finally:
        if view is not None:
            view.close()
    try:
        snapshot = await loop.aget_state(config)
    except sqlite3.Error as exc:
        return Outcome({}, failure, store_error or exc)
    return Outcome(loop_output(snapshot.values), failure, store_error)
