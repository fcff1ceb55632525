"""Locks that keep two processes from running on one thread of a shared checkpointer.

A lock here belongs to its process: the operating system or the database server frees
it when the process ends, also when it is killed (``SIGKILL``, Ctrl-C), so a thread
whose run died can be resumed at once by another process.

- SQLite (``SqliteSaver``, ``AsyncSqliteSaver`` on a file): an exclusive ``flock`` on a
  small lock file per thread, in a folder next to the database
  (``checkpoints.sqlite.loop-locks/``). The file is removed when the run ends.
- PostgreSQL (``PostgresSaver``, ``AsyncPostgresSaver``): a session-level advisory lock
  (``pg_try_advisory_lock``) keyed by a 64-bit hash of the thread, held on a connection
  of its own that is opened for the run and closed after it.

Other checkpointers (``InMemorySaver``, an SQLite database in memory) cannot be shared
by processes; the in-process guard in `loop_agents.loop.thread_locking` covers them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Protocol

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; in-process guard only
    fcntl = None  # type: ignore[assignment]


class ProcessLock(Protocol):
    """A lock on one thread that other processes respect (sync form)."""

    def try_acquire(self) -> bool:
        """Take the lock if it is free; ``False`` when another holder has it."""

    def release(self) -> None:
        """Free the lock (and what was opened for it)."""


class AsyncProcessLock(Protocol):
    """A lock on one thread that other processes respect (async form)."""

    async def try_acquire(self) -> bool:
        """Take the lock if it is free; ``False`` when another holder has it."""

    async def release(self) -> None:
        """Free the lock (and what was opened for it)."""


def _digest(thread_id: str, checkpoint_ns: str) -> bytes:
    return hashlib.blake2b(
        f"loop_agents\0{thread_id}\0{checkpoint_ns}".encode(), digest_size=16
    ).digest()


# -- SQLite ---------------------------------------------------------------------------


class FileLock:
    """An exclusive ``flock`` on ``<database>.loop-locks/<hash of the thread>.lock``.

    ``flock`` locks belong to the open file, so two runs of one process conflict as
    runs of two processes do, and the kernel drops the lock when its process dies. The
    holder deletes the file when it lets go; a taker checks, after locking, that the
    file it locked is still the one at the path (an earlier holder may have deleted it
    in between) and tries again if not.
    """

    def __init__(self, database: str, thread_id: str, checkpoint_ns: str) -> None:
        self.folder = Path(f"{database}.loop-locks")
        self.path = self.folder / f"{_digest(thread_id, checkpoint_ns).hex()}.lock"
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        assert fcntl is not None
        self.folder.mkdir(exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            try:
                here = os.stat(self.path)
            except FileNotFoundError:
                here = None
            locked = os.fstat(fd)
            if here is not None and (here.st_ino, here.st_dev) == (locked.st_ino, locked.st_dev):
                self._fd = fd
                return True
            os.close(fd)  # the file was deleted by its previous holder: lock a fresh one

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        finally:
            os.close(fd)  # closing the file frees the lock


class AsyncFileLock:
    """`FileLock` for async runs (taking a free ``flock`` does not block)."""

    def __init__(self, database: str, thread_id: str, checkpoint_ns: str) -> None:
        self._lock = FileLock(database, thread_id, checkpoint_ns)

    async def try_acquire(self) -> bool:
        return self._lock.try_acquire()

    async def release(self) -> None:
        self._lock.release()


def _sqlite_file(rows: list[Any]) -> str | None:
    """The main database's file from ``PRAGMA database_list`` rows (None in memory)."""
    for row in rows:
        if row[1] == "main" and row[2]:
            return str(row[2])
    return None


def sqlite_lock(saver: object, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """A cross-process lock for a ``SqliteSaver`` on a file; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.sqlite")
    if fcntl is None or module is None or not isinstance(saver, module.SqliteSaver):
        return None
    with saver.lock, contextlib.closing(saver.conn.cursor()) as cursor:
        rows = cursor.execute("PRAGMA database_list").fetchall()
    database = _sqlite_file(rows)
    return FileLock(database, thread_id, checkpoint_ns) if database else None


async def asqlite_lock(
    saver: object, thread_id: str, checkpoint_ns: str
) -> AsyncProcessLock | None:
    """A cross-process lock for an ``AsyncSqliteSaver`` on a file; ``None`` otherwise."""
    module = sys.modules.get("langgraph.checkpoint.sqlite.aio")
    if fcntl is None or module is None or not isinstance(saver, module.AsyncSqliteSaver):
        return None
    async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
        rows = list(await cursor.fetchall())
    database = _sqlite_file(rows)
    return AsyncFileLock(database, thread_id, checkpoint_ns) if database else None


# -- PostgreSQL -----------------------------------------------------------------------


def advisory_key(thread_id: str, checkpoint_ns: str) -> int:
    """The thread's advisory-lock key: a signed 64-bit hash of the thread and namespace.

    Example:
        ```python
        assert -(2**63) <= advisory_key("t1", "") < 2**63
        ```

    """
    return int.from_bytes(_digest(thread_id, checkpoint_ns)[:8], "big", signed=True)


def _connection_arguments(conn: Any) -> tuple[str, dict[str, Any]]:
    """How to open another connection to the database of ``conn`` (a connection or pool).

    A pool (``psycopg_pool``) keeps its ``conninfo`` and ``kwargs``; a connection's
    ``info.dsn`` leaves the password out, so it is added back.
    """
    conninfo = getattr(conn, "conninfo", None)
    if isinstance(conninfo, str):
        kwargs = dict(getattr(conn, "kwargs", None) or {})
    else:
        conninfo = conn.info.dsn
        kwargs = {"password": conn.info.password} if conn.info.password else {}
    kwargs["autocommit"] = True
    kwargs.pop("row_factory", None)
    return conninfo, kwargs


_TRY_LOCK = "SELECT pg_try_advisory_lock(%s::bigint)"
_UNLOCK = "SELECT pg_advisory_unlock(%s::bigint)"


class PostgresLock:
    """``pg_try_advisory_lock`` on a connection opened for the run (sync form)."""

    def __init__(self, conn: Any, thread_id: str, checkpoint_ns: str) -> None:
        self.conninfo, self.kwargs = _connection_arguments(conn)
        self.key = advisory_key(thread_id, checkpoint_ns)
        self._conn: Any = None

    def try_acquire(self) -> bool:
        import psycopg

        if self._conn is None:
            self._conn = psycopg.connect(self.conninfo, **self.kwargs)
        row = self._conn.execute(_TRY_LOCK, (self.key,)).fetchone()
        if row and row[0]:
            return True
        self._close()
        return False

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            # unlock before closing, so the next run never finds the lock still held
            self._conn.execute(_UNLOCK, (self.key,))
        finally:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class AsyncPostgresLock:
    """``pg_try_advisory_lock`` on a connection opened for the run (async form)."""

    def __init__(self, conn: Any, thread_id: str, checkpoint_ns: str) -> None:
        self.conninfo, self.kwargs = _connection_arguments(conn)
        self.key = advisory_key(thread_id, checkpoint_ns)
        self._conn: Any = None

    async def try_acquire(self) -> bool:
        import psycopg

        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
        cursor = await self._conn.execute(_TRY_LOCK, (self.key,))
        row = await cursor.fetchone()
        if row and row[0]:
            return True
        await self._close()
        return False

    async def release(self) -> None:
        if self._conn is None:
            return
        try:
            await self._conn.execute(_UNLOCK, (self.key,))
        finally:
            await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


def postgres_lock(saver: object, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """A cross-process lock for a ``PostgresSaver``; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.postgres")
    if module is None or not isinstance(saver, module.PostgresSaver):
        return None
    return PostgresLock(saver.conn, thread_id, checkpoint_ns)


def apostgres_lock(saver: object, thread_id: str, checkpoint_ns: str) -> AsyncProcessLock | None:
    """A cross-process lock for an ``AsyncPostgresSaver``; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.postgres.aio")
    if module is None or not isinstance(saver, module.AsyncPostgresSaver):
        return None
    return AsyncPostgresLock(saver.conn, thread_id, checkpoint_ns)


def process_lock(saver: object, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """The cross-process lock for ``saver``'s thread, or ``None`` when it needs none."""
    return sqlite_lock(saver, thread_id, checkpoint_ns) or postgres_lock(
        saver, thread_id, checkpoint_ns
    )


async def aprocess_lock(
    saver: object, thread_id: str, checkpoint_ns: str
) -> AsyncProcessLock | None:
    """Async form of `process_lock`."""
    found = await asqlite_lock(saver, thread_id, checkpoint_ns)
    return found or apostgres_lock(saver, thread_id, checkpoint_ns)
