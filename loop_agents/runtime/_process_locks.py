"""Locks that keep two processes from running on one thread of a shared checkpointer.

A lock here belongs to its process: the operating system or the database server frees
it when the process ends, also when it is killed (``SIGKILL``, Ctrl-C), so a thread
whose run died can be resumed at once by another process.

- SQLite (``SqliteSaver``, ``AsyncSqliteSaver`` on a file): on Linux, a lock on one byte
  of the database file itself, so every path to the file meets it
  (`loop_agents.runtime._inode_locks`). Elsewhere, an exclusive ``flock`` on a small lock
  file per thread, in a folder next to the database (``checkpoints.sqlite.loop-locks/``),
  removed when the run ends.
- PostgreSQL (``PostgresSaver``, ``AsyncPostgresSaver``): a session-level advisory lock
  (``pg_try_advisory_lock``) keyed by a 64-bit hash of the thread, held on one connection
  per process and database that all its runs share (`loop_agents.runtime._postgres_locks`).

Other checkpointers (``InMemorySaver``, an SQLite database in memory) cannot be shared
by processes; the in-process guard in `loop_agents.runtime.thread_locking` covers them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import weakref
from pathlib import Path
from typing import Any, Protocol

from loop_agents.runtime import _inode_locks
from loop_agents.runtime._postgres_locks import AsyncPostgresLock, PostgresLock

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
    """A file lock (`FileLock`, `InodeLock`) for async runs: taking one never blocks."""

    def __init__(self, lock: ProcessLock) -> None:
        self._lock = lock

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


_databases: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
"""The file of each SQLite saver seen (a saver's connection, and so its file, is fixed)."""


def _lock_for(database: str | None, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    if database is None:
        return None
    digest = _digest(thread_id, checkpoint_ns)
    if _inode_locks.usable(database):
        return _inode_locks.InodeLock(database, digest)
    return FileLock(database, thread_id, checkpoint_ns)


def sqlite_lock(saver: object, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """A cross-process lock for a ``SqliteSaver`` on a file; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.sqlite")
    if fcntl is None or module is None or not isinstance(saver, module.SqliteSaver):
        return None
    if saver not in _databases:
        with saver.lock, contextlib.closing(saver.conn.cursor()) as cursor:
            _databases[saver] = _sqlite_file(cursor.execute("PRAGMA database_list").fetchall())
    return _lock_for(_databases[saver], thread_id, checkpoint_ns)


async def asqlite_lock(
    saver: object, thread_id: str, checkpoint_ns: str
) -> AsyncProcessLock | None:
    """A cross-process lock for an ``AsyncSqliteSaver`` on a file; ``None`` otherwise."""
    module = sys.modules.get("langgraph.checkpoint.sqlite.aio")
    if fcntl is None or module is None or not isinstance(saver, module.AsyncSqliteSaver):
        return None
    if saver not in _databases:
        async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
            _databases[saver] = _sqlite_file(list(await cursor.fetchall()))
    lock = _lock_for(_databases[saver], thread_id, checkpoint_ns)
    return None if lock is None else AsyncFileLock(lock)


# -- PostgreSQL -----------------------------------------------------------------------


def advisory_key(thread_id: str, checkpoint_ns: str) -> int:
    """The thread's advisory-lock key: a signed 64-bit hash of the thread and namespace.

    Example:
        ```python
        assert -(2**63) <= advisory_key("t1", "") < 2**63
        ```

    """
    return int.from_bytes(_digest(thread_id, checkpoint_ns)[:8], "big", signed=True)


def postgres_lock(saver: object, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """A cross-process lock for a ``PostgresSaver``; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.postgres")
    if module is None or not isinstance(saver, module.PostgresSaver):
        return None
    return PostgresLock(saver.conn, advisory_key(thread_id, checkpoint_ns))


def apostgres_lock(saver: object, thread_id: str, checkpoint_ns: str) -> AsyncProcessLock | None:
    """A cross-process lock for an ``AsyncPostgresSaver``; ``None`` for other savers."""
    module = sys.modules.get("langgraph.checkpoint.postgres.aio")
    if module is None or not isinstance(saver, module.AsyncPostgresSaver):
        return None
    return AsyncPostgresLock(saver.conn, advisory_key(thread_id, checkpoint_ns))


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
