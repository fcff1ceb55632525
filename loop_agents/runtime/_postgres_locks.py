"""PostgreSQL thread locks: advisory locks held on one shared connection per database.

A thread is locked with a session-level ``pg_try_advisory_lock``. The locks of every run
of this process on one database are held on one connection (per event loop for the async
savers), opened by the first run and closed when the last one lets go: a thousand loops
cost one extra connection. Advisory locks are re-entrant within a session, so a claim is
first registered in this process (`_claimed`) and only the run that claimed a key asks
the server. The server frees a session's locks when its connection closes (a killed
process too); if the lock connection breaks, the runs holding its locks go on and the
next run opens a new connection.
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


def _is_broken(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


@dataclass
class _Session:
    """The connection holding this process's (or event loop's) locks on one database."""

    loop: asyncio.AbstractEventLoop | None = None
    pid: int = field(default_factory=os.getpid)
    lock: Any = field(default_factory=threading.Lock)  # an asyncio.Lock for an event loop
    conn: Any = None
    users: int = 0


_sessions_lock = threading.Lock()
_sessions: dict[tuple[int, str], _Session] = {}  # (id of the event loop or 0, database)
_forked: list[Any] = []  # connections inherited from a parent process: never used nor closed


def _forget_after_fork() -> None:
    # the child shares the parent's sockets: it opens connections of its own, and lets the
    # server (not the parent's claims) say which keys are taken
    global _claims_lock, _sessions_lock
    _claims_lock, _sessions_lock = threading.Lock(), threading.Lock()
    _claimed.clear()
    _forked.extend(session.conn for session in _sessions.values())  # never closed here
    _sessions.clear()


def _join(database: str, loop: asyncio.AbstractEventLoop | None = None) -> _Session:
    place = (0 if loop is None else id(loop), database)
    with _sessions_lock:
        session = _sessions.get(place)
        if session is None or session.pid != os.getpid() or session.loop is not loop:
            if session is not None and session.pid != os.getpid():
                _forked.append(session.conn)  # closing it would end the parent's session
            session = _Session(loop) if loop is None else _Session(loop, lock=asyncio.Lock())
            _sessions[place] = session
        session.users += 1
        return session


def _leave(database: str, session: _Session) -> Any:
    """Let go of ``session``; its connection when this was its last user (to close)."""
    place = (0 if session.loop is None else id(session.loop), database)
    with _sessions_lock:
        session.users -= 1
        if session.users > 0:
            return None
        if _sessions.get(place) is session:
            del _sessions[place]
    conn, session.conn = session.conn, None
    return conn


class _Lock:
    def __init__(self, conn: Any, key: int) -> None:
        self.conninfo, self.kwargs = connection_arguments(conn)
        self.database = (
            self.conninfo + "\0" + repr(sorted((k, repr(v)) for k, v in self.kwargs.items()))
        )
        self.key = key
        self._session: _Session | None = None
        self._conn: Any = None  # the connection the lock was taken on


class PostgresLock(_Lock):
    """One run's advisory lock, taken on this process's shared lock connection."""

    def try_acquire(self) -> bool:
        import psycopg

        if not _claim(self.database, self.key):
            return False
        session = _join(self.database)
        try:
            with session.lock:
                if session.conn is None or session.conn.closed:
                    session.conn = psycopg.connect(self.conninfo, **self.kwargs)
                row = session.conn.execute(_TRY_LOCK, (self.key,)).fetchone()
                conn = session.conn
        except BaseException:
            self._let_go(session)
            raise
        if row and row[0]:
            self._session, self._conn = session, conn
            return True
        self._let_go(session)
        return False

    def _let_go(self, session: _Session) -> None:
        with session.lock:
            conn = _leave(self.database, session)
        if conn is not None:
            conn.close()
        _unclaim(self.database, self.key)

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
            self._let_go(session)


class AsyncPostgresLock(_Lock):
    """`PostgresLock` for async runs: the shared connection is this event loop's."""

    _taking: asyncio.Future[bool] | None = None

    async def try_acquire(self) -> bool:
        if not _claim(self.database, self.key):
            return False
        session = self._session = _join(self.database, asyncio.get_running_loop())
        # shielded: when the run is cancelled meanwhile, the lock's answer still arrives
        # and release() (which the guard calls) undoes it
        self._taking = asyncio.ensure_future(self._take(session))
        taken = await asyncio.shield(self._taking)
        if not taken:
            self._session = None
            await self._let_go(session)
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

    async def _let_go(self, session: _Session) -> None:
        async with session.lock:
            conn = _leave(self.database, session)
        if conn is not None:
            await conn.close()
        _unclaim(self.database, self.key)

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
            await self._let_go(session)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
