"""Moved to `loop_agents.demos.form_problems` (the 相见欢 form belongs to the demo).

This path works for one release, with a ``DeprecationWarning``.
"""

from typing import Any

from loop_agents._moved import moved_module


def __getattr__(name: str) -> Any:
    return getattr(moved_module(__name__, "loop_agents.demos.form_problems"), name)
