"""A run's settings: what ``run`` was given, saved with the run so ``resume`` rebuilds it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loop_agents.loop.records import Selection, check_select
from loop_agents_cli.models.endpoints import EndpointSpec
from loop_agents_cli.models.settings import SettingsError

SPEC_VERSION = 1
"""The form of the saved settings; a later form must still read this one."""


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines a run of ``loop-agents run`` (never an API key).

    ``check`` runs in ``cwd`` (where ``run`` was started) for at most ``check_timeout``
    seconds; ``select`` is ``best`` or ``last`` (a run saved before it existed reads as
    ``last``); ``inside``: the loop runs inside the agent (``run --inside-agent``).
    """

    task: str
    rubric: str | None
    check: str | None
    check_timeout: float
    threshold: float
    max_iterations: int
    system: str
    cwd: str
    endpoint: EndpointSpec
    select: Selection = "best"
    inside: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready values, with their form's version."""
        return {
            "version": SPEC_VERSION,
            "task": self.task,
            "rubric": self.rubric,
            "check": self.check,
            "check_timeout": self.check_timeout,
            "threshold": self.threshold,
            "max_iterations": self.max_iterations,
            "system": self.system,
            "cwd": self.cwd,
            "endpoint": self.endpoint.to_dict(),
            "select": self.select,
            "inside": self.inside,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """The settings saved by `to_dict`; `SettingsError` if ``data`` is not such settings.

        Example:
            ```python
            spec = RunSpec.from_dict(saved_run.settings)
            ```
        """
        version = data.get("version")
        if version != SPEC_VERSION:
            raise SettingsError(
                f"the run was saved in form {version!r}; this loop-agents reads form "
                f"{SPEC_VERSION} (upgrade loop-agents to resume it)"
            )
        try:
            spec = cls(
                task=_text(data["task"]),
                rubric=_optional_text(data.get("rubric")),
                check=_optional_text(data.get("check")),
                check_timeout=float(data["check_timeout"]),
                threshold=float(data["threshold"]),
                max_iterations=int(data["max_iterations"]),
                system=_text(data["system"]),
                cwd=_text(data["cwd"]),
                endpoint=EndpointSpec.from_dict(data["endpoint"]),
                select=check_select(data.get("select", "last")),
                inside=_flag(data.get("inside", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SettingsError(f"the saved settings of the run are damaged ({exc!r})") from exc
        if not (math.isfinite(spec.check_timeout) and spec.max_iterations >= 1):
            raise SettingsError("the saved settings of the run are damaged")
        return spec


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)
