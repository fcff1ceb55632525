"""The sandbox called by a user other than root (run here as a fresh unprivileged user).

As root the runner gives each program a user of its own; a regular user's runs take other
paths (the caller's own user in a new user namespace, or in ``"process"`` the supervisor
killing the tree). When the tests run as root, this file runs a caller as an unprivileged
user to cover those paths; as a regular user `libs/checks/tests/test_sandbox.py` covers them already.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import CANDIDATE_PYTHONS, marker, processes_with
from test_sandbox import BOUNDED_BOMB, COLLECT, ESCAPES, _searched

from loop_agents_checks.sandbox import available_isolations, make_limits
from tests.conftest import ROOT

# Runs each scenario in each isolation and prints what happened, as JSON. It imports only
# loop_agents_checks.sandbox (the standard library only): the interpreter need not have the
# project's dependencies.
CALLER = """\
import json, sys, types
package = types.ModuleType("loop_agents_checks")
package.__path__ = [sys.argv[1] + "/libs/checks/loop_agents_checks"]
sys.modules["loop_agents_checks"] = package
from loop_agents_checks.sandbox import available_isolations, make_limits, run_python
programs = json.loads(sys.stdin.read())
report = {"available": available_isolations(make_limits(python=sys.executable))}
for mode, reason in report["available"].items():
    if reason is not None:
        continue
    for name, (code, options) in programs.items():
        result = run_python(code, isolation=mode, python=sys.executable, **options)
        report[f"{mode} {name}"] = {
            "ok": result.ok, "stdout": result.stdout, "stderr": result.stderr,
            "isolation": result.isolation, "seconds": result.seconds,
        }
print(json.dumps(report))
"""


# A folder with no rights at all, one without its write bit, a file in each (issue
# "Hardening, round 3", item 5: the caller could no longer delete them, and
# rmtree(ignore_errors=True) left the run's folder behind).
LOCKED_FOLDERS = """\
import os
os.makedirs("deep/er")
open("deep/er/f", "w").write("x")
os.chmod("deep/er", 0o500)
os.chmod("deep", 0)
os.mkdir("read-only")
open("read-only/f", "w").write("y")
os.chmod("read-only", 0o500)
os.chmod(".", 0o500)
print("locked")
"""


def _world_readable(path: str) -> bool:
    """Whether every folder down to ``path`` lets other users in, and ``path`` is readable."""
    current = os.path.realpath(path)
    if not os.stat(current).st_mode & 0o004:
        return False
    while current != "/":
        current = os.path.dirname(current)
        if not os.stat(current).st_mode & 0o001:
            return False
    return True


def _python_for_others() -> str:
    for python in CANDIDATE_PYTHONS:
        if python and os.path.exists(python):
            usable = available_isolations(make_limits(python=python))["process"] is None
            if usable:
                return python
    pytest.skip("no interpreter here that an unprivileged user can run")


@pytest.mark.skipif(os.geteuid() != 0, reason="as a regular user test_sandbox.py covers this")
def test_a_regular_users_runs_are_isolated_and_leave_nothing_behind(request):
    if not _world_readable(
        str(ROOT / "libs" / "checks" / "loop_agents_checks" / "sandbox" / "runner.py")
    ):
        pytest.skip(f"an unprivileged user cannot read the project at {ROOT}")
    python = _python_for_others()
    uid = random.randrange(0x72000000, 0x72100000)  # outside the runner's own range
    key = f"sk-test-{uuid.uuid4()}"
    plain = f"plain-{uuid.uuid4()}"
    canary = f"canary-{uuid.uuid4()}"
    escape_mark, bomb_mark = marker(), marker()
    programs = {
        "escapes": (ESCAPES.format(mark=escape_mark), {"timeout": 20}),
        "collect": (COLLECT, {"env": {"CANARY": canary}, "max_output": 50_000_000}),
        "bomb": (BOUNDED_BOMB.format(mark=bomb_mark), {"timeout": 30, "max_processes": 12}),
        "locks its folders": (LOCKED_FOLDERS, {}),
    }
    # the caller's TMPDIR, where its runs' folders go (one the user can reach: pytest's
    # tmp_path is root's alone, and tempfile would quietly fall back to /tmp)
    temp = Path(tempfile.mkdtemp(prefix="loop-agents-caller-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    os.chown(temp, uid, uid)
    env = {
        "TMPDIR": str(temp),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "OPENAI_API_KEY": key,
        "LOOP_AGENTS_PLAIN_SETTING": plain,
    }
    proc = subprocess.run(
        [python, "-I", "-c", CALLER, str(ROOT)],
        input=json.dumps(programs),
        env=env,
        cwd="/",
        user=uid,
        group=uid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    ran = [mode for mode, reason in report["available"].items() if reason is None]
    assert "process" in ran
    if os.environ.get("CI"):
        assert "bwrap" in ran, report["available"]
    for mode in ran:
        escapes = report[f"{mode} escapes"]
        assert escapes["ok"], escapes["stderr"]
        assert escapes["isolation"] == mode
        assert escapes["seconds"] < 10
        collect = report[f"{mode} collect"]
        assert collect["ok"], collect["stderr"]
        _, found = _searched(collect["stdout"])
        assert any(canary.encode() in data for _, data in found)
        leaks = [where for where, data in found if key.encode() in data or plain.encode() in data]
        if mode == "process":
            # Documented: without a namespace, a program of the caller's own user can read
            # the caller's /proc/PID/environ. Only bwrap and unshare hide it from a user.
            assert leaks, "the process isolation's documented limit no longer holds"
        else:
            assert leaks == [], f"{mode}: the secret is readable at {leaks}"
        bomb = report[f"{mode} bomb"]
        assert bomb["ok"], bomb["stderr"]
        started, failed = map(int, bomb["stdout"].split())
        assert started + failed == 5000
        assert started <= 11, (mode, started)
        assert started >= 1
        locked = report[f"{mode} locks its folders"]
        assert locked["ok"], locked["stderr"]
        assert locked["stdout"] == "locked\n"
    assert processes_with(escape_mark) == []
    assert processes_with(bomb_mark) == []
    # every run's folder is gone, also those whose program took its own rights away
    assert list(temp.iterdir()) == []
