"""Ctrl-C during a run: the process ends within a bound, with every completed step on disk.

The first Ctrl-C (or SIGTERM) cancels the run: completed steps are on disk already
(``durability="sync"``), a checkpoint write in progress gets `GRACE_SECONDS`. Then the
interruption is reported, the bundled servers are killed and the process ends at once,
without the interpreter's slow exit (measured: 1.1-1.6 s of it at a load of 16 on 2
cores). `DEADLINE_SECONDS` after the first Ctrl-C it ends whatever is still winding
down; a second Ctrl-C ends it at once. Figures: docs/cli.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

if TYPE_CHECKING:
    from loop_agents_cli.models.endpoints import Endpoint

GRACE_SECONDS = 0.5
"""How long a cancelled run's checkpoint writes may take to finish (`ShieldedSqliteSaver`)."""

DEADLINE_SECONDS = 1.0
"""How long after the first Ctrl-C the process ends, whatever is still winding down."""

EXIT_STATUS = 130
"""128 + SIGINT, as shells report a command ended by Ctrl-C (143 = 128 + SIGTERM)."""

T = TypeVar("T")


class CtrlC:
    """SIGINT and SIGTERM handling for one run (`install` it from inside the run's event loop).

    ``on_exit`` records and prints the interruption (once); ``deadline``: seconds from the
    first Ctrl-C to the end of the process.
    """

    def __init__(self, on_exit: Callable[[], None], *, deadline: float = DEADLINE_SECONDS) -> None:
        self.on_exit = on_exit
        self.deadline = deadline
        self.pressed = 0
        self.exit_status = EXIT_STATUS
        self.endpoint: Endpoint | None = None
        """The endpoint whose bundled servers are killed on the way out."""
        self._task: asyncio.Task[Any] | None = None
        self._reported = False
        self._lock = threading.Lock()

    def install(self) -> None:
        """Handle SIGINT and SIGTERM in the running loop (an ignored one stays ignored)."""
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for number in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(number) is signal.SIG_IGN:  # `cmd &` in a script
                continue
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(number, self._pressed, number)

    def _pressed(self, number: int = signal.SIGINT) -> None:
        self.pressed += 1
        if self.pressed > 1 or self._task is None:
            self.exit_now()
        self.exit_status = 128 + number
        # a thread of its own: it fires even if the event loop is stuck
        threading.Timer(self.deadline, self.exit_now).start()
        self._task.cancel()

    def report(self) -> None:
        """Call ``on_exit``, unless it was called already."""
        with self._lock:
            if not self._reported:
                self._reported = True
                self.on_exit()

    def exit_now(self) -> NoReturn:
        """`report`, kill the bundled servers, end the process with `exit_status` at once."""
        try:
            self.report()
            if self.endpoint is not None:
                stop_servers_now(self.endpoint)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(self.exit_status)


def stop_servers_now(endpoint: Endpoint) -> None:
    """Kill the bundled llama.cpp server's processes of ``endpoint`` without waiting.

    After Ctrl-C the answer a server is writing is abandoned: no graceful stop.

    Example:
        ```python
        stop_servers_now(endpoint)  # then endpoint.close() returns at once
        ```
    """
    servers = endpoint.servers
    for server in (servers.agent, servers.judge) if servers is not None else ():
        if server.process is not None and server.process.poll() is None:
            with contextlib.suppress(OSError):
                server.process.kill()


def run_interruptible(main: Coroutine[Any, Any, T], ctrl_c: CtrlC, endpoint: Endpoint) -> T:
    """``asyncio.run(main)``; after Ctrl-C the process ends, reported and cleaned up.

    ``main`` installs ``ctrl_c`` when it starts; a Ctrl-C before that (a plain
    ``KeyboardInterrupt``) ends it the same way.

    Example:
        ```python
        outcome = run_interruptible(run_session(...), ctrl_c, endpoint)
        ```
    """
    ctrl_c.endpoint = endpoint
    try:
        return asyncio.run(main)
    except (KeyboardInterrupt, asyncio.CancelledError):
        ctrl_c.report()
        stop_servers_now(endpoint)
        endpoint.close()  # the servers' log folders go
        ctrl_c.exit_now()


class ShieldedSqliteSaver(AsyncSqliteSaver):
    """LangGraph's ``AsyncSqliteSaver`` whose writes finish even if the run is cancelled.

    Call `drain` before the connection closes.
    """

    _pending: set[asyncio.Future[Any]]

    async def _shielded(self, write: Any) -> Any:
        if not hasattr(self, "_pending"):
            self._pending = set()
        future = asyncio.ensure_future(write)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return await asyncio.shield(future)

    async def drain(self, timeout: float = GRACE_SECONDS) -> None:
        """Wait (at most ``timeout`` seconds) for the writes that are still going."""
        pending = list(getattr(self, "_pending", ()))
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint; a cancellation waits for the write to end."""
        saved: RunnableConfig = await self._shielded(
            super().aput(config, checkpoint, metadata, new_versions)
        )
        return saved

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Save a task's writes; a cancellation waits for the write to end."""
        await self._shielded(super().aput_writes(config, writes, task_id, task_path))
