"""The first program of every run: start the answer, wait for it, kill whatever it left.

Run as ``python -I -S -c SOURCE`` (standard library only, no file to read) inside the
isolation. A child subreaper, it forks the program (which sets its resource limits, closes
inherited descriptors and execs), reaps orphans until the program exits or SIGTERM comes,
kills every process left and writes ``exit N`` or ``signal N`` to the status descriptor.

Arguments: ``STATUS_FD all|tree LIMITS_JSON FLAGS PROGRAM [ARGUMENT...]``: ``all`` kills with
``kill(-1)`` (a PID namespace, or a user of its own), ``tree`` child by child; ``FLAGS`` is
``-`` or a comma-separated list of ``no-new-privs`` (``PR_SET_NO_NEW_PRIVS`` for the program)
and ``drop-pwd`` (unset the ``PWD`` bwrap sets).
"""

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)


def _set_limit(name: str, value: int) -> None:
    which = getattr(resource, name)
    hard = resource.getrlimit(which)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _children() -> list[int]:
    """This process's children (zombies included)."""
    me = os.getpid()
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{task}/children") as handle:
                kids.extend(int(pid) for pid in handle.read().split())
        return kids
    except OSError:  # no CONFIG_PROC_CHILDREN: scan every process's parent
        pass
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == me:
                        kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def _reap_all() -> bool:
    """Reap every child that has exited; whether any child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_everything(kill_all: bool) -> None:
    """Kill every process this run left, and reap them (they are all our children)."""
    if kill_all:
        # One call, atomic against fork: every process of this PID namespace, or of this
        # dedicated user, except the supervisor itself (the init of its PID namespace).
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    while True:
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not _reap_all():
            return
        time.sleep(0.002)


def main(argv: list[str]) -> None:
    """Run the answer (see the module docstring)."""
    status_fd, mode, limits_json, flags = argv[1:5]
    program_argv = argv[5:]
    pwd_set_by_bwrap = "drop-pwd" in flags.split(",")
    status = int(status_fd)
    kill_all = mode == "all"
    limits: dict[str, int] = json.loads(limits_json)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if "no-new-privs" in flags.split(","):
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    me = os.getpid()

    def on_term(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != me:  # the answer, between fork and exec
            os._exit(128 + signum)
        kill_everything(kill_all)
        _report(status, f"signal {signal.SIGKILL}")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    program = os.fork()
    if program == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.closerange(3, 1 << 20)
            if pwd_set_by_bwrap:
                os.environ.pop("PWD", None)
            for name, value in limits.items():
                _set_limit(name, value)
            os.execv(program_argv[0], program_argv)
        except BaseException as exc:
            os.write(2, f"loop_agents runner: cannot start {program_argv[0]}: {exc}\n".encode())
        os._exit(127)
    while True:
        try:
            pid, how = os.waitpid(-1, 0)
        except ChildProcessError:  # pragma: no cover - the answer is always our child
            how = 0
            break
        if pid == program:
            break
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_everything(kill_all)
    if os.WIFSIGNALED(how):
        _report(status, f"signal {os.WTERMSIG(how)}")
    else:
        _report(status, f"exit {os.waitstatus_to_exitcode(how)}")


def _report(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, text.encode())


if __name__ == "__main__":
    main(sys.argv)
