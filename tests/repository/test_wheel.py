"""The built wheel on its own, as a user of ``pip install loop_agents`` gets it.

The sdist and the wheel are built with ``python -m build`` (the wheel from the sdist, as
``make dist`` does), the wheel is installed into a fresh virtual environment (its
dependencies at the lock's versions, ``requirements/all.txt``), and everything runs there
from a folder outside the repository, against a scripted OpenAI-compatible server on
loopback, with no model setting of this machine (Ollama looked for on a closed port, runs
saved in a temporary home). Nothing of the source tree is on that environment's path, so a
module or a data file missing from the wheel fails these tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

import loop_agents
from loop_agents._version import __version__
from tests.cli_helpers import cli_env
from tests.conftest import ROOT
from tests.dist_helpers import check_dist, locked_constraints
from tests.eval_models import ReactiveOpenAI, user_text
from tests.fakes import CI_1, CI_2
from tests.scripted_openai import ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

WHEEL = f"loop_agents-{__version__}-py3-none-any.whl"


@dataclass(frozen=True)
class Installed:
    """A fresh virtual environment holding the wheel, and a folder outside the repository."""

    venv: Path
    outside: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def run(
        self, *args: str, env: dict[str, str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            cwd=self.outside,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def env(self, **extra: str) -> dict[str, str]:
        """No model setting of this machine, no PYTHONPATH, the environment's bin first."""
        env = cli_env(self.outside / "home", **extra)
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONNOUSERSITE"] = "1"
        return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel-install")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    constraints = base / "constraints.txt"
    constraints.write_text(locked_constraints(ROOT / "requirements" / "all.txt"), encoding="utf-8")
    pip = subprocess.run(
        [
            *(str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet"),
            *("-c", str(constraints), str(dist / WHEEL)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=base,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    outside = base / "elsewhere"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT.resolve())
    return Installed(env_dir, outside)


def test_the_wheel_holds_the_package_and_nothing_else(dist):
    assert check_dist(dist) == []


def test_the_package_imports_from_the_wheel_with_every_public_name(installed):
    script = (
        "import json, loop_agents\n"
        "for name in loop_agents.__all__:\n"
        "    getattr(loop_agents, name)\n"
        "print(json.dumps([loop_agents.__file__, loop_agents.__version__,"
        " len(loop_agents.__all__)]))\n"
    )
    done = installed.run(str(installed.bin / "python"), "-c", script, env=installed.env())
    assert done.returncode == 0, done.stderr
    location, version, names = json.loads(done.stdout)
    assert Path(location).is_relative_to(installed.venv)  # not the source tree
    assert version == __version__
    assert names == len(loop_agents.__all__)  # every public name, none lost in the wheel


def test_the_command_shows_the_version(installed):
    done = installed.run(str(installed.bin / "loop-agents"), "--version", env=installed.env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"loop-agents {__version__}"


def test_the_song_lyrics_demo_runs_from_the_wheel(installed):
    server = ScriptedOpenAI(
        [
            CI_1,  # with the form of 相见欢: the form check passes it to the reviewer
            Structured({"score": 70, "feedback": "格律功夫明显欠缺。"}),
            CI_2,
            Structured({"score": 81, "feedback": "情绪线索尚明。"}),
        ]
    )
    with server.serve() as base_url:
        done = installed.run(
            str(installed.bin / "loop-agents"),
            *("demo", "song-lyrics"),
            env=installed.env(OPENAI_BASE_URL=base_url),
        )
    assert done.returncode == 0, done.stderr
    assert "scores: #1: 70, #2: 81" in done.stdout
    assert "格律功夫明显欠缺。" in done.stdout
    assert len(server.requests) == 4
    # the composer's system prompt (loop_agents_cli.demos.prompts) reached the model
    assert server.requests[0]["messages"][0]["role"] == "system"
    assert "相见欢" in server.requests[0]["messages"][0]["content"]


def bundled_code_answers() -> dict[str, tuple[str, bool]]:
    """Each bundled code task's prompt -> an answer and whether it must pass: the reference
    solution for every other task, the typical wrong solution for the rest."""
    data = ROOT / "loop_agents" / "evals" / "data"
    tasks = [json.loads(line) for line in (data / "code.jsonl").read_text().splitlines()]
    rows = {
        row["id"]: row
        for row in map(json.loads, (data / "code_reference.jsonl").read_text().splitlines())
    }
    answers = {}
    for number, task in enumerate(tasks):
        right = number % 2 == 0
        code = rows[task["id"]]["solution" if right else "wrong_solution"]
        answers[task["prompt"]] = (f"```python\n{code}\n```", right)
    return answers


def test_the_eval_of_the_bundled_code_set_runs_from_the_wheel(installed):
    answers = bundled_code_answers()
    unknown: list[str] = []

    def respond(body):
        text = user_text(body)  # the task's prompt, then a line naming the function
        matches = [prompt for prompt in answers if text.startswith(prompt)]
        if len(matches) != 1:
            unknown.append(text)
            return "no such task"
        return answers[matches[0]][0]

    server = ReactiveOpenAI(respond)
    out = installed.outside / "results.json"
    with server.serve() as base_url:
        done = installed.run(
            str(installed.bin / "loop-agents"),
            *("eval", "code", "--arms", "single", "--iterations", "1", "--out", str(out)),
            env=installed.env(OPENAI_BASE_URL=base_url),
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert unknown == []
    data = json.loads(out.read_text(encoding="utf-8"))
    single = data["arms"]["single"]
    assert single["tasks"] == len(answers) >= 30
    # graded for real in the wheel's sandbox: the right answers pass, the wrong ones fail
    assert single["passed"] == sum(1 for _, right in answers.values() if right)
    assert len(server.requests) == len(answers)
    assert f"{single['passed']}/{single['tasks']}" in done.stdout
