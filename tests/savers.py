"""Checkpointer fixtures: the same tests run against every saver, on real storage.

- ``saver``: a sync checkpointer: ``InMemorySaver``, ``SqliteSaver`` on a file in a
  temporary folder, ``PostgresSaver`` on a real server (slow).
- ``async_saver``: ``InMemorySaver``, ``AsyncSqliteSaver``, ``AsyncPostgresSaver`` (slow).
- ``postgres_server``: a private PostgreSQL cluster (``initdb`` in a temporary folder,
  ``pg_ctl start`` on a free loopback port), started once per session on first use and
  stopped at the end, also when tests fail. ``postgres_url``: a fresh database on it.

Registered as a plugin in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

SYNC_SAVERS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.slow)]
ASYNC_SAVERS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.slow)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_bin(name: str) -> str:
    """The path of a PostgreSQL server program (PATH, then Debian's versioned folders)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not candidates:
        pytest.fail(
            f"PostgreSQL's {name} was not found (PATH, /usr/lib/postgresql/*/bin). Install "
            f"the server (`apt-get install -y postgresql`; .ci/run does it) or deselect the "
            f"real-server tests with -m 'not slow'."
        )
    return candidates[-1]


class PostgresCluster:
    """A throwaway PostgreSQL cluster owned by a non-root user (initdb refuses root).

    ``settings`` are server settings (``{"max_connections": 100}``) given to ``postgres``
    as ``-c name=value``.
    """

    def __init__(self, settings: dict[str, object] | None = None) -> None:
        self.settings = dict(settings or {})
        self.root = Path(tempfile.mkdtemp(prefix="loop-agents-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail(
                    "running as root, PostgreSQL needs a non-root OS user: create the "
                    "'postgres' user (Debian's postgresql package does) or run as non-root"
                )
            self.user = "postgres"
            shutil.chown(self.root, user="postgres", group=None)
            os.chmod(self.root, 0o700)

    def _run(self, *args: str) -> None:
        extra: dict[str, Any] = {"user": self.user} if self.user else {}
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=120, check=False, **extra
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n{tail}"
            )

    def start(self) -> None:
        self._run(
            postgres_bin("initdb"),
            "-D", str(self.data),
            "-U", "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )  # fmt: skip
        options = (
            f"-p {self.port} -k {self.root} -h 127.0.0.1 "
            f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        ) + "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            postgres_bin("pg_ctl"),
            "-D", str(self.data),
            "-o", options,
            "-l", str(self.root / "server.log"),
            "-w", "-t", "60",
            "start",
        )  # fmt: skip

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run(
                    postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
                )
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL (without a database) of a private PostgreSQL server for this session."""
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{postgres_server}/{name}"
    finally:
        with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """A database for a program run in a child process: ``("sqlite", file)`` or
    ``("postgres", url)`` of a new, empty database (the kill-and-resume tests)."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "loop.sqlite")
    return "postgres", request.getfixturevalue("postgres_url")


@pytest.fixture(params=SYNC_SAVERS)
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """Each sync checkpointer in turn, on fresh storage."""
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as sqlite:
            yield sqlite
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(request.getfixturevalue("postgres_url")) as pg:
            pg.setup()
            yield pg


@pytest.fixture(params=ASYNC_SAVERS)
async def async_saver(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Each async checkpointer in turn, on fresh storage."""
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as db:
            yield db
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        url = request.getfixturevalue("postgres_url")
        async with AsyncPostgresSaver.from_conn_string(url) as pg:
            await pg.setup()
            yield pg


def stored_bytes(saver: BaseCheckpointSaver[Any], thread_id: str) -> int:
    """The bytes a saver stores for one thread: its checkpoints, their blobs and writes.

    In memory: the serialized values the saver keeps. SQLite: ``LENGTH`` of the checkpoint,
    metadata and write columns. PostgreSQL: ``pg_column_size`` of the checkpoint, metadata,
    blob and write columns (after its own compression of large values).
    """
    if isinstance(saver, InMemorySaver):
        total = 0
        for checkpoints in saver.storage.get(thread_id, {}).values():
            for typed_checkpoint, typed_metadata, _ in checkpoints.values():
                total += len(typed_checkpoint[1]) + len(typed_metadata[1])
        total += sum(len(typed[1]) for key, typed in saver.blobs.items() if key[0] == thread_id)
        for key, writes in saver.writes.items():
            if key[0] == thread_id:
                total += sum(len(write[2][1]) for write in writes.values())
        return total
    conn = getattr(saver, "conn", None)
    if type(saver).__module__.startswith("langgraph.checkpoint.sqlite"):
        checkpoints = conn.execute(  # type: ignore[union-attr]
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints "
            "WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()[0]
        writes = conn.execute(  # type: ignore[union-attr]
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()[0]
        return int(checkpoints + writes)
    with conn.cursor() as cursor:  # type: ignore[union-attr]
        cursor.execute(
            "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)"
            " FROM checkpoints WHERE thread_id = %(t)s) + (SELECT COALESCE(SUM(pg_column_size("
            "blob)), 0) FROM checkpoint_blobs WHERE thread_id = %(t)s) + (SELECT COALESCE(SUM("
            "pg_column_size(blob)), 0) FROM checkpoint_writes WHERE thread_id = %(t)s) AS total",
            {"t": thread_id},
        )
        row = cursor.fetchone()
    return int(row["total"] if isinstance(row, dict) else row[0])
