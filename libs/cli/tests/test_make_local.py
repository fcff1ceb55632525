"""`make local` on a machine whose pip cache holds llama-cpp-python built with other flags.

The case a new user meets when they once installed llama-cpp-python for something else:
pip's wheel cache keys a wheel built from an sdist on the sdist, not on ``CMAKE_ARGS``, so
``pip install -r requirements/all.txt`` installs the cached wheel ("Using cached ...") and
the project's flags never reach a build. Here pip itself makes that cache entry: it builds
llama-cpp-python 0.3.36 from PyPI with other flags (``-DLLAMA_BUILD=OFF``: no libraries,
and no build record; seconds instead of minutes) and caches the wheel where it would
cache any build of that version. Then the real ``make local`` runs in a fresh virtual
environment with pip using that cache: it must end with llama.cpp built with the
project's flags, say so, and that build must serve the model. Last, ``make local
REBUILD=1`` (what a crash of a matching build prints) must compile it again although its
record matches, with no cache, and leave no cached wheel of that version behind. It
compiles llama.cpp twice (several minutes each on 2 cores) and needs PyPI: marked ``slow``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime

import pytest

from tests.conftest import ROOT, env_without_model_settings

BUILD_LIMIT = 3600
"""Seconds after which ``make local`` is taken to hang: it compiles llama.cpp from source
(about 2 minutes on 2 quiet cores, 12 on 2 busy ones); only a hang reaches this."""


def _env(**extra: str) -> dict[str, str]:
    env = env_without_model_settings(**extra)
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)  # a make around pytest (`make test`) must not steer this one
    return env


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_local_never_uses_a_cached_wheel_built_with_other_flags(tmp_path):
    cache = tmp_path / "pip-cache"
    # 1. pip builds llama-cpp-python 0.3.36 otherwise and caches the wheel
    throwaway = tmp_path / "throwaway"
    subprocess.run([sys.executable, "-m", "venv", str(throwaway)], check=True)
    lock = (ROOT / "requirements" / "all.txt").read_text()
    version = re.search(r"^llama-cpp-python==(\S+)", lock, re.MULTILINE)[1]
    poison = subprocess.run(
        [str(throwaway / "bin" / "python"), "-m", "pip", "install", "--no-deps",
         "--cache-dir", str(cache), f"llama-cpp-python=={version}"],
        env=_env(CMAKE_ARGS="-DLLAMA_BUILD=OFF"),
        capture_output=True, text=True, timeout=BUILD_LIMIT, check=False,
    )  # fmt: skip
    assert poison.returncode == 0, poison.stdout[-3000:] + poison.stderr[-3000:]
    cached = list((cache / "wheels").rglob(f"llama_cpp_python-{version}-*.whl"))
    assert len(cached) == 1, cached
    shutil.rmtree(throwaway)

    # 2. the real `make local`, in a fresh virtual environment, pip using that cache
    venv = tmp_path / "venv"
    env = _env(PIP_CACHE_DIR=str(cache), LOOP_AGENTS_BUILD_CACHE=str(tmp_path / "build-cache"))

    def make_local(*variables: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), "local", f"VENV={venv}", *variables],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_LIMIT,
            check=False,
        )

    first = make_local()
    out = first.stdout
    assert first.returncode == 0, out[-5000:] + first.stderr[-3000:]
    # pip took the poisoned wheel from its cache, as it would on such a machine ...
    assert f"Using cached llama_cpp_python-{version}-" in (venv / "local-build.log").read_text()
    # ... and make local said so and reinstalled llama.cpp with the project's flags
    assert (
        "make local: llama.cpp: the installed build is not the project's: llama-cpp-python "
        f"{version} has no record of its build flags"
    ) in out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith(
        f"make local: llama.cpp: built with the project's flags (llama-cpp-python {version}, "
        "built with the project's flags on "
    ), out[-3000:]
    assert list((tmp_path / "build-cache" / "wheels").rglob("llama_cpp_python-*.whl"))

    # the build is the project's, and it serves the bundled model
    python = str(venv / "bin" / "python")
    check = subprocess.run(
        [python, "-m", "loop_agents_cli.models.llama_build"],
        env=env, capture_output=True, text=True, timeout=BUILD_LIMIT, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    serve = textwrap.dedent(
        """\
        from loop_agents_cli.models.local_model import LocalModelServer
        with LocalModelServer(n_threads=1, startup_timeout=600) as server:
            answer = server.chat_model(max_tokens=4, temperature=0, timeout=600).invoke("Hi.")
            print("tokens", answer.usage_metadata["output_tokens"])
        """
    )
    served = subprocess.run(
        [python, "-c", serve], env=env, capture_output=True, text=True,
        timeout=BUILD_LIMIT, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-3000:]
    assert re.search(r"^tokens [1-9]", served.stdout, re.MULTILINE)

    # again: nothing to install, the build is checked and said reused
    again = make_local()
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        again.stdout.rstrip()
        .splitlines()[-1]
        .startswith(f"make local: llama.cpp: reused a matching build (llama-cpp-python {version}, ")
    )
    assert "Reinstalling" not in again.stdout
    assert os.path.getsize(venv / "local-build.log") > 0

    # REBUILD=1, the fix a crash of a matching build prints: the record matches, and still
    # llama.cpp is compiled again from source, with no cache; the cached wheels are gone
    record = next((venv / "lib").glob("python*/site-packages/llama_cpp/lib/loop_agents_build.json"))
    before = json.loads(record.read_text())["built"]
    started = datetime.now(UTC).replace(microsecond=0)
    rebuilt = make_local("REBUILD=1")
    assert rebuilt.returncode == 0, rebuilt.stdout[-5000:] + rebuilt.stderr[-3000:]
    assert (
        "cached wheels of that version removed: 1 from pip's cache; 1 from the project's "
        "build cache"
    ) in rebuilt.stdout
    assert (
        rebuilt.stdout.rstrip()
        .splitlines()[-1]
        .startswith(
            f"make local: llama.cpp: rebuilt from source with the project's flags (llama-cpp-python "
            f"{version}, built with the project's flags on "
        )
    ), rebuilt.stdout[-3000:]
    after = json.loads(record.read_text())["built"]
    assert after != before
    assert datetime.strptime(after, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) >= started
    assert "Using cached llama_cpp_python" not in (venv / "local-build-llama.log").read_text()
    assert not list(cache.rglob("llama_cpp_python-*.whl"))
    assert not list((tmp_path / "build-cache").rglob("llama_cpp_python-*.whl"))
