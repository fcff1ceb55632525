"""Finding and killing processes through ``/proc``, and the dedicated users root runs code as.

Under root a program gets a user id of its own (`pick_uid`): ``RLIMIT_NPROC`` then counts
only its processes, it cannot read others' ``/proc/*/environ``, and `kill_uid` ends them all.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import suppress

__all__ = [
    "DEDICATED_UIDS",
    "children",
    "kill_uid",
    "pick_uid",
    "tasks_of_uid",
    "uids_alive",
]

# user ids a run may be given under root: above the ranges systemd gives to users, system
# services and containers
DEDICATED_UIDS = range(0x71000000, 0x72000000)


def _status(pid: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def _pids() -> list[str]:
    return [entry for entry in os.listdir("/proc") if entry.isdigit()]


def _of_uid(uid: int) -> Iterator[tuple[str, dict[str, str]]]:
    """Each process whose real user id is ``uid``, and its ``/proc/PID/status`` fields."""
    for pid in _pids():
        try:
            status = _status(pid)
        except OSError:
            continue
        if int(status.get("Uid", "-1 ").split()[0]) == uid:
            yield pid, status


def uids_alive(uid: int) -> list[int]:
    """Processes whose real user id is ``uid`` and that have not exited (zombies left out)."""
    return [
        int(pid) for pid, status in _of_uid(uid) if status.get("State", "")[:1] not in ("Z", "X")
    ]


def tasks_of_uid(uid: int) -> int:
    """Processes and threads whose real user id is ``uid`` (what ``RLIMIT_NPROC`` counts)."""
    return sum(int(status.get("Threads", "1")) for _, status in _of_uid(uid))


def children(pid: int) -> list[int]:
    """The children of ``pid``."""
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                kids.extend(int(child) for child in handle.read().split())
        return kids
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            return []
    except OSError:
        pass
    for entry in _pids():  # no CONFIG_PROC_CHILDREN: compare every process's parent
        with suppress(OSError, ValueError, KeyError):
            if int(_status(entry)["PPid"]) == pid:
                kids.append(int(entry))
    return kids


def _mapped(uid: int) -> bool:
    """Whether ``uid`` exists in this process's user namespace."""
    try:
        with open("/proc/self/uid_map") as handle:
            ranges = [tuple(map(int, line.split())) for line in handle if line.strip()]
    except OSError:
        return True
    return any(start <= uid < start + length for start, _outer, length in ranges)


def pick_uid() -> int:
    """A user id from `DEDICATED_UIDS` that no process uses now.

    Raises:
        RuntimeError: the range is not mapped in this user namespace.
    """
    rng = random.SystemRandom()
    for _ in range(100):
        uid = rng.choice(DEDICATED_UIDS)
        if not _mapped(uid):
            raise RuntimeError(
                f"user id {uid} is not mapped in this user namespace "
                f"(/proc/self/uid_map), so a program cannot run as a user of its own"
            )
        if not uids_alive(uid):
            return uid
    raise RuntimeError("no free user id found for the program")  # pragma: no cover


def kill_uid(uid: int, python: str, *, within: float) -> bool:
    """Kill every process of ``uid`` with ``kill(-1, SIGKILL)`` made as that user.

    Repeated until none is left (then it returns ``True``) or ``within`` seconds have passed.
    """
    # that one call reaches every process of the user atomically (one forking at that
    # moment cannot slip through), whatever its session, process group or parent
    deadline = time.monotonic() + within
    while uids_alive(uid):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        with suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [python, "-I", "-S", "-c", "import os; os.kill(-1, 9)"],
                user=uid,
                group=uid,
                extra_groups=[],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=max(left, 0.1),
                check=False,
            )
        time.sleep(0.005)
    return True


def kill_tree_of(pid: int) -> None:
    """SIGKILL ``pid``'s process group (the supervisor of a run started in its own session)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
