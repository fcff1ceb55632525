"""The sandbox against hostile programs, in every isolation this machine offers.

Each test runs in each isolation (``bwrap``, ``unshare``, ``process``) that works here and
skips the others with the reason (on CI the bubblewrap ones must run), and where it matters
both with ``run_python`` and with ``arun_python`` (whose event loop must log nothing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from sandbox_helpers import MODES, marker, processes_with, python_for, run_either

from loop_agents_checks.sandbox import (
    GRACE_SECONDS,
    IsolationUnavailable,
    arun_python,
    available_isolations,
    make_limits,
    resolve_isolation,
    run_python,
)
from tests.conftest import ROOT

# A run may take its time limit, the grace, and a little for starting the interpreter on
# a busy machine: generous on purpose, it only proves that the call did not hang.
SLACK = 6.0


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> dict[str, str]:
    """Keyword arguments selecting one isolation and an interpreter it can run."""
    return {"isolation": request.param, "python": python_for(request.param)}


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


ESCAPES = """\
import os, signal, subprocess, sys
MARK = {mark!r}
# 1. a child in a new session that keeps stdout and stderr open
subprocess.Popen(["setsid", "sleep", MARK])
# 2. a double fork into a new session
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", MARK])
    os._exit(0)
# 3. a child that ignores SIGTERM, in a process group of its own
subprocess.Popen(
    [sys.executable, "-c",
     "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1e6)",
     MARK],
    process_group=0,
)
print("started", flush=True)
"""


def test_escaped_children_are_killed_when_the_program_exits(mode, kind):
    mark = marker()
    started = time.monotonic()
    result = run_either(kind, ESCAPES.format(mark=mark), timeout=20, **mode)
    elapsed = time.monotonic() - started
    assert result.ok, result.stderr
    assert result.stdout == "started\n"
    assert result.isolation == mode["isolation"]
    assert elapsed < SLACK  # it did not wait for the children (nor for the time limit)
    assert processes_with(mark) == []


def test_a_new_session_holding_the_pipes_cannot_outlast_the_time_limit(mode, kind):
    mark = marker()
    code = ESCAPES.format(mark=mark) + "while True:\n    pass\n"
    started = time.monotonic()
    result = run_either(kind, code, timeout=1.5, **mode)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code == -9
    assert result.stdout == "started\n"  # output before the limit is kept
    assert 1.5 <= elapsed < 1.5 + GRACE_SECONDS + SLACK
    assert processes_with(mark) == []


@pytest.mark.parametrize("then", ["exits", "loops"])
def test_a_program_that_closes_its_own_stdout(mode, kind, then):
    mark = marker()
    code = (
        "import os, subprocess\n"
        "print('before', flush=True)\n"
        "os.close(1)\nos.close(2)\n"
        f"subprocess.Popen(['sleep', {mark!r}])\n"
        + ("while True:\n    pass\n" if then == "loops" else "")
    )
    started = time.monotonic()
    result = run_either(kind, code, timeout=2, **mode)
    elapsed = time.monotonic() - started
    assert result.stdout == "before\n"
    if then == "exits":
        assert result.ok
        assert elapsed < SLACK
    else:
        assert result.timed_out
        assert elapsed < 2 + GRACE_SECONDS + SLACK
    assert processes_with(mark) == []


def test_the_exit_status_of_the_program_is_reported(mode):
    assert run_python("import sys; sys.exit(3)", **mode).exit_code == 3
    killed = run_python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", **mode)
    assert killed.exit_code == -11
    assert not killed.timed_out


# -- secrets ------------------------------------------------------------------------------

COLLECT = """\
import base64, json, os
seen = {"environ": 0}
found = []

def keep(where, data):
    found.append([where, base64.b64encode(data).decode()])

for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        keep(f"/proc/{pid}/{name}", data)
        if name == "environ":
            seen["environ"] += 1
keep("os.environ", json.dumps(dict(os.environ)).encode())
fds = sorted(os.listdir("/proc/self/fd"))
for fd in fds:
    try:
        keep(f"fd {fd} -> {os.readlink(f'/proc/self/fd/{fd}')}", b"")
        os.set_blocking(int(fd), False)
        keep(f"fd {fd}", os.pread(int(fd), 1 << 20, 0))
    except OSError:
        try:
            keep(f"fd {fd}", os.read(int(fd), 1 << 20))
        except OSError:
            pass
for fd in (1, 2):  # the loop made stdout non-blocking: a full pipe would fail the print
    os.set_blocking(fd, True)
print(json.dumps({"seen": seen, "fds": fds, "found": found}))
"""


def _searched(stdout: str) -> tuple[dict[str, object], list[tuple[str, bytes]]]:
    report = json.loads(stdout)
    return report, [(where, base64.b64decode(data)) for where, data in report["found"]]


def _assert_nowhere(stdout: str, canary: str, *secrets: str) -> None:
    report, found = _searched(stdout)
    # the search works: it read environments, and finds a value the program was given
    assert report["seen"]["environ"] >= 1
    assert any(canary.encode() in data for _, data in found)
    assert report["fds"] == ["0", "1", "2", "3"] or report["fds"] == ["0", "1", "2"]
    for secret in secrets:
        leaks = [where for where, data in found if secret.encode() in data]
        assert leaks == [], f"{secret[:12]}... is readable at {leaks}"


def test_no_secret_of_the_calling_process_is_readable(mode, monkeypatch):
    key = f"sk-test-{uuid.uuid4()}"
    plain = f"plain-{uuid.uuid4()}"
    canary = f"canary-{uuid.uuid4()}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("LOOP_AGENTS_PLAIN_SETTING", plain)  # a name that looks harmless
    result = run_python(COLLECT, env={"CANARY": canary}, max_output=50_000_000, **mode)
    assert result.ok, result.stderr
    _assert_nowhere(result.stdout, canary, key, plain)


# A caller whose environment held the secrets when it started: they are in its
# /proc/PID/environ, which a child of the same user could read before the fix. It imports
# only loop_agents_checks.sandbox (standard library only), so it starts fast.
CALLER = """\
import json, sys, types
package = types.ModuleType("loop_agents_checks")
package.__path__ = [sys.argv[1] + "/libs/checks/loop_agents_checks"]
sys.modules["loop_agents_checks"] = package
from loop_agents_checks.sandbox import run_python
options = json.loads(sys.argv[2])
result = run_python(sys.stdin.read(), max_output=50_000_000, **options)
print(json.dumps({"ok": result.ok, "stdout": result.stdout, "stderr": result.stderr,
                  "isolation": result.isolation}))
"""


def run_caller(code: str, caller_env: dict[str, str], **options: object) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", CALLER, str(ROOT), json.dumps(options)],
        input=code,
        env=caller_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_no_secret_of_the_callers_own_environment_is_readable(mode):
    key = f"sk-test-{uuid.uuid4()}"
    plain = f"plain-{uuid.uuid4()}"
    canary = f"canary-{uuid.uuid4()}"
    env = {**os.environ, "OPENAI_API_KEY": key, "LOOP_AGENTS_PLAIN_SETTING": plain}
    report = run_caller(COLLECT, env, env={"CANARY": canary}, **mode)
    assert report["ok"], report["stderr"]
    assert report["isolation"] == mode["isolation"]
    _assert_nowhere(str(report["stdout"]), canary, key, plain)


# -- process cap --------------------------------------------------------------------------

BOUNDED_BOMB = """\
import subprocess
started = failed = 0
children = []
for _ in range(5000):
    try:
        children.append(subprocess.Popen(["sleep", {mark!r}]))
        started += 1
    except OSError:
        failed += 1
print(started, failed)
"""


@pytest.mark.parametrize(
    "cap",
    [1, pytest.param(12, marks=pytest.mark.slow)],  # 12: every mode forks 12 deep
)
def test_a_fork_bomb_is_capped(mode, kind, cap):
    mark = marker()
    started_at = time.monotonic()
    result = run_either(kind, BOUNDED_BOMB.format(mark=mark), timeout=20, max_processes=cap, **mode)
    elapsed = time.monotonic() - started_at
    assert result.ok, result.stderr
    started, failed = map(int, result.stdout.split())
    assert started + failed == 5000
    assert started <= cap - 1  # the program itself is one of the cap
    assert started >= cap - 1 - 2  # and the cap is not much lower than asked
    assert elapsed < 20 + GRACE_SECONDS + SLACK
    assert processes_with(mark) == []


def test_threads_count_against_the_cap(mode):
    code = (
        "import threading, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "        n += 1\n"
        "except RuntimeError:\n"
        "    pass\n"
        "print(n, flush=True)\n"
        "import os; os._exit(0)\n"
    )
    result = run_python(code, max_processes=8, **mode)
    assert result.ok, result.stderr
    assert 5 <= int(result.stdout) <= 7


def test_no_cap_when_asked_for_none(mode):
    result = run_python(
        "import subprocess\nps = [subprocess.Popen(['true']) for _ in range(80)]\nprint(len(ps))",
        max_processes=None,
        **mode,
    )
    assert result.ok, result.stderr
    assert result.stdout == "80\n"


# -- the async runner ---------------------------------------------------------------------


def test_cancelling_arun_python_kills_the_program(mode):
    mark = marker()
    code = ESCAPES.format(mark=mark) + "import time\ntime.sleep(60)\n"

    async def main() -> float:
        task = asyncio.create_task(arun_python(code, timeout=60, **mode))
        waited = time.monotonic()
        while not processes_with(mark):  # wait until its children run
            assert time.monotonic() - waited < 30, "the program never started"
            await asyncio.sleep(0.05)
        begun = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - begun

    assert asyncio.run(main()) < GRACE_SECONDS + SLACK
    assert processes_with(mark) == []


async def test_concurrent_runs_do_not_wait_for_each_other(mode):
    started = time.monotonic()
    results = await asyncio.gather(
        *(arun_python(f"import time; time.sleep(1); print({i})", **mode) for i in range(4))
    )
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
    assert time.monotonic() - started < 4 + SLACK


# -- choosing an isolation ----------------------------------------------------------------


def test_auto_prefers_bubblewrap():
    python_for("bwrap")
    assert resolve_isolation(make_limits()) == "bwrap"
    assert run_python("print(1)").isolation == "bwrap"


def test_an_isolation_that_cannot_run_is_a_clear_error():
    with pytest.raises(IsolationUnavailable, match="does not exist"):
        run_python("print(1)", isolation="process", python="/nonexistent/python3")
    with pytest.raises(IsolationUnavailable, match=r"auto.*bwrap: .*unshare: .*process: "):
        run_python("print(1)", python="/nonexistent/python3")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"isolation": "docker"}, "isolation must be one of 'auto', 'bwrap'"),
        ({"max_processes": 0}, "max_processes must be a whole number from 1"),
        ({"max_processes": 2.5}, "max_processes must be"),
        ({"max_processes": True}, "max_processes must be"),
        ({"env": {"BAD NAME": "x"}}, "env must map variable names"),
        ({"env": {"X": 1}}, "env must map variable names"),
        ({"timeout": True}, "timeout must be"),
        (
            {"timeout": 10**400},
            r"timeout must be a finite number of seconds > 0; got 1000.*\(401 char",
        ),
        (
            {"memory_limit": 10**400},
            "memory_limit must be a number of bytes from 1 MiB to 2\\*\\*63",
        ),
        ({"max_file_size": 2**63}, "max_file_size must be a number of bytes from 1 MiB"),
        ({"max_output": 10**400}, "max_output must be a number of bytes from 16"),
        ({"max_processes": 10**400}, "max_processes must be a whole number from 1 to"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_python("print(1)", **kwargs)


def test_a_virtual_environment_in_a_hidden_folder_still_runs(tmp_path):
    # bubblewrap hides /tmp and the home; a virtual environment there (a clone under /tmp,
    # a project in the home) must stay usable, or "bwrap" fails and "auto" falls back to a
    # weaker isolation
    if available_isolations(make_limits(python=sys.executable))["bwrap"] is not None:
        pytest.skip("bubblewrap does not run here")
    base = python_for("bwrap")
    environment = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(environment)], check=True)
    python = str(environment / "bin" / "python")
    result = run_python("import sys; print(sys.prefix)", isolation="bwrap", python=python)
    assert result.ok, result.stderr
    assert result.stdout.strip() == str(environment)
    assert resolve_isolation(make_limits(python=python)) == "bwrap"
    secret = tmp_path / "secret.txt"  # beside the environment, in the hidden folder
    secret.write_text("sk-test")
    seen = run_python(f"import os; print(os.path.exists({str(secret)!r}))", python=python)
    assert seen.stdout.strip() == "False"


def test_bubblewrap_hides_the_callers_home(monkeypatch):
    python = python_for("bwrap")
    home = ROOT / f".test-home-{uuid.uuid4().hex}"
    secret = f"sk-test-{uuid.uuid4()}"
    try:
        (home / ".config").mkdir(parents=True)
        (home / ".config" / "credentials").write_text(secret)
        (home / ".config" / "credentials").chmod(0o600)
        monkeypatch.setenv("HOME", str(home))
        code = (
            "import os, sys\n"
            f"print(os.listdir({str(home)!r}))\n"
            f"print(os.path.exists({str(home / '.config' / 'credentials')!r}))\n"
        )
        result = run_python(code, isolation="bwrap", python=python)
        assert result.ok, result.stderr
        assert secret not in result.stdout
        assert result.stdout.splitlines()[1] == "False"
    finally:
        shutil.rmtree(home, ignore_errors=True)


FILL_RAM_FOLDERS = """\
import errno
chunk = b"x" * 2**20
for folder in ("/tmp", "/dev/shm"):
    held = 0
    try:
        with open(folder + "/fill", "wb") as handle:
            for _ in range(600):
                handle.write(chunk)
                handle.flush()
                held += 1
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    print(folder, held)
for path in ("/dev/new-file", {home!r} + "/new-file"):
    try:
        open(path, "w")
        print(path, "written")
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
"""


def test_bubblewrap_sizes_its_memory_backed_folders_within_the_memory_limit():
    """Issue "Hardening, round 3", item 4: /tmp and /dev/shm were unsized tmpfs mounts,
    and a program held 600 MiB of RAM there with memory_limit=64 MiB."""
    python = python_for("bwrap")
    home = os.path.realpath(os.path.expanduser("~"))  # the caller's, hidden by bwrap
    if home in ("/", "/tmp"):
        pytest.skip(f"the caller's home {home} is not hidden")
    result = run_python(
        FILL_RAM_FOLDERS.format(home=home),
        isolation="bwrap",
        python=python,
        memory_limit=64 * 2**20,
        max_file_size=None,
        timeout=30,
    )
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    held = {line.split()[0]: int(line.split()[1]) for line in lines[:2]}
    assert held["/tmp"] + held["/dev/shm"] <= 64  # MiB, together within the limit
    assert held["/tmp"] >= 16  # still usable
    assert held["/dev/shm"] >= 16
    # nothing else in memory is writable: /dev itself, the hidden home
    assert [line.rsplit(" ", 1)[1] for line in lines[2:]] == ["EROFS", "EROFS"]


def test_auto_falling_back_to_the_weakest_isolation_says_so_once(monkeypatch, caplog):
    # a regular user with neither bubblewrap nor user namespaces gets "process", which does
    # not hide the caller's secrets: "auto" logs it (before, it fell back silently)
    from loop_agents_checks.sandbox import isolation

    monkeypatch.setattr(isolation, "_is_root", lambda: False)
    monkeypatch.setattr(
        isolation, "_namespace_reason", lambda tool, python, as_uid: f"{tool} is not installed"
    )
    isolation._warn_weak_fallback.cache_clear()
    with caplog.at_level(logging.WARNING, logger="loop_agents"):
        assert isolation._resolve(make_limits(isolation="auto")).isolation == "process"
        isolation._resolve(make_limits(isolation="auto", timeout=3))
        assert isolation._resolve(make_limits(isolation="process")).isolation == "process"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "loop_agents"]
    assert "isolation='process' as your own user" in warning
    assert "bwrap: bwrap is not installed; unshare: unshare is not installed" in warning
    isolation._warn_weak_fallback.cache_clear()
