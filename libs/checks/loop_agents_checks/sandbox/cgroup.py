"""A pids cgroup per run: caps the processes of a program that runs with user id 0.

Root is exempt from ``RLIMIT_NPROC``; no user escapes ``pids.max``. Only cgroup v1
(``/sys/fs/cgroup/pids``) is used: v2 would need a delegated subtree.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from contextlib import suppress
from pathlib import Path

__all__ = ["PidsCgroup", "pids_cgroup_root"]

_V1_ROOT = Path("/sys/fs/cgroup/pids")


def pids_cgroup_root() -> Path | None:
    """The v1 pids cgroup this process is in, when this process may make cgroups in it."""
    if os.geteuid() != 0 or not (_V1_ROOT / "cgroup.procs").exists():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            here = _V1_ROOT / path.lstrip("/")
            return here if os.access(here, os.W_OK) else None
    return None


class PidsCgroup:
    """A cgroup made for one run, removed by `remove`."""

    def __init__(self, parent: Path, max_tasks: int) -> None:
        self.path = parent / f"loop_agents-{uuid.uuid4().hex[:16]}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(max_tasks))

    @property
    def procs_file(self) -> str:
        """The file a process writes its pid to, to join the cgroup."""
        return str(self.path / "cgroup.procs")

    def pids(self) -> list[int]:
        """The processes in the cgroup."""
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self, *, within: float) -> bool:
        """SIGKILL every process in the cgroup until it is empty; whether it is."""
        deadline = time.monotonic() + within
        while pids := self.pids():
            for pid in pids:
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def remove(self, *, within: float) -> None:
        """Kill what is left and remove the cgroup (a dying task may keep it busy briefly)."""
        self.kill(within=within)
        deadline = time.monotonic() + within
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
