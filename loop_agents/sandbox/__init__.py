"""Running untrusted Python: limits, process-tree kill, no secrets (placeholder docstring)."""

from loop_agents.sandbox.isolation import (
    IsolationUnavailable,
    available_isolations,
    resolve_isolation,
)
from loop_agents.sandbox.limits import (
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
from loop_agents.sandbox.result import RunResult
from loop_agents.sandbox.runner import arun_python, run_python

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
