"""The built wheels on their own, as users of ``pip install loop-agents`` (and the rest) get them.

Every distribution's sdist and wheel are built with ``python -m build`` (each wheel from its
sdist, as ``make dist`` does). The library's wheel alone is installed into one fresh virtual
environment (``pip install loop-agents``: its four dependencies and nothing of the command),
and all four wheels into another; everything runs there from a folder outside the
repository, the dependencies at the lock's versions (``requirements/all.txt``), against a
scripted OpenAI-compatible server on loopback, with no model setting of this machine (Ollama
looked for on a closed port, runs saved in a temporary home). Nothing of the source tree is
on those environments' paths, so a module or a data file missing from a wheel fails here.
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
from tests.eval_models import ReactiveOpenAI, user_text
from tests.fakes import CI_1, CI_2
from tests.repository.dist_helpers import check_dist, locked_constraints
from tests.scripted_openai import ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

LIBRARY = f"loop_agents-{__version__}-py3-none-any.whl"
SEED_DEPENDENCIES = {"langgraph", "langchain", "langchain-openai", "python-dotenv"}


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
    for folder in (ROOT, *(ROOT / "libs" / name for name in ("checks", "cli", "evals"))):
        built = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(folder)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def install(wheels: list[Path], base: Path) -> Installed:
    """A fresh virtual environment in ``base`` with ``wheels``, dependencies as locked."""
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    constraints = base / "constraints.txt"
    constraints.write_text(locked_constraints(ROOT / "requirements" / "all.txt"), encoding="utf-8")
    pip = subprocess.run(
        [
            *(str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet"),
            *("-c", str(constraints), *map(str, wheels)),
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


@pytest.fixture(scope="module")
def library(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``pip install loop-agents``: the library alone."""
    return install([dist / LIBRARY], tmp_path_factory.mktemp("library-install"))


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Every distribution's wheel."""
    return install(sorted(dist.glob("*.whl")), tmp_path_factory.mktemp("wheel-install"))


def test_the_wheel_holds_the_package_and_nothing_else(dist):
    assert check_dist(dist) == []


def test_the_library_alone_has_the_seed_s_dependencies_and_no_command(library):
    script = (
        "import json, re\n"
        "from importlib.metadata import requires\n"
        "print(json.dumps(sorted({re.split(r'[<>=\\[; ]', r, maxsplit=1)[0]\n"
        "    for r in requires('loop-agents') if 'extra ==' not in r})))\n"
    )
    done = library.run(str(library.bin / "python"), "-c", script, env=library.env())
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == SEED_DEPENDENCIES
    assert not (library.bin / "loop-agents").exists()
    check = library.run(str(library.bin / "python"), "-m", "pip", "check", env=library.env())
    assert check.returncode == 0, check.stdout


def test_the_library_s_front_door_loads_none_of_the_breadth(library):
    script = (
        "import sys\n"
        "from loop_agents import LoopMiddleware, create_loop_agent, llm_judge, rule\n"
        "heavy = ('rich', 'aiosqlite', 'openai', 'langchain_openai', 'dotenv')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    done = library.run(str(library.bin / "python"), "-c", script, env=library.env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_library_imports_from_its_wheel_with_every_public_name(library):
    test_the_package_imports_from_the_wheel_with_every_public_name(library)


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
    data = ROOT / "libs" / "evals" / "loop_agents_evals" / "data"
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
