"""What went wrong with the file of saved runs, as an `InputError` naming it and the fix."""

from __future__ import annotations

import errno
import shlex
import sqlite3
from pathlib import Path

from loop_agents_cli.errors import InputError

BUSY_TIMEOUT = 5.0
"""Seconds a command waits for another process's write to the file before it says so."""

HOME_HINT = "set LOOP_AGENTS_HOME to another folder"


def _damaged(message: str) -> bool:
    return any(
        part in message
        for part in ("file is not a database", "malformed", "file is encrypted", "corrupt")
    )


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the file system's quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.Error) and (
        "disk is full" in str(exc) or getattr(exc, "sqlite_errorcode", None) == 13
    )


def store_problem(exc: BaseException, path: Path, *, resume: str | None = None) -> InputError:
    """The `InputError` for ``exc``, raised while using the runs file ``path``.

    ``resume``: the command that resumes the run under way (its steps are in the file).

    Example:
        ```python
        error = store_problem(sqlite3.DatabaseError("file is not a database"), Path("r.db"))
        ```
    """
    where = str(path)
    quoted = shlex.quote(where)
    message = str(exc)
    then = f"; then resume the run with: {resume}" if resume else ""
    if is_disk_full(exc):
        what = (
            f"the disk holding the runs file {where} is full ({message}); the completed "
            f"steps of the run are kept in it. Free some space{then or ''}"
        )
        if not resume:
            what += f", or {HOME_HINT} on another disk"
        return InputError(what)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in message:
        return InputError(
            f"the runs file {where} is locked by another process (still {message} after "
            f"{BUSY_TIMEOUT:g} s); wait for the other process to finish{then}, or pass "
            f"--no-save, or {HOME_HINT}"
        )
    if isinstance(exc, sqlite3.DatabaseError) and _damaged(message):
        return InputError(
            f"the runs file {where} is damaged or is not an SQLite database ({message}); "
            f"move it aside to start a new one (mv {quoted} {shlex.quote(where + '.broken')}), "
            f"or {HOME_HINT}"
        )
    if "readonly" in message or isinstance(exc, PermissionError):
        return InputError(
            f"the runs file {where} cannot be written ({message}); check its permissions, "
            f"pass --no-save, or {HOME_HINT}"
        )
    return InputError(
        f"cannot use the runs file {where} ({type(exc).__name__}: {message}); {HOME_HINT}, "
        f"or pass --no-save"
    )
