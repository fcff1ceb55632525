"""Helpers for the sandbox tests: which isolations run here, and leftover-process scans."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import uuid
import warnings
from pathlib import Path

import pytest

from loop_agents_checks.sandbox import arun_python, available_isolations, make_limits, run_python

MODES = ("bwrap", "unshare", "process")
CANDIDATE_PYTHONS = (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3")


def python_for(mode: str) -> str:
    """An interpreter ``mode`` can run here, or skip (fail for bwrap on CI) with the reason.

    As root the program runs as a user of its own, so it needs an interpreter that every
    user can read; the current one may live under /root.
    """
    reasons = []
    for python in dict.fromkeys(p for p in CANDIDATE_PYTHONS if p and shutil.which(p)):
        reason = available_isolations(make_limits(python=python))[mode]
        if reason is None:
            return python
        reasons.append(f"{python}: {reason}")
    message = f"isolation {mode!r} is not available here: " + "; ".join(reasons)
    if mode == "bwrap" and os.environ.get("CI"):
        pytest.fail(f"CI must run the bubblewrap tests ({message})")
    pytest.skip(message)


def marker() -> str:
    """A unique number for `sleep`'s argument, to find leftover processes by command line."""
    return f"{86400 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 10**9:09d}"


def processes_with(mark: str) -> list[str]:
    """Command lines of live processes that mention ``mark`` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if mark.encode() in cmdline:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry}: {shown}")
    return found


SLOW_CALLBACK_SECONDS = 1.0
"""How long a callback may hold the event loop in `run_either`'s async form."""


def run_either(kind: str, code: str, **kwargs: object):
    """Run with run_python, or arun_python in a fresh event loop that must log nothing.

    The async form runs with asyncio's debug mode and every warning an error; any record of
    the ``asyncio`` logger fails the test. A callback counts as slow from 1 s (debug mode's
    default, 0.1 s, is passed by a fork or a wait on a loaded machine): the time limits
    here are about that long, so a call that blocks the event loop until one still fails.
    """
    if kind == "sync":
        return run_python(code, **kwargs)  # type: ignore[arg-type]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with asyncio.Runner(debug=True) as runner:
                runner.get_loop().slow_callback_duration = SLOW_CALLBACK_SECONDS
                result = runner.run(arun_python(code, **kwargs))  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
    assert not [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    return result
