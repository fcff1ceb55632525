"""Helpers for the distribution tests: ``scripts/check_dist.py`` and the lock files."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
"""A pinned line of a lock file: ``name==version`` (hashes and markers follow)."""


def check_dist_module() -> ModuleType:
    """``scripts/check_dist.py``, imported from its file (``scripts`` is no package)."""
    spec = importlib.util.spec_from_file_location("check_dist", ROOT / "scripts" / "check_dist.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def check_dist(dist: Path) -> list[str]:
    """Every problem ``make dist``'s check finds in the distributions in ``dist``."""
    problems: list[str] = check_dist_module().dist_problems(dist, ROOT)
    return problems


def lock_pins(path: Path) -> dict[str, str]:
    """The pins of a lock file: normalized project name -> version."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line)
        if match:
            pins[normalize(match[1])] = match[2]
    return pins


def locked_constraints(path: Path) -> str:
    """A pip constraints file of the lock's pins without their hashes.

    pip's hash-checking mode does not take constraints as pins, so a wheel installed with
    the lock as constraints gets the lock's versions without the hash check.
    """
    return "".join(f"{name}=={version}\n" for name, version in lock_pins(path).items())


def normalize(name: str) -> str:
    """A project name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()
