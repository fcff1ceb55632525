"""Locks that keep two processes from running on one thread of a shared checkpointer.

Each lock belongs to its process: the kernel or the database server frees it when the
process ends, however it ends, so a thread whose run died can be resumed at once.

- SQLite on a file: on Linux a lock on one byte of the database file itself
  (`_inode_locks`); elsewhere an exclusive ``flock`` on a lock file per thread in
  ``<database>.loop-locks/``, removed when the run ends.
- PostgreSQL: a session-level advisory lock keyed by a 64-bit hash of the thread, on one
  connection per process and database (`_postgres_locks`).

Other savers cannot be shared by processes: the in-process guard covers them.
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


class FileLock:
    """An exclusive ``flock`` on ``<database>.loop-locks/<hash of the thread>.lock``.

    ``flock`` locks belong to the open file, so two runs of one process conflict too. The
    holder deletes the file when it lets go; a taker checks, after locking, that the file
    it locked is still the one at the path, and tries again if not.
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
    return next((str(row[2]) for row in rows if row[1] == "main" and row[2]), None)


_databases: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
"""The file of each SQLite saver seen (a saver's connection, and so its file, is fixed)."""


def _lock_for(database: str | None, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    if database is None:
        return None
    if _inode_locks.usable(database):
        return _inode_locks.InodeLock(database, _digest(thread_id, checkpoint_ns))
    return FileLock(database, thread_id, checkpoint_ns)


def _saver_of(saver: object, module: str, name: str) -> bool:
    """Whether ``saver`` is the class ``name`` of ``module``, if that module is imported."""
    found = sys.modules.get(module)
    return found is not None and isinstance(saver, getattr(found, name))


def advisory_key(thread_id: str, checkpoint_ns: str) -> int:
    """The thread's advisory-lock key: a signed 64-bit hash of the thread and namespace.

    Example:
        ```python
        assert -(2**63) <= advisory_key("t1", "") < 2**63
        ```

    """
    return int.from_bytes(_digest(thread_id, checkpoint_ns)[:8], "big", signed=True)


def process_lock(saver: Any, thread_id: str, checkpoint_ns: str) -> ProcessLock | None:
    """The cross-process lock for ``saver``'s thread, or ``None`` when it needs none."""
    if fcntl is not None and _saver_of(saver, "langgraph.checkpoint.sqlite", "SqliteSaver"):
        if saver not in _databases:
            with saver.lock, contextlib.closing(saver.conn.cursor()) as cursor:
                rows = cursor.execute("PRAGMA database_list").fetchall()
                _databases[saver] = _sqlite_file(rows)
        return _lock_for(_databases[saver], thread_id, checkpoint_ns)
    if _saver_of(saver, "langgraph.checkpoint.postgres", "PostgresSaver"):
        return PostgresLock(saver.conn, advisory_key(thread_id, checkpoint_ns))
    return None


async def aprocess_lock(saver: Any, thread_id: str, checkpoint_ns: str) -> AsyncProcessLock | None:
    """Async form of `process_lock`, for ``AsyncSqliteSaver`` and ``AsyncPostgresSaver``."""
    if fcntl is not None and _saver_of(
        saver, "langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"
    ):
        if saver not in _databases:
            async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
                _databases[saver] = _sqlite_file(list(await cursor.fetchall()))
        lock = _lock_for(_databases[saver], thread_id, checkpoint_ns)
        return None if lock is None else AsyncFileLock(lock)
    if _saver_of(saver, "langgraph.checkpoint.postgres.aio", "AsyncPostgresSaver"):
        return AsyncPostgresLock(saver.conn, advisory_key(thread_id, checkpoint_ns))
    return None
