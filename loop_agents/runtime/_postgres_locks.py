"""PostgreSQL thread locks: advisory locks held on one shared connection per database.

A thread is locked with a session-level ``pg_try_advisory_lock`` keyed by a 64-bit hash
of the thread. The locks of every run of this process on one database are held on **one**
connection (per event loop for the async savers, since an async connection belongs to the
loop that opened it), opened when the first run takes a lock and closed when the last one
lets go. So a thousand loops running at once cost one extra connection, not a thousand:
the server's ``max_connections`` is left to the checkpointer itself.

Advisory locks are re-entrant within a session, so two runs of this process never ask the
server for the same key: a claim is first registered in this process (`_claimed`, keyed by
the database and the key), and only a run that claimed the key here takes it on the
server. The server frees every lock of a session when its connection closes, also when the
process is killed. If the lock connection breaks (the server restarted), the locks taken on
it are gone with it; the runs holding them go on, and the next run opens a new connection.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from typing import Any

_TRY_LOCK = "SELECT pg_try_advisory_lock(%s::bigint)"
_UNLOCK = "SELECT pg_advisory_unlock(%s::bigint)"

_claims_lock = threading.Lock()
_claimed: set[tuple[str, int]] = set()
"""Keys held by runs of this process: (the database's connection string, key)."""


def _claim(database: str, key: int) -> bool:
    with _claims_lock:
        if (database, key) in _claimed:
            return False
        _claimed.add((database, key))
        return True


def _unclaim(database: str, key: int) -> None:
    with _claims_lock:
        _claimed.discard((database, key))


def connection_arguments(conn: Any) -> tuple[str, dict[str, Any]]:
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
    kwargs["prepare_threshold"] = None  # two statements, run once per run: never prepared
    return conninfo, kwargs


def _database_key(conninfo: str, kwargs: dict[str, Any]) -> str:
    return conninfo + "\0" + repr(sorted((k, repr(v)) for k, v in kwargs.items()))


def _is_broken(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


# -- sync ---------------------------------------------------------------------------------


@dataclass
class _Session:
    """The connection holding this process's locks on one database (sync savers)."""

    conninfo: str
    kwargs: dict[str, Any]
    pid: int = field(default_factory=os.getpid)
    lock: threading.Lock = field(default_factory=threading.Lock)
    conn: Any = None
    users: int = 0


_sessions_lock = threading.Lock()
_sessions: dict[str, _Session] = {}
_forked: list[Any] = []  # connections inherited from a parent process: never used nor closed


def _forget_after_fork() -> None:
    # the child shares the parent's sockets: it opens connections of its own, and lets the
    # server (not the parent's claims) say which keys are taken
    global _claims_lock, _sessions_lock
    _claims_lock, _sessions_lock = threading.Lock(), threading.Lock()
    _claimed.clear()
    _forked.extend(session.conn for session in _sessions.values())  # never closed here
    _sessions.clear()
    _forked.extend(session.conn for session in _async_sessions.values())
    _async_sessions.clear()


def _session(database: str, conninfo: str, kwargs: dict[str, Any]) -> _Session:
    with _sessions_lock:
        session = _sessions.get(database)
        if session is None or session.pid != os.getpid():
            if session is not None:
                _forked.append(session.conn)  # closing it would end the parent's session
            session = _sessions[database] = _Session(conninfo, kwargs)
        session.users += 1
        return session


def _leave(database: str, session: _Session) -> None:
    with _sessions_lock:
        session.users -= 1
        if session.users > 0:
            return
        if _sessions.get(database) is session:
            del _sessions[database]
    with session.lock:
        conn, session.conn = session.conn, None
    if conn is not None:
        conn.close()


class PostgresLock:
    """One run's advisory lock, taken on this process's shared lock connection."""

    def __init__(self, conn: Any, key: int) -> None:
        self.conninfo, self.kwargs = connection_arguments(conn)
        self.database = _database_key(self.conninfo, self.kwargs)
        self.key = key
        self._session: _Session | None = None
        self._conn: Any = None  # the connection the lock was taken on

    def try_acquire(self) -> bool:
        import psycopg

        if not _claim(self.database, self.key):
            return False
        session = _session(self.database, self.conninfo, self.kwargs)
        try:
            with session.lock:
                if session.conn is None or session.conn.closed:
                    session.conn = psycopg.connect(self.conninfo, **self.kwargs)
                row = session.conn.execute(_TRY_LOCK, (self.key,)).fetchone()
                conn = session.conn
        except BaseException:
            _leave(self.database, session)
            _unclaim(self.database, self.key)
            raise
        if row and row[0]:
            self._session, self._conn = session, conn
            return True
        _leave(self.database, session)
        _unclaim(self.database, self.key)
        return False

    def release(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            with session.lock:
                # unlock before letting go here, so the next run never finds it still held
                if session.conn is self._conn and not self._conn.closed:
                    session.conn.execute(_UNLOCK, (self.key,))
        except Exception as exc:
            if not _is_broken(exc):
                raise
            session.conn = None  # its locks went with it; the next run opens a new one
        finally:
            self._conn = None
            _leave(self.database, session)
            _unclaim(self.database, self.key)


# -- async --------------------------------------------------------------------------------


@dataclass
class _AsyncSession:
    """The connection holding this event loop's locks on one database (async savers)."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Any = None
    users: int = 0


_async_sessions: dict[tuple[int, str], _AsyncSession] = {}


def _async_session(database: str) -> _AsyncSession:
    loop = asyncio.get_running_loop()
    with _sessions_lock:
        session = _async_sessions.get((id(loop), database))
        if session is None or session.loop is not loop:
            session = _async_sessions[(id(loop), database)] = _AsyncSession(loop)
        session.users += 1
        return session


async def _aleave(database: str, session: _AsyncSession) -> None:
    with _sessions_lock:
        session.users -= 1
        if session.users > 0:
            return
        place = (id(session.loop), database)
        if _async_sessions.get(place) is session:
            del _async_sessions[place]
    async with session.lock:
        conn, session.conn = session.conn, None
    if conn is not None:
        await conn.close()


class AsyncPostgresLock:
    """`PostgresLock` for async runs: the shared connection is this event loop's."""

    def __init__(self, conn: Any, key: int) -> None:
        self.conninfo, self.kwargs = connection_arguments(conn)
        self.database = _database_key(self.conninfo, self.kwargs)
        self.key = key
        self._session: _AsyncSession | None = None
        self._conn: Any = None
        self._taking: asyncio.Future[bool] | None = None

    async def try_acquire(self) -> bool:
        if not _claim(self.database, self.key):
            return False
        session = _async_session(self.database)
        self._session = session
        # shielded: when the run is cancelled meanwhile, the lock's answer still arrives
        # and release() (which the guard calls) undoes it
        self._taking = asyncio.ensure_future(self._take(session))
        taken = await asyncio.shield(self._taking)
        if not taken:
            self._session = None
            await _aleave(self.database, session)
            _unclaim(self.database, self.key)
        return taken

    async def _take(self, session: _AsyncSession) -> bool:
        import psycopg

        async with session.lock:
            if session.conn is None or session.conn.closed:
                session.conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            cursor = await session.conn.execute(_TRY_LOCK, (self.key,))
            row = await cursor.fetchone()
            self._conn = session.conn
        return bool(row and row[0])

    async def release(self) -> None:
        session, self._session = self._session, None
        taking, self._taking = self._taking, None
        if session is None:
            return
        try:
            taken = False
            if taking is not None:
                try:
                    taken = await taking
                except Exception:
                    taken = False
            async with session.lock:
                if taken and session.conn is self._conn and not self._conn.closed:
                    await session.conn.execute(_UNLOCK, (self.key,))
        except Exception as exc:
            if not _is_broken(exc):
                raise
            session.conn = None
        finally:
            self._conn = None
            await _aleave(self.database, session)
            _unclaim(self.database, self.key)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
