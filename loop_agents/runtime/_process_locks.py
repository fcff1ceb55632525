"""Locks that keep two processes from running on one thread of a shared checkpointer.

Each lock dies with its process. SQLite on a file: on Linux a lock on one byte of the
database file (`InodeLock`), elsewhere a lock file per thread (`FileLock`). PostgreSQL: a
session advisory lock (`AsyncPostgresLock`), the runs of this process on one database
sharing a connection per event loop. See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import struct
import sys
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_agents.runtime.sync_bridge import run_coroutine

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; in-process guard only
    fcntl = None  # type: ignore[assignment]


_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None) if fcntl is not None else None
_FLOCK = struct.Struct("=hh4xqqi4x")  # struct flock on 64-bit Linux
_FIRST = 2**40  # bytes 1 to 2 TiB, picked by a hash of the thread (SQLite's locks: at 1 GiB)
_SPAN = 2**40

AVAILABLE = _SETLK is not None and struct.calcsize("P") == 8  # Linux, 64-bit

_lock = threading.Lock()  # of the four below
_files: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> descriptor, closed once deleted:
# closing a descriptor drops every POSIX lock of the process on the file, SQLite's own too
_claimed: set[tuple[int, int, int] | tuple[str, int]] = set()
"""Held by runs of this process: (st_dev, st_ino, offset) of a file, (database, key)."""
_sessions: dict[tuple[int, str], _Session] = {}  # (id of the event loop, database)
_forked: list[Any] = []  # connections inherited from a parent process: never used nor closed


def _forget_after_fork() -> None:  # in a child process
    # the child shares the parent's descriptors and sockets, and so their locks: it opens
    # its own (never closing the inherited ones, which would drop the parent's locks)
    global _lock
    _lock = threading.Lock()
    _files.clear()
    _claimed.clear()
    _forked.extend(session.conn for session in _sessions.values())
    _sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _descriptor(database: str) -> tuple[tuple[int, int], int]:
    """The identity of ``database``'s file and this process's descriptor of it."""
    with _lock:
        for identity, fd in list(_files.items()):
            if os.fstat(fd).st_nlink == 0 and not any(c[:2] == identity for c in _claimed):
                del _files[identity]
                os.close(fd)  # deleted: no SQLite connection can still use its locks
        found = os.stat(database)
        identity = (found.st_dev, found.st_ino)
        if identity in _files:
            return identity, _files[identity]
        fd = os.open(database, os.O_RDWR | os.O_CLOEXEC)
        opened = os.fstat(fd)
        identity = (opened.st_dev, opened.st_ino)  # the file may have been replaced
        if identity in _files:
            os.close(fd)  # never open (nothing locked through it yet): closing is harmless
            return identity, _files[identity]
        _files[identity] = fd
        return identity, fd


def _set(fd: int, kind: int, offset: int) -> None:
    assert _SETLK is not None
    fcntl.fcntl(fd, _SETLK, _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0))


class InodeLock:
    """A one-byte open-file-description lock on the database file, for one thread.

    It is the file's (every path to it meets it). Locks of one descriptor never conflict,
    so runs of this process are kept apart by `_claimed` first.
    """

    def __init__(self, database: str, digest: bytes) -> None:
        self.database = database
        self.offset = _FIRST + int.from_bytes(digest[:8], "big") % _SPAN
        self._held: tuple[tuple[int, int], int] | None = None

    def try_acquire(self) -> bool:
        identity, fd = _descriptor(self.database)
        claim = (*identity, self.offset)
        with _lock:
            if claim in _claimed:
                return False
            _claimed.add(claim)
        try:
            _set(fd, fcntl.F_WRLCK, self.offset)
        except OSError as exc:
            with _lock:
                _claimed.discard(claim)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._held = (identity, fd)
        return True

    def release(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        identity, fd = held
        try:
            _set(fd, fcntl.F_UNLCK, self.offset)
        finally:
            with _lock:
                _claimed.discard((*identity, self.offset))


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

    def __init__(self, database: str, digest: bytes) -> None:
        self.folder = Path(f"{database}.loop-locks")
        self.path = self.folder / f"{digest.hex()}.lock"
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        self.folder.mkdir(exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BaseException as exc:
                os.close(fd)
                if isinstance(exc, BlockingIOError):
                    return False
                raise
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.stat(self.path), os.fstat(fd)):
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

    def __init__(self, lock: InodeLock | FileLock) -> None:
        self._lock = lock

    async def try_acquire(self) -> bool:
        return self._lock.try_acquire()

    async def release(self) -> None:
        self._lock.release()


_TRY_LOCK = "SELECT pg_try_advisory_lock(%s::bigint)"
_UNLOCK = "SELECT pg_advisory_unlock(%s::bigint)"


@dataclass
class _Session:
    """The connection holding an event loop's locks on one database."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Any = None
    users: int = 0


class AsyncPostgresLock:
    """One run's advisory lock, taken on its event loop's shared lock connection.

    Advisory locks are re-entrant within a session: a key is first claimed in `_claimed`.
    """

    def __init__(self, conn: Any, digest: bytes) -> None:
        # how to open another connection to the database of conn (a connection or a pool)
        conninfo = getattr(conn, "conninfo", None)
        if isinstance(conninfo, str):  # a psycopg_pool pool
            kwargs = dict(getattr(conn, "kwargs", None) or {})
        else:
            conninfo = conn.info.dsn  # without the password: added back
            kwargs = {"password": conn.info.password} if conn.info.password else {}
        kwargs.pop("row_factory", None)
        self.conninfo: str = conninfo
        # two statements, run once per run: never prepared
        self.kwargs = {**kwargs, "autocommit": True, "prepare_threshold": None}
        options = repr(sorted((k, repr(v)) for k, v in self.kwargs.items()))
        self.database = f"{self.conninfo}\0{options}"
        self.key = int.from_bytes(digest[:8], "big", signed=True)
        self._session: _Session | None = None
        self._conn: Any = None  # the connection the lock was taken on
        self._taking: asyncio.Future[bool] | None = None

    async def try_acquire(self) -> bool:
        loop = asyncio.get_running_loop()
        with _lock:
            if (self.database, self.key) in _claimed:
                return False
            _claimed.add((self.database, self.key))
            session = _sessions.get((id(loop), self.database))
            if session is None or session.loop is not loop:
                session = _sessions[(id(loop), self.database)] = _Session(loop)
            session.users += 1
        self._session = session
        # shielded: when the run is cancelled meanwhile, the lock's answer still arrives
        # and release() (which the guard calls) undoes it
        self._taking = asyncio.ensure_future(self._take(session))
        taken = await asyncio.shield(self._taking)
        if not taken:
            await self.release()
        return taken

    async def _take(self, session: _Session) -> bool:
        import psycopg

        async with session.lock:
            if session.conn is None or session.conn.closed:
                session.conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            cursor = await session.conn.execute(_TRY_LOCK, (self.key,))
            row = await cursor.fetchone()
            self._conn = session.conn
        return bool(row and row[0])

    async def _leave(self, session: _Session) -> None:
        """Let the session go (closing its connection after its last user); unclaim."""
        with _lock:
            session.users -= 1
            last = session.users <= 0
            if last and _sessions.get((id(session.loop), self.database)) is session:
                del _sessions[(id(session.loop), self.database)]
        if last:
            async with session.lock:
                conn, session.conn = session.conn, None
            if conn is not None:
                await conn.close()
        with _lock:
            _claimed.discard((self.database, self.key))

    async def release(self) -> None:
        session, self._session = self._session, None
        taking, self._taking = self._taking, None
        if session is None:
            return
        try:
            taken = False
            if taking is not None:
                with contextlib.suppress(Exception):
                    taken = await taking
            async with session.lock:
                # unlock before letting go here, so the next run never finds it still held
                if taken and session.conn is self._conn and not self._conn.closed:
                    await session.conn.execute(_UNLOCK, (self.key,))
        except Exception as exc:
            import psycopg

            if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                raise
            session.conn = None  # its locks went with it; the next run opens a new one
        finally:
            self._conn = None
            await self._leave(session)


class PostgresLock:
    """`AsyncPostgresLock` for sync runs, on the background event loop's connection."""

    def __init__(self, conn: Any, digest: bytes) -> None:
        self._lock = AsyncPostgresLock(conn, digest)

    def try_acquire(self) -> bool:
        return run_coroutine(self._lock.try_acquire())

    def release(self) -> None:
        run_coroutine(self._lock.release())


def _sqlite_file(rows: list[Any]) -> str | None:
    """The main database's file from ``PRAGMA database_list`` rows (None in memory)."""
    return next((str(row[2]) for row in rows if row[1] == "main" and row[2]), None)


_databases: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
"""The file of each SQLite saver seen (a saver's connection, and so its file, is fixed)."""


def _lock_for(database: str | None, digest: bytes) -> InodeLock | FileLock | None:
    if database is None:
        return None
    if AVAILABLE:
        # else (e.g. a read-only file, whose run fails at its first write anyway) the folder
        with contextlib.suppress(OSError):
            _descriptor(database)
            return InodeLock(database, digest)
    return FileLock(database, digest)


def _saver_of(saver: object, module: str, name: str) -> bool:
    """Whether ``saver`` is the class ``name`` of ``module``, if that module is imported."""
    found = sys.modules.get(module)
    return found is not None and isinstance(saver, getattr(found, name))


def process_lock(
    saver: Any, thread_id: str, checkpoint_ns: str
) -> InodeLock | FileLock | PostgresLock | None:
    """The cross-process lock for ``saver``'s thread, or ``None`` when it needs none."""
    if fcntl is not None and _saver_of(saver, "langgraph.checkpoint.sqlite", "SqliteSaver"):
        if saver not in _databases:
            with saver.lock, contextlib.closing(saver.conn.cursor()) as cursor:
                rows = cursor.execute("PRAGMA database_list").fetchall()
                _databases[saver] = _sqlite_file(rows)
        return _lock_for(_databases[saver], _digest(thread_id, checkpoint_ns))
    if _saver_of(saver, "langgraph.checkpoint.postgres", "PostgresSaver"):
        return PostgresLock(saver.conn, _digest(thread_id, checkpoint_ns))
    return None


async def aprocess_lock(
    saver: Any, thread_id: str, checkpoint_ns: str
) -> AsyncFileLock | AsyncPostgresLock | None:
    """Async form of `process_lock`, for ``AsyncSqliteSaver`` and ``AsyncPostgresSaver``."""
    if fcntl is not None and _saver_of(
        saver, "langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"
    ):
        if saver not in _databases:
            async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
                _databases[saver] = _sqlite_file(list(await cursor.fetchall()))
        lock = _lock_for(_databases[saver], _digest(thread_id, checkpoint_ns))
        return None if lock is None else AsyncFileLock(lock)
    if _saver_of(saver, "langgraph.checkpoint.postgres.aio", "AsyncPostgresSaver"):
        return AsyncPostgresLock(saver.conn, _digest(thread_id, checkpoint_ns))
    return None
