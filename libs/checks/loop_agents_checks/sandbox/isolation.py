"""Which isolation a run gets (``"bwrap"``, ``"unshare"``, ``"process"``) and its command.

As root the program runs as a user id of its own (`processes.pick_uid`); under bwrap, with an
interpreter only root can read, as root without capabilities inside a user namespace, its
processes capped by a pids cgroup.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from loop_agents_checks.sandbox.cgroup import PidsCgroup, pids_cgroup_root
from loop_agents_checks.sandbox.limits import RunLimits
from loop_agents_checks.sandbox.processes import pick_uid, tasks_of_uid

__all__ = [
    "IsolationUnavailable",
    "Plan",
    "available_isolations",
    "choose_identity",
    "clean_env",
    "make_plan",
    "resolve_isolation",
]

logger = logging.getLogger("loop_agents")

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_SUPERVISOR = (Path(__file__).parent / "_supervisor.py").read_text(encoding="utf-8")
_PROBE_TIMEOUT = 20.0


class IsolationUnavailable(RuntimeError):
    """The isolation asked for cannot run on this machine; the message says why."""


def clean_env(limits: RunLimits, workdir: str) -> dict[str, str]:
    """The whole environment of the sandbox's processes: nothing of the caller's but PATH."""
    return {
        "PATH": os.environ.get("PATH", _SAFE_PATH),
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        **limits.env,
    }


def _is_root() -> bool:
    return os.geteuid() == 0


def _run_probe(command: list[str], uid: int | None) -> subprocess.CompletedProcess[str] | str:
    try:
        return subprocess.run(
            command,
            env={"PATH": os.environ.get("PATH", _SAFE_PATH), "LANG": "C.UTF-8"},
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT,
            check=False,
            user=uid,
            group=uid,
            extra_groups=[] if uid is not None else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)


_INFO = "import json, sys; print(json.dumps([sys.version, sys.prefix, sys.base_prefix, sys.path]))"


@functools.cache
def usable_by_others(python: str) -> bool:
    """Whether another user runs ``python`` as it runs for us (same prefix, same path)."""
    mine = _run_probe([python, "-I", "-c", _INFO], None)
    theirs = _run_probe([python, "-I", "-c", _INFO], pick_uid())
    return (
        not isinstance(mine, str)
        and not isinstance(theirs, str)
        and mine.returncode == 0
        and (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout)
    )


_FOLDERS = (
    "import json, os, sys; exe = os.path.realpath(sys.executable); "
    "print(json.dumps([sys.prefix, sys.base_prefix, os.path.dirname(exe)]))"
)


@functools.cache
def interpreter_folders(python: str) -> tuple[str, ...]:
    """The folders ``python`` runs from (its prefixes and its executable's folder)."""
    # the path as given counts too: a virtual environment's bin/python links to the base
    # interpreter, and the environment (pyvenv.cfg, the links) must be visible to start it
    given = os.path.dirname(os.path.abspath(python))
    found = {os.path.dirname(os.path.realpath(python)), given}
    environment = os.path.dirname(given)
    if os.path.isfile(os.path.join(environment, "pyvenv.cfg")):
        found.add(environment)
    probe = _run_probe([python, "-I", "-S", "-c", _FOLDERS], None)
    if not isinstance(probe, str) and probe.returncode == 0:
        with contextlib.suppress(ValueError):
            found |= {str(folder) for folder in json.loads(probe.stdout)}
    return tuple(sorted(os.path.realpath(folder) for folder in found))


def _hidden_folders() -> list[str]:
    """Folders bwrap replaces by an empty tmpfs: /tmp and the caller's home."""
    hidden = ["/tmp"]
    home = os.path.realpath(os.path.expanduser("~"))
    if home not in ("/", "/tmp") and os.path.isdir(home):
        hidden.append(home)
    return hidden


def _hiding_options(python: str, tmpfs_bytes: int | None) -> list[str]:
    """``--tmpfs`` over /tmp and the home, then ``--ro-bind`` of the interpreter's folders."""
    # the interpreter (a virtualenv in the home, pyenv under /root) stays usable; nothing
    # else of the home (~/.ssh, a project's .env) is visible, and the home is read-only
    hidden = _hidden_folders()
    options = [*_size(tmpfs_bytes), "--tmpfs", "/tmp"]
    for folder in hidden[1:]:
        options += ["--tmpfs", folder]
    tmp = os.path.realpath(tempfile.gettempdir())
    for folder in interpreter_folders(python):
        inside = [
            h for h in [*hidden, tmp] if folder == h or folder.startswith(h.rstrip("/") + "/")
        ]
        if inside:
            options += ["--ro-bind", folder, folder]
    for folder in hidden[1:]:  # once the interpreter's folders are bound in it
        options += ["--remount-ro", folder]
    return options


def _size(tmpfs_bytes: int | None) -> list[str]:
    return [] if tmpfs_bytes is None else ["--size", str(tmpfs_bytes)]


def tmpfs_size(memory_limit: int | None) -> int | None:
    """Bytes each of /tmp and /dev/shm may hold under bwrap: half ``memory_limit``, or ``None``.

    Example:
        ```python
        assert tmpfs_size(64 * 2**20) == 32 * 2**20 and tmpfs_size(None) is None
        ```
    """
    if memory_limit is None:
        return None
    # files there are held in memory but not counted in RLIMIT_AS: together within the limit
    page = 4096
    return max(page, memory_limit // 2 // page * page)


def _bwrap_command(
    python: str, bind: str, chdir: str, memory_limit: int | None = None
) -> list[str]:
    """The bwrap prefix of a run: /dev is read-only but for a sized /dev/shm."""
    bwrap = shutil.which("bwrap") or "bwrap"
    tmpfs_bytes = tmpfs_size(memory_limit)
    return [
        bwrap,
        *("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"),
        *("--unshare-cgroup-try", "--die-with-parent", "--as-pid-1", "--cap-drop", "ALL"),
        *("--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"),
        *_size(tmpfs_bytes),
        *("--tmpfs", "/dev/shm", "--remount-ro", "/dev"),
        *_hiding_options(python, tmpfs_bytes),
        *("--bind", bind, bind, "--chdir", chdir, "--"),
    ]


def _unshare_command() -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    return [
        unshare,
        *("--user", "--map-current-user", "--pid", "--fork", "--kill-child"),
        *("--mount", "--mount-proc", "--ipc", "--uts", "--"),
    ]


@functools.cache
def _namespace_reason(isolation: str, python: str, as_uid: bool) -> str | None:
    """Why ``isolation`` does not start ``python`` here, or ``None`` when it does."""
    if not sys.platform.startswith("linux"):
        return f"{isolation} needs Linux namespaces; this is {sys.platform}"
    tool = "bwrap" if isolation == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        package = "bubblewrap" if tool == "bwrap" else "util-linux"
        return f"{tool} is not installed (Debian/Ubuntu: apt-get install {package})"
    tmp = tempfile.gettempdir()
    prefix = _bwrap_command(python, tmp, "/") if tool == "bwrap" else _unshare_command()
    probe = _run_probe(
        [*prefix, python, "-I", "-S", "-c", "print('ok')"], pick_uid() if as_uid else None
    )
    if isinstance(probe, str):
        return f"{tool} could not start: {probe}"
    if probe.returncode != 0 or probe.stdout.strip() != "ok":
        said = (probe.stderr.strip() or probe.stdout.strip())[:300]
        return f"{tool} failed here (exit code {probe.returncode}): {said}"
    return None


@dataclass(frozen=True)
class _Choice:
    isolation: str
    identity: str  # "caller", "uid" (a user of its own) or "root" (root in a user namespace)
    cgroup: Path | None = None
    uid: int | None = None  # the run's own user id, picked for each run (identity "uid")


def _choose(isolation: str, limits: RunLimits) -> _Choice | str:
    """How ``isolation`` would run ``limits.python`` here, or why it cannot."""
    python = limits.python
    if not os.path.exists(python):
        return f"the interpreter {python!r} does not exist"
    root = _is_root()
    if not root or usable_by_others(python):
        if isolation != "process":
            reason = _namespace_reason(isolation, python, root)
            if reason:
                return reason
        return _Choice(isolation, "uid" if root else "caller")
    why = (
        f"running as root, the program must run as an unprivileged user, and that user "
        f"cannot use the interpreter {python} (it lives where only root may read, or runs "
        f"differently for another user); pass python= an interpreter that every user can "
        f"read, such as /usr/bin/python3"
    )
    if isolation != "bwrap":
        return why
    reason = _namespace_reason("bwrap", python, False)
    if reason:
        return reason
    cgroup = pids_cgroup_root()
    if limits.max_processes is not None and cgroup is None:
        return f"{why}, or run where a pids cgroup (v1) can be made to cap the processes"
    return _Choice("bwrap", "root", cgroup if limits.max_processes is not None else None)


def _resolve(limits: RunLimits) -> _Choice:
    order = ("bwrap", "unshare", "process") if limits.isolation == "auto" else (limits.isolation,)
    reasons: list[str] = []
    for isolation in order:
        choice = _choose(isolation, limits)
        if isinstance(choice, _Choice):
            if limits.isolation == "auto" and choice == _Choice("process", "caller"):
                _warn_weak_fallback("; ".join(reasons))
            return choice
        reasons.append(f"{isolation}: {choice}")
    raise IsolationUnavailable(
        f"isolation={limits.isolation!r} is not available on this machine: "
        + "; ".join(reasons)
        + ". Choose another isolation (see loop_agents_checks.sandbox) or install what is missing."
    )


@functools.cache
def _warn_weak_fallback(reasons: str) -> None:
    """Log, once per process and cause, that ``"auto"`` got the weakest isolation."""
    logger.warning(
        "sandbox: isolation='auto' runs code with isolation='process' as your own user, so "
        "the program can read the environment (secrets) and memory of your processes and a "
        "program that kills its supervisor can leave processes behind (%s). Install "
        "bubblewrap or allow unprivileged user namespaces for 'bwrap'/'unshare', or pass "
        "isolation='process' to accept it without this warning",
        reasons,
    )


def resolve_isolation(limits: RunLimits) -> str:
    """The isolation a run with ``limits`` gets here (``"auto"`` resolved).

    Raises:
        IsolationUnavailable: the isolation asked for cannot run here; says why.

    Example:
        ```python
        assert resolve_isolation(make_limits(isolation="auto")) in {"bwrap", "unshare", "process"}
        ```
    """
    return _resolve(limits).isolation


def available_isolations(limits: RunLimits | None = None) -> dict[str, str | None]:
    """Each isolation mapped to ``None`` when it works here, else the reason it does not.

    Example:
        ```python
        print(available_isolations())  # {'bwrap': None, 'unshare': None, 'process': None}
        ```
    """
    limits = limits or RunLimits()
    found: dict[str, str | None] = {}
    for isolation in ("bwrap", "unshare", "process"):
        choice = _choose(isolation, limits)
        found[isolation] = None if isinstance(choice, _Choice) else choice
    return found


@dataclass
class Plan:
    """How one run is started and cleaned up."""

    isolation: str
    command: list[str]
    env: dict[str, str]
    uid: int | None = None
    cgroup: PidsCgroup | None = None


def _rlimits(limits: RunLimits, nproc: int | None) -> dict[str, int]:
    found = {"RLIMIT_CPU": int(limits.timeout) + 2, "RLIMIT_CORE": 0}
    if limits.memory_limit is not None:
        found["RLIMIT_AS"] = limits.memory_limit
    if limits.max_file_size is not None:
        found["RLIMIT_FSIZE"] = limits.max_file_size
    if nproc is not None:
        found["RLIMIT_NPROC"] = nproc
    return found


def choose_identity(limits: RunLimits) -> _Choice:
    """The run's isolation and, for root, its own user id (its files are made its own).

    Raises:
        IsolationUnavailable: the isolation cannot run here.
    """
    choice = _resolve(limits)
    return replace(choice, uid=pick_uid()) if choice.identity == "uid" else choice


def supervisor_command(
    python: str,
    status_fd: int,
    *,
    kill_all: bool,
    rlimits: dict[str, int],
    flags: list[str],
    program: list[str],
) -> list[str]:
    """The command that runs ``program`` under the supervisor (see ``_supervisor.py``)."""
    return [
        python,
        *("-I", "-S", "-c", _SUPERVISOR),
        str(status_fd),
        "all" if kill_all else "tree",
        json.dumps(rlimits),
        ",".join(flags) or "-",
        *program,
    ]


def make_plan(
    choice: _Choice, limits: RunLimits, root: str, workdir: str, script: str, status_fd: int
) -> Plan:
    """The command of one run, with its user, its cgroup and the program's resource limits."""
    # RLIMIT_NPROC counts every task of the program's user (in its user namespace): the
    # runner's own processes counted with them are added to max_processes, and without a
    # user or namespace of its own ("process" as a regular user) the user's other tasks too
    cap = limits.max_processes
    uid = choice.uid
    cgroup = None
    nproc: int | None = None
    if choice.isolation == "process":
        kill_all = uid is not None
        if cap is not None:
            nproc = cap + 1 if uid is not None else tasks_of_uid(os.getuid()) + cap + 1
        prefix: list[str] = []
    else:
        kill_all = True
        if cap is not None and choice.identity != "root":
            # bwrap's outer process stays in the caller's user namespace; unshare's joins
            # the new one, so it counts with the supervisor
            nproc = cap + (1 if choice.isolation == "bwrap" else 2)
        prefix = (
            _bwrap_command(limits.python, root, workdir, limits.memory_limit)
            if choice.isolation == "bwrap"
            else _unshare_command()
        )
        if choice.cgroup is not None and cap is not None:
            cgroup = PidsCgroup(choice.cgroup, cap + 2)  # bwrap and the supervisor
            prefix = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', cgroup.procs_file, *prefix]
    rlimits = _rlimits(limits, nproc)
    flags = ["no-new-privs"]
    if choice.isolation == "bwrap" and "PWD" not in limits.env:
        flags.append("drop-pwd")
    supervisor = supervisor_command(
        limits.python,
        status_fd,
        kill_all=kill_all,
        rlimits=rlimits,
        flags=flags,
        program=[limits.python, "-I", "-X", "utf8", script],
    )
    return Plan(
        isolation=choice.isolation,
        command=[*prefix, *supervisor],
        env=clean_env(limits, workdir),
        uid=uid,
        cgroup=cgroup,
    )
