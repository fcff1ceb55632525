r"""Running untrusted Python: limits, killing every process it started, no secret of yours.

`run_python` (blocking) and `arun_python` (asyncio) run a program as ``answer.py`` with
``python -I`` in a fresh empty folder, with a minimal environment and stdin closed, under
time, memory, output, file-size and process limits, and return a `RunResult`. Each call
returns within ``timeout + GRACE_SECONDS`` (2 s), and no process the program started (in a
new session, after a double fork, ignoring SIGTERM, holding the pipes) outlives it.

``isolation`` chooses how the program is kept apart (``"auto"``: the first that works):

- ``"bwrap"``: bubblewrap namespaces; other processes invisible; the caller's secrets not
  readable; the file system read-only but the work folder, with a private /tmp and the
  home hidden.
- ``"unshare"``: util-linux namespaces; other processes invisible; secrets not readable;
  the file system is the caller's user's.
- ``"process"``: no namespace; other processes visible; as root the secrets are not readable
  (the program has a user of its own), **as a regular user they are** (through /proc).

As root the program always runs as a user id of its own for the run (or, under bwrap with an
interpreter only root can read, as root without capabilities inside a user namespace, capped
by a pids cgroup). ``max_processes`` caps processes and threads: exactly in the namespaces
and for a user of its own, approximately in ``"process"`` for a regular user (whose other
processes count too). Nothing here restricts the network, and the program may read the files
its user may read. The user documentation, with what each isolation does not stop, is
``docs/sandbox.md``.

Example:
    ```python
    from loop_agents_checks.sandbox import run_python

    result = run_python("print(6 * 7)", timeout=5, max_processes=8)
    assert result.ok and result.stdout == "42\n"
    print(result.isolation)  # e.g. "bwrap"
    ```
"""

from loop_agents_checks.sandbox.isolation import (
    IsolationUnavailable,
    available_isolations,
    resolve_isolation,
)
from loop_agents_checks.sandbox.limits import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
    GRACE_SECONDS,
    ISOLATIONS,
    SCRIPT_NAME,
    Isolation,
    RunLimits,
    make_limits,
)
from loop_agents_checks.sandbox.result import RunResult
from loop_agents_checks.sandbox.runner import arun_python, run_python

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_MAX_PROCESSES",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT",
    "GRACE_SECONDS",
    "ISOLATIONS",
    "SCRIPT_NAME",
    "Isolation",
    "IsolationUnavailable",
    "RunLimits",
    "RunResult",
    "arun_python",
    "available_isolations",
    "make_limits",
    "resolve_isolation",
    "run_python",
]
