r"""Running untrusted Python: limits, an isolation, every process it started killed.

`run_python` (blocking) and `arun_python` (asyncio) run a program as ``answer.py`` in a
fresh folder under time, memory, output, file-size and process limits, in the isolation
asked for (``"auto"``: the first of ``"bwrap"``, ``"unshare"``, ``"process"`` that works
here; ``"process"`` as a regular user does not hide your secrets). What each isolation
guards, and what none stops (the network), is ``docs/sandbox.md``.

Example:
    ```python
    from loop_agents_checks.sandbox import run_python

    result = run_python("print(6 * 7)", timeout=5, max_processes=8)
    assert result.ok and result.stdout == "42\n"
    print(result.isolation)  # e.g. "bwrap"
    ```
"""

# the standard library only, in every module here: a caller (and an interpreter) without the
# project's dependencies can use the sandbox
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
