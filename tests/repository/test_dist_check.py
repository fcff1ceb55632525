"""scripts/check_dist.py, which `make dist` runs: on wheels and sdists made here (fast; the
real build is checked in tests/repository/test_wheel.py).

A wheel passes only when it holds exactly the source tree's package files; a data file left
out of ``package-data``, a test, a byte-code cache or a file outside the package fails it.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from loop_agents._version import __version__
from tests.conftest import ROOT
from tests.dist_helpers import check_dist_module

check = check_dist_module()
DIST_INFO = f"loop_agents-{__version__}.dist-info"
METADATA = (
    f"Metadata-Version: 2.4\nName: loop_agents\nVersion: {__version__}\n"
    "License-Expression: MIT\nLicense-File: LICENSE\n\n"
)
ENTRY_POINTS = "[console_scripts]\nloop-agents = loop_agents_cli:main\n"


def package_files() -> set[str]:
    return check.expected_package_files(ROOT)


def make_wheel(folder: Path, names: set[str], **dist_info: str) -> Path:
    """A wheel holding ``names`` (empty files) and a dist-info folder."""
    path = folder / f"loop_agents-{__version__}-py3-none-any.whl"
    files = {
        "METADATA": METADATA,
        "entry_points.txt": ENTRY_POINTS,
        "WHEEL": "",
        "RECORD": "",
        "licenses/LICENSE": "MIT License",
    }
    files |= dist_info
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(names):
            archive.writestr(name, "")
        for name, text in files.items():
            archive.writestr(f"{DIST_INFO}/{name}", text)
    return path


def make_sdist(folder: Path, names: set[str]) -> Path:
    path = folder / f"loop_agents-{__version__}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name in sorted(names):
            info = tarfile.TarInfo(f"loop_agents-{__version__}/{name}")
            archive.addfile(info, io.BytesIO(b""))
    return path


SDIST = {"PKG-INFO", "pyproject.toml", "README.md", "CHANGELOG.md", "loop_agents/_version.py"}


def test_the_expected_files_are_the_package_with_its_data_and_no_cache():
    expected = package_files()
    for data in (ROOT / "loop_agents" / "evals" / "data").iterdir():
        assert f"libs/evals/loop_agents_evals/data/{data.name}" in expected
    assert "loop_agents/py.typed" in expected
    assert (
        "libs/checks/loop_agents_checks/sandbox/_supervisor.py" in expected
    )  # read as text at run time
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in expected)
    assert all((ROOT / name).is_file() for name in expected)


def test_a_complete_wheel_and_a_clean_sdist_pass(tmp_path):
    make_wheel(tmp_path, package_files())
    make_sdist(tmp_path, SDIST | {"tests/unit_tests/hosts/test_graph.py"})
    assert check.dist_problems(tmp_path, ROOT) == []
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_dist.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"loop_agents {__version__} hold what they should" in done.stdout


def test_a_missing_data_file_names_package_data(tmp_path):
    wheel = make_wheel(tmp_path, package_files() - {"libs/evals/loop_agents_evals/data/code.jsonl"})
    (problem,) = check.wheel_problems(wheel, __version__, ROOT)
    assert problem.startswith(
        "libs/evals/loop_agents_evals/data/code.jsonl: in the source tree but not"
    )
    assert "[tool.setuptools.package-data] in pyproject.toml" in problem


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        ("tests/unit_tests/hosts/test_graph.py", "outside loop_agents/"),
        ("loop_agents/__pycache__/graph.cpython-311.pyc", "must not be in a wheel"),
        ("loop_agents/old_module.py", "in the wheel but not in the source tree"),
        ("examples/song_lyrics.py", "outside loop_agents/"),
    ],
)
def test_anything_else_in_the_wheel_is_named(tmp_path, extra, phrase):
    wheel = make_wheel(tmp_path, package_files() | {extra})
    problems = check.wheel_problems(wheel, __version__, ROOT)
    assert problems
    assert all(p.startswith(f"{extra}: ") for p in problems)
    assert any(phrase in p for p in problems)


def test_wrong_metadata_and_a_missing_command_are_named(tmp_path):
    wheel = make_wheel(
        tmp_path,
        package_files(),
        METADATA=METADATA.replace(__version__, "9.9.9"),
        **{"entry_points.txt": "[console_scripts]\n"},
    )
    problems = check.wheel_problems(wheel, __version__, ROOT)
    assert f"METADATA names loop_agents 9.9.9, expected loop_agents {__version__}" in problems
    assert any("does not declare 'loop-agents = loop_agents_cli:main'" in p for p in problems)


def test_a_wheel_without_its_licence_is_named(tmp_path):
    unlicensed = METADATA.replace("License-Expression: MIT\nLicense-File: LICENSE\n", "")
    wheel = make_wheel(tmp_path, package_files(), METADATA=unlicensed)
    with zipfile.ZipFile(wheel) as archive:
        assert f"{DIST_INFO}/licenses/LICENSE" in archive.namelist()
    problems = check.wheel_problems(wheel, __version__, ROOT)
    assert any("License-Expression: MIT and License-File: LICENSE" in p for p in problems)


@pytest.mark.parametrize(
    "bad", [".env", "tests/__pycache__/x.pyc", ".venv/bin/python", "docs/.env", ".git/config"]
)
def test_secrets_caches_and_environments_fail_the_sdist(tmp_path, bad):
    sdist = make_sdist(tmp_path, SDIST | {bad})
    assert check.sdist_problems(sdist, __version__) == [
        f"loop_agents-{__version__}/{bad}: must not be in an sdist"
    ]


def test_missing_distributions_say_how_to_build_them(tmp_path):
    problems = check.dist_problems(tmp_path, ROOT)
    assert len(problems) == 2
    assert all(p.endswith("is missing (run: make dist)") for p in problems)
