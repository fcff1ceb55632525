"""Saved runs: one SQLite file with LangGraph's checkpoints and an index of the runs.

Each run is a thread of ``AsyncSqliteSaver`` (the run id is the thread id) written with
``durability="sync"``; the table ``loop_agents_runs`` indexes them (settings, never an
API key). The file is ``$LOOP_AGENTS_HOME/runs.sqlite`` (default
``~/.local/state/loop-agents``), private to the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from loop_agents_cli.errors import UsageError
from loop_agents_cli.models.server_process import alive
from loop_agents_cli.parser import PROG
from loop_agents_cli.store_errors import BUSY_TIMEOUT, store_problem

if TYPE_CHECKING:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

HOME_VARIABLE = "LOOP_AGENTS_HOME"
"""The environment variable naming the folder of the saved runs."""

FILE_NAME = "runs.sqlite"

RunStatus = Literal["running", "finished", "failed", "interrupted"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS loop_agents_runs (
    run_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    task TEXT NOT NULL,
    settings TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    iterations INTEGER NOT NULL DEFAULT 0,
    max_iterations INTEGER NOT NULL,
    best_score REAL,
    error TEXT,
    pid INTEGER
)
"""
_COLUMNS = (
    "run_id, created_at, updated_at, task, settings, status, stop_reason, iterations, "
    "max_iterations, best_score, error, pid"
)
_UPDATABLE = frozenset(
    {"status", "stop_reason", "iterations", "best_score", "error", "pid", "settings"}
)


def store_home(environ: Mapping[str, str] | None = None) -> Path:
    """The folder of the saved runs: ``$LOOP_AGENTS_HOME``, else the XDG state folder.

    Example:
        ```python
        store_home({"LOOP_AGENTS_HOME": "/tmp/runs"})  # PosixPath('/tmp/runs')
        ```
    """
    env = os.environ if environ is None else environ
    home = env.get(HOME_VARIABLE, "").strip()
    if home:
        return Path(home).expanduser()
    state = env.get("XDG_STATE_HOME", "").strip()
    base = Path(state).expanduser() if state else Path.home() / ".local" / "state"
    return base / "loop-agents"


def resume_command(
    run_id: str,
    *,
    as_json: bool,
    env_file: Path | None,
    home: Path | None = None,
    method: str | None = None,
) -> str:
    """The exact command that resumes run ``run_id``, ready to copy into a shell.

    It sets ``LOOP_AGENTS_HOME`` when the run is not in the default folder, and asks for the
    judge's verdict by ``method`` (``--structured-output``) when given.

    Example:
        ```python
        resume_command("3f9a2c1b", as_json=False, env_file=None, home=Path("/tmp/my runs"))
        # "LOOP_AGENTS_HOME='/tmp/my runs' loop-agents resume 3f9a2c1b"
        ```
    """
    words = [PROG, "resume", run_id]
    if as_json:
        words.append("--json")
    if env_file is not None:
        words += ["--env-file", str(env_file.resolve())]
    if method is not None:
        words += ["--structured-output", method]
    return with_home(shlex.join(words), home)


def with_home(command: str, home: Path | None) -> str:
    """``command`` with ``LOOP_AGENTS_HOME=HOME`` before it when ``home`` is not the default.

    Example:
        ```python
        with_home("loop-agents show 3f9a2c1b", Path("/tmp/runs"))
        ```
    """
    default = store_home({k: v for k, v in os.environ.items() if k != HOME_VARIABLE})
    if home is None or home.absolute() == default.absolute():
        return command
    return f"{HOME_VARIABLE}={shlex.quote(str(home.absolute()))} {command}"


@dataclass(frozen=True)
class SavedRun:
    """One row of the index of saved runs."""

    run_id: str
    created_at: float
    updated_at: float
    task: str
    settings: dict[str, Any]
    status: RunStatus
    stop_reason: str | None
    iterations: int
    max_iterations: int
    best_score: float | None
    error: str | None
    pid: int | None

    @property
    def state(self) -> RunStatus:
        """The status, with a run whose process is gone shown as ``interrupted``."""
        if self.status == "running" and not (self.pid and alive(self.pid)):
            return "interrupted"
        return self.status

    @property
    def running_elsewhere(self) -> bool:
        """Whether another live process runs it now."""
        pid = self.pid
        if self.status != "running" or pid is None or pid in (0, os.getpid()):
            return False
        return alive(pid)

    @property
    def started(self) -> str:
        """When the run started, as ``2025-05-01 14:03`` (local time)."""
        return datetime.fromtimestamp(self.created_at).strftime("%Y-%m-%d %H:%M")

    @property
    def title(self) -> str:
        """The task's first non-blank line."""
        return next((line.strip() for line in self.task.splitlines() if line.strip()), "")


class RunStore:
    """The saved runs in ``folder``: an index and LangGraph checkpoints, in one file.

    Example:
        ```python
        for run in RunStore(store_home()).list():
            print(run.run_id, run.title)
        ```
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / FILE_NAME

    # -- the file -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the folder and the index (private) if missing; `UsageError` if it cannot."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self.path.exists():
                self.path.touch(mode=0o600)
            with self._connect() as connection:
                connection.execute(_SCHEMA)
        except UsageError:
            raise
        except sqlite3.Error as exc:
            raise store_problem(exc, self.path) from exc
        except OSError as exc:
            raise UsageError(
                f"cannot save runs in {str(self.folder)!r} ({exc}); set {HOME_VARIABLE} to a "
                f"folder you can write, or pass --no-save"
            ) from exc

    @contextlib.contextmanager
    def _connect(self, timeout: float = BUSY_TIMEOUT) -> Iterator[sqlite3.Connection]:
        """A connection to the file; a problem with it becomes a one-line `InputError`."""
        try:
            connection = sqlite3.connect(self.path, timeout=timeout)
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                with connection:
                    yield connection
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise store_problem(exc, self.path) from exc

    @contextlib.asynccontextmanager
    async def checkpointer(self) -> AsyncIterator[AsyncSqliteSaver]:
        """LangGraph's ``AsyncSqliteSaver`` on the file; writes finish though a run is cancelled.

        Example:
            ```python
            async with store.checkpointer() as saver:
                loop = create_loop_agent(agent, judge, 3, checkpointer=saver)
            ```
        """
        from loop_agents_cli.interrupt import ShieldedSqliteSaver

        async with ShieldedSqliteSaver.from_conn_string(str(self.path)) as opened:
            saver = cast(ShieldedSqliteSaver, opened)
            try:
                yield saver
            except sqlite3.Error as exc:  # reading a damaged file, a write on a full disk
                raise store_problem(exc, self.path) from exc
            finally:
                await saver.drain()

    # -- the index ------------------------------------------------------------------------

    def create(self, task: str, settings: Mapping[str, Any], max_iterations: int) -> str:
        """Add a run (status ``running``, this process); return its new id.

        Example:
            ```python
            run_id = store.create(spec.task, spec.to_dict(), spec.max_iterations)
            ```
        """
        self.prepare()
        now = time.time()
        with self._connect() as connection:
            for _ in range(100):
                run_id = secrets.token_hex(4)
                try:
                    connection.execute(
                        f"INSERT INTO loop_agents_runs ({_COLUMNS}) "
                        "VALUES (?, ?, ?, ?, ?, 'running', NULL, 0, ?, NULL, NULL, ?)",
                        (
                            run_id,
                            now,
                            now,
                            task,
                            json.dumps(dict(settings)),
                            max_iterations,
                            os.getpid(),
                        ),
                    )
                except sqlite3.IntegrityError:
                    continue
                return run_id
        raise RuntimeError("no free run id after 100 tries")  # pragma: no cover

    def update(self, run_id: str, *, timeout: float = BUSY_TIMEOUT, **fields: Any) -> None:
        """Set some fields of a run's row (not while this process's saver is open: `aupdate`).

        The fields: ``status``, ``stop_reason``, ``iterations``, ``best_score``, ``error``,
        ``pid``, ``settings``.

        Example:
            ```python
            store.update(run_id, status="finished", stop_reason="accepted")
            ```
        """
        sql, parameters = _update(run_id, fields)
        with self._connect(timeout) as connection:
            connection.execute(sql, parameters)

    async def aupdate(self, saver: AsyncSqliteSaver, run_id: str, **fields: Any) -> None:
        """`update` through the checkpointer's own connection, in turn with its writes."""
        sql, parameters = _update(run_id, fields)
        async with saver.lock:
            await saver.conn.execute(sql, parameters)
            await saver.conn.commit()

    def list(self, limit: int | None = None) -> list[SavedRun]:
        """The saved runs, latest first (at most ``limit``); none when there is no file."""
        if not self.path.is_file():
            return []
        query = f"SELECT {_COLUMNS} FROM loop_agents_runs ORDER BY created_at DESC"
        parameters: tuple[int, ...] = ()
        if limit is not None:
            query += " LIMIT ?"
            parameters = (limit,)
        with self._connect() as connection:
            try:
                rows = connection.execute(query, parameters).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []
                raise
        return [_saved(row) for row in rows]

    def find(self, run_id: str) -> SavedRun:
        """The run with this id, or the one run whose id starts with it; `UsageError` else.

        Example:
            ```python
            run = store.find("3f9a")
            ```
        """
        wanted = run_id.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{1,32}", wanted):
            raise UsageError(
                f"{run_id!r} is not a run id (ids are hex, e.g. 3f9a2c1b); "
                f"`loop-agents runs` lists them"
            )
        matches = [run for run in self.list() if run.run_id.startswith(wanted)]
        exact = [run for run in matches if run.run_id == wanted]
        if exact:
            return exact[0]
        if not matches:
            raise UsageError(
                f"no saved run {run_id!r} in {self.path}; `loop-agents runs` lists the runs"
            )
        if len(matches) > 1:
            ids = ", ".join(run.run_id for run in matches[:10])
            raise UsageError(f"{run_id!r} is the start of several run ids ({ids}); give more")
        return matches[0]


def saved_runs(env_file: Path | None = None) -> RunStore:
    """The store of saved runs that the environment (and ``.env``) names; `UsageError` if bad.

    Example:
        ```python
        run = saved_runs().find("3f9a")
        ```
    """
    from loop_agents_cli.models.settings import Environment, SettingsError

    try:
        env = Environment.read(env_file)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return RunStore(store_home(env.values))


def _update(run_id: str, fields: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    unknown = set(fields) - _UPDATABLE
    if unknown or not fields:
        raise ValueError(f"cannot update {sorted(unknown) or 'nothing'} of a saved run")
    assignments = ", ".join(f"{name} = ?" for name in fields)
    values = (json.dumps(v) if isinstance(v, dict) else v for v in fields.values())
    return (
        f"UPDATE loop_agents_runs SET {assignments}, updated_at = ? WHERE run_id = ?",
        (*values, time.time(), run_id),
    )


def _saved(row: tuple[Any, ...]) -> SavedRun:
    (run_id, created, updated, task, settings, status, reason, iterations, cap, best) = row[:10]
    error, pid = row[10:]
    try:
        parsed = json.loads(settings)
    except ValueError:
        parsed = {}
    return SavedRun(
        run_id,
        float(created),
        float(updated),
        str(task),
        parsed if isinstance(parsed, dict) else {},
        status,
        reason,
        int(iterations),
        int(cap),
        best,
        error,
        pid,
    )
