"""Ctrl-C during a run: stop within a bound, with every completed step on disk.

`CtrlC` takes over SIGINT (and SIGTERM, e.g. from ``timeout``) while a run's event loop
runs. The first Ctrl-C cancels the
run (the model call in flight is abandoned; completed steps were already saved, since
the loop runs with ``durability="sync"``); if the run has not wound down after
``grace`` seconds (a library that does not let go of a cancelled request), or on a
second Ctrl-C, ``on_exit`` is called and the process ends at once, with status 130
(143 after SIGTERM).

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
"""128 + SIGINT, as shells report a command ended by Ctrl-C (143 = 128 + SIGTERM)."""


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
        self.exit_status = EXIT_STATUS
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        """Handle SIGINT and SIGTERM in the running loop.

        A signal that is ignored stays ignored (as SIGINT is for ``cmd &`` in a script).
        """
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for number in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(number) is signal.SIG_IGN:
                continue
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.add_signal_handler(number, self._pressed, number)

    def _pressed(self, number: int = signal.SIGINT) -> None:
        self.pressed += 1
        if self.pressed == 1:
            self.exit_status = 128 + number
        if self.pressed > 1 or self._task is None or self._loop is None:
            self.exit_now()
            return
        self._task.cancel()
        self._loop.call_later(self.grace, self.exit_now)

    def exit_now(self) -> None:
        """Call ``on_exit`` and end the process with `exit_status` (130 after Ctrl-C)."""
        try:
            self.on_exit()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(self.exit_status)


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
