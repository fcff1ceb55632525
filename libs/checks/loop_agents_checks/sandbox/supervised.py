"""`run_supervised`: a command of the caller's, with the code runner's process-tree guarantees.

A command check (`loop_agents_checks.command_check`) runs with the caller's rights, in no
isolation; it still runs under the sandbox's supervisor, so nothing it starts outlives it,
and its output is read as a run's is: through a pipe, keeping a bounded head and tail.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from loop_agents_checks.sandbox.isolation import Plan, supervisor_command
from loop_agents_checks.sandbox.limits import make_limits
from loop_agents_checks.sandbox.result import RunResult
from loop_agents_checks.sandbox.runner import _start_and_wait, status_pipe

__all__ = ["run_supervised"]


def run_supervised(
    argv: list[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    timeout: float,
    max_output: int,
    cancel: threading.Event | None = None,
) -> RunResult:
    r"""Run a command as the caller, under the supervisor, with stderr merged into stdout.

    No isolation and no resource limit: the command runs with the caller's rights (a
    command check). What it shares with `run_python` is the process tree: every process
    the command starts, also in a new session (``setsid``) or after a double fork, is
    killed when the command ends, when it overruns ``timeout`` and when ``cancel`` is set;
    and its output is read through a pipe keeping at most ``max_output`` bytes (the head
    and the tail), never written to a file.

    Example:
        ```python
        result = run_supervised(["/bin/sh", "-c", "echo hi"], cwd=None, env={}, timeout=5,
                                max_output=65536)
        assert result.ok and result.stdout == "hi\n"
        ```
    """
    limits = make_limits(timeout, None, max_output, None, isolation="process", max_processes=None)
    with status_pipe() as (status_read, status_write):
        command = supervisor_command(
            limits.python, status_write.fd, kill_all=False, rlimits={}, flags=[], program=argv
        )
        plan = Plan(isolation="process", command=command, env=dict(env))
        workdir = cwd or os.getcwd()
        return _start_and_wait(
            plan, limits, workdir, "", status_read, status_write, cancel, merge_stderr=True
        )
