"""The bundled server's process: whether a port is served by it, how it ended, its log folders.

Only the standard library is used; which process listens on a port is read from Linux's
``/proc`` (`serves_port` answers ``None`` elsewhere).

Example:
    ```python
    exit_description(-11)  # 'killed by signal 11 (SIGSEGV, a crash)'
    ```
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

LOG_FOLDER_PREFIX = "loop_agents_llama_"
"""The name of every server's log folder starts with this, then the starting process's id."""

_OWNER = re.compile(rf"^{LOG_FOLDER_PREFIX}(\d+)_")
_GRACE_SECONDS = 60.0
"""A folder without an owner's id in its name (made by an older version) is left alone
for this long after its last change: it may be about to receive its log file."""

_CRASHES = {
    signal.SIGSEGV: "a crash",
    signal.SIGBUS: "a crash",
    signal.SIGILL: "an instruction this CPU does not have",
    signal.SIGFPE: "a crash",
    signal.SIGABRT: "an abort",
}
_KILLS = {
    signal.SIGKILL: "killed from outside: by a user, or by the system when memory ran out",
    signal.SIGTERM: "stopped from outside",
    signal.SIGINT: "interrupted",
    signal.SIGHUP: "its terminal closed",
}


def _signal_of(code: int) -> int | None:
    """The signal that ended a process with ``code``: Popen's ``-N``, or a shell's ``128+N``."""
    if code < 0:
        return -code
    if 128 < code < 128 + 65:
        return code - 128
    return None


def crashed(code: int) -> bool:
    """Whether exit code ``code`` (Popen's ``-N`` or a shell's ``128+N``) is a crash.

    Example:
        ```python
        assert crashed(-11) and crashed(139) and not crashed(1)
        ```
    """
    number = _signal_of(code)
    return number is not None and number in {int(s) for s in _CRASHES}


def exit_description(code: int) -> str:
    """How a process with exit code ``code`` ended, in words.

    Example:
        ```python
        exit_description(139)  # 'exit status 139: signal 11 (SIGSEGV, a crash)'
        ```
    """
    number = _signal_of(code)
    if number is None:
        return f"exit status {code}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    known = {int(k): v for k, v in (_CRASHES | _KILLS).items()}
    what = f"{name}, {known[number]}" if number in known else name
    if code < 0:
        return f"killed by signal {number} ({what})"
    return f"exit status {code}: signal {number} ({what})"


# -- who listens on a port (Linux) -----------------------------------------------------------


def default_threads(cpu_count: int | None = None) -> int:
    """The bundled server's CPU threads when none are set: half the cores, at least 1.

    llama.cpp's threads meet at a barrier per operation: on a loaded machine one thread per
    core is slower than half as many. Agent and judge rarely compute at once.

    Example:
        ```python
        assert default_threads(2) == 1 and default_threads(8) == 4
        ```
    """
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return max(1, cores // 2)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def someone_listens(host: str, port: int) -> bool:
    """Whether a process listens on ``host``'s TCP ``port`` already."""
    address = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str] | None:
    """The socket inodes listening on TCP ``port`` (any address), or None when unknown."""
    found: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st ... inode: LISTEN is state 0A
            listening = len(fields) > 9 and fields[3] == "0A"
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found if readable else None


def _fd_targets(pid: int | str) -> list[str]:
    """Where the open file descriptors of process ``pid`` lead (those this user may read)."""
    targets: list[str] = []
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                targets.append(os.readlink(fd.path))
    return targets


def _socket_inodes(pid: int) -> set[str]:
    return {target[8:-1] for target in _fd_targets(pid) if target.startswith("socket:[")}


def serves_port(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` is the one listening on TCP ``port`` (``None``: no ``/proc``).

    Example:
        ```python
        if serves_port(server.process.pid, server.port) is False:
            print("another process answers on that port")
        ```
    """
    listening = _listening_inodes(port)
    if listening is None:
        return None
    return bool(listening & _socket_inodes(pid))


# -- log folders -------------------------------------------------------------------------------


def new_log_folder() -> str:
    """A new log folder in the temporary folder, named after this process's id."""
    return tempfile.mkdtemp(prefix=f"{LOG_FOLDER_PREFIX}{os.getpid()}_")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _open_paths_under(folder: Path) -> set[Path] | None:
    """The folders in ``folder`` that a process holds a file open in; None when unknown."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    held: set[Path] = set()
    prefix = str(folder) + os.sep + LOG_FOLDER_PREFIX
    for entry in proc.iterdir():
        for target in _fd_targets(entry.name) if entry.name.isdigit() else []:
            if target.startswith(prefix):
                held.add(folder / Path(target[len(str(folder)) + 1 :]).parts[0])
    return held


def remove_stale_log_folders(folder: str | Path | None = None) -> list[Path]:
    """Remove the log folders of servers that are gone (the current user's); return them.

    A folder stays while the process that made it (the id in its name) lives, while a process
    holds a file in it open, and (an older version's, without an id) for a minute.

    Example:
        ```python
        for removed in remove_stale_log_folders():
            print("removed", removed)
        ```
    """
    base = Path(folder) if folder is not None else Path(tempfile.gettempdir())
    try:
        candidates = [
            entry
            for entry in base.iterdir()
            if entry.name.startswith(LOG_FOLDER_PREFIX)
            and entry.is_dir()
            and not entry.is_symlink()
            and entry.lstat().st_uid == os.getuid()
        ]
    except OSError:
        return []
    stale: list[Path] = []
    for entry in candidates:
        owner = _OWNER.match(entry.name)
        if owner is not None:
            if alive(int(owner[1])):
                continue
        else:
            with contextlib.suppress(OSError):
                if time.time() - entry.stat().st_mtime < _GRACE_SECONDS:
                    continue
        stale.append(entry)
    if not stale:
        return []
    held = _open_paths_under(base)
    removed: list[Path] = []
    for entry in stale:
        if held is not None and entry in held:
            continue
        if held is None and _OWNER.match(entry.name) is None:
            continue  # nothing says whether an older version's server still writes to it
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed
