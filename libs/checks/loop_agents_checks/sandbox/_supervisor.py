"""The first program of every run: start the answer, wait for it, kill whatever it left.

This file is not imported by the runner: its source is passed to the interpreter with
``python -I -S -c`` (so it needs nothing but the standard library and no file the sandboxed
user might be unable to read). It runs inside the isolation (the PID namespace, the
dedicated user) and

1. marks itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every process the answer
   starts and orphans, even in a new session (``setsid``) or after a double fork, becomes
   its child rather than init's;
2. forks the answer, which sets its resource limits (``RLIMIT_AS``, ``RLIMIT_CPU``,
   ``RLIMIT_FSIZE``, ``RLIMIT_NPROC``, ...) and ``PR_SET_NO_NEW_PRIVS``, closes every
   inherited descriptor above stderr and becomes the program (``python -I -X utf8
   answer.py`` for the code runner, ``/bin/sh -c COMMAND`` for a command check);
3. reaps orphans until the answer exits, then kills everything that is left: with
   ``kill(-1, SIGKILL)`` when that reaches only this run's processes (inside a PID
   namespace, or as a user of its own), else child by child until it has none;
4. writes ``exit N`` or ``signal N`` (how the answer ended) to the status descriptor.

On SIGTERM (the runner's time limit in the plain process isolation) it kills the answer and
everything left in the same way, and exits.

Arguments: ``STATUS_FD all|tree LIMITS_JSON FLAGS PROGRAM [ARGUMENT...]``. ``FLAGS`` is a
comma-separated list or ``-``: ``drop-pwd`` (bwrap set ``PWD``, which the program's
environment does not have in the other isolations), ``no-new-privs`` (set
``PR_SET_NO_NEW_PRIVS`` for the program: no setuid program can raise its rights).
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
    """Run the answer; see the module docstring."""
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
