r"""Run a Python program in a child process with limits: kept for compatibility.

The runner lives in `loop_agents.sandbox` (isolations, limits, what each one guards); this
module re-exports its public names so that ``from loop_agents.python_runner import
run_python`` keeps working.

Example:
    ```python
    from loop_agents.python_runner import run_python

    result = run_python("print(6 * 7)", timeout=5)
    assert result.ok and result.stdout == "42\\n"
    ```
"""

from __future__ import annotations

from loop_agents.sandbox import (
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
    GRACE_SECONDS,
    ISOLATIONS,
    SCRIPT_NAME,
    Isolation,
    IsolationUnavailable,
    RunLimits,
    RunResult,
    arun_python,
    available_isolations,
    make_limits,
    resolve_isolation,
    run_python,
)

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
