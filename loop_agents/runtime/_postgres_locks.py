"""PostgreSQL thread locks: session advisory locks, on one shared connection per event loop.

The runs of this process on one database share a connection per event loop (sync runs: the
background loop's), opened by the first run and closed after the last. Advisory locks are
re-entrant within a session, so a key is first claimed in this process (`_claimed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from loop_agents.runtime.sync_bridge import run_coroutine

_TRY_LOCK = "SELECT pg_try_advisory_lock(%s::bigint)"
_UNLOCK = "SELECT pg_advisory_unlock(%s::bigint)"

_lock = threading.Lock()  # of _claimed and _sessions
_claimed: set[tuple[str, int]] = set()  # keys held by runs of this process: (database, key)


@dataclass
class _Session:
    """The connection holding an event loop's locks on one database."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Any = None
    users: int = 0


_sessions: dict[tuple[int, str], _Session] = {}  # (id of the event loop, database)
_forked: list[Any] = []  # connections inherited from a parent process: never used nor closed


def _forget_after_fork() -> None:
    # the child shares the parent's sockets: it opens connections of its own, and lets the
    # server (not the parent's claims) say which keys are taken
    global _lock
    _lock = threading.Lock()
    _claimed.clear()
    _forked.extend(session.conn for session in _sessions.values())  # never closed here
    _sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class AsyncPostgresLock:
    """One run's advisory lock, taken on its event loop's shared lock connection."""

    def __init__(self, conn: Any, key: int) -> None:
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
        self.key = key
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
            self._session = None
            await self._leave(session)
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

    def __init__(self, conn: Any, key: int) -> None:
        self._lock = AsyncPostgresLock(conn, key)

    def try_acquire(self) -> bool:
        return run_coroutine(self._lock.try_acquire())

    def release(self) -> None:
        run_coroutine(self._lock.release())
