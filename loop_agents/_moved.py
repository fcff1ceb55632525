"""Names that moved in 0.2: the old import paths work for one release, with a warning.

`moved_attribute` is what a module's ``__getattr__`` (PEP 562) calls for a name that no
longer lives there: it imports the name from its new module, warns with a
``DeprecationWarning`` naming the new import, and returns it. The old paths go in 0.3.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any


def moved_attribute(old_module: str, name: str, moved: Mapping[str, str]) -> Any:
    """``name`` from its new module (``moved[name]``), with a `DeprecationWarning`.

    Raises:
        AttributeError: ``name`` did not move from ``old_module`` either.

    Example:
        ```python
        def __getattr__(name):
            return moved_attribute(__name__, name, {"old": "loop_agents.new"})
        ```

    """
    new_module = moved.get(name)
    if new_module is None:
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
    warnings.warn(
        f"{old_module}.{name} moved: import it with 'from {new_module} import {name}' "
        f"(the old path goes in loop_agents 0.3)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(new_module), name)


def moved_module(old_module: str, new_module: str) -> Any:
    """The module that replaced ``old_module``, with a `DeprecationWarning`."""
    warnings.warn(
        f"the module {old_module} moved to {new_module}; import from there (the old path "
        f"goes in loop_agents 0.3)",
        DeprecationWarning,
        stacklevel=3,
    )
    return importlib.import_module(new_module)
