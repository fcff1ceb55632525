"""`remove_tree`: remove a run's folder and everything in it, whatever modes were set."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

__all__ = ["remove_tree"]


def _usable(path: str) -> None:
    """Give the owner read, write and search rights on ``path`` if it is a folder."""
    with suppress(OSError):
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            os.chmod(path, stat.S_IMODE(mode) | stat.S_IRWXU)


def remove_tree(root: str) -> None:
    """Remove ``root`` and everything in it; raise only if something could not be removed.

    Example:
        ```python
        import os, tempfile
        folder = tempfile.mkdtemp()
        os.mkdir(f"{folder}/locked")
        os.chmod(f"{folder}/locked", 0)
        remove_tree(folder)
        assert not os.path.exists(folder)
        ```
    """
    # a program may `chmod 000` a folder it made, or take its write bit off: then nobody can
    # list it or delete from it, and rmtree(ignore_errors=True) leaves it behind silently;
    # everything there is the run's user's, so the modes are given back before each retry
    top = os.path.abspath(root)
    tried: set[tuple[str, str]] = set()

    def retry(function: Callable[..., Any], path: str, _error: object) -> None:
        attempt = (getattr(function, "__name__", ""), path)
        if not os.path.lexists(path) or attempt in tried:
            return  # gone, or already retried once: the check at the end reports it
        tried.add(attempt)
        inside = os.path.abspath(path)
        parent = os.path.dirname(inside)
        if parent == top or parent.startswith(top + os.sep):
            _usable(parent)  # e.g. a folder without its write bit: nothing can be unlinked
        if stat.S_ISDIR(os.lstat(path).st_mode):
            _usable(path)
            _rmtree(path, retry)  # also when listing it failed: rmtree does not go back in
        else:
            function(path)

    if os.path.lexists(top):
        _usable(top)
        _rmtree(top, retry)
    if os.path.lexists(top):  # pragma: no cover - only if the kernel refused (immutable)
        raise OSError(f"could not remove the run's folder {top}")


def _rmtree(path: str, retry: Callable[[Callable[..., Any], str, object], None]) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:  # pragma: no cover - Python 3.11
        shutil.rmtree(path, onerror=retry)
