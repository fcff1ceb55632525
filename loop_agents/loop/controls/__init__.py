"""Moved: the controls are in `loop_agents.controls`.

``from loop_agents.loop.controls import Restart`` still works in this release, with a
`DeprecationWarning`; the old path goes in loop_agents 0.3.
"""

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    controls = importlib.import_module("loop_agents.controls")
    if name.startswith("__") or not hasattr(controls, name):
        raise AttributeError(f"module 'loop_agents.loop.controls' has no attribute {name!r}")
    warnings.warn(
        f"loop_agents.loop.controls moved: import {name} from loop_agents.controls; the old "
        f"path goes in loop_agents 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(controls, name)
