"""Ctrl-C during a run: stop within a bound, with every completed step on disk.

`CtrlC` takes over SIGINT while a run's event loop runs. The first Ctrl-C cancels the
run (the model call in flight is abandoned; completed steps were already saved, since
the loop runs with ``durability="sync"``); if the run has not wound down after
``grace`` seconds (a library that does not let go of a cancelled request), or on a
second Ctrl-C, ``on_exit`` is called and the process ends with status 130 at once.

`ShieldedSqliteSaver` makes the saver's writes run to their end when the run is
cancelled in the middle of one, so that a step that completed is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

GRACE_SECONDS = 0.5
"""How long a cancelled run may take to wind down before the process exits anyway."""

EXIT_STATUS = 130
"""128 + SIGINT, as shells report a command ended by Ctrl-C."""


class CtrlC:
    """SIGINT handling for one run (install it from inside the run's event loop).

    Args:
        on_exit: Called before the process exits without winding down (it should
            record and print that the run was interrupted).
        grace: Seconds between the first Ctrl-C and that exit.

    Example:
        ```python
        ctrl_c = CtrlC(lambda: print("interrupted"))
        ctrl_c.install()  # in the coroutine that runs the loop
        ```
    """

    def __init__(self, on_exit: Callable[[], None], *, grace: float = GRACE_SECONDS) -> None:
        self.on_exit = on_exit
        self.grace = grace
        self.pressed = 0
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        """Handle SIGINT in the running loop (unless SIGINT is ignored, e.g. ``cmd &``)."""
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            self._loop.add_signal_handler(signal.SIGINT, self._pressed)

    def _pressed(self) -> None:
        self.pressed += 1
        if self.pressed > 1 or self._task is None or self._loop is None:
            self.exit_now()
            return
        self._task.cancel()
        self._loop.call_later(self.grace, self.exit_now)

    def exit_now(self) -> None:
        """Call ``on_exit`` and end the process with status 130."""
        try:
            self.on_exit()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(EXIT_STATUS)


class ShieldedSqliteSaver(AsyncSqliteSaver):
    """LangGraph's ``AsyncSqliteSaver`` whose writes finish even if the run is cancelled.

    A cancelled caller stops waiting, the write goes on; `drain` waits for the writes
    still going (call it before the connection closes).

    Example:
        ```python
        async with ShieldedSqliteSaver.from_conn_string("runs.sqlite") as saver:
            try:
                ...
            finally:
                await saver.drain()
        ```
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
