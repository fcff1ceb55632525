"""scripts/check_dist.py, which `make dist` runs: on wheels and sdists made here (fast; the
real build is checked in tests/repository/test_wheel.py).

A wheel passes only when it holds exactly the source tree's package files; a data file left
out of ``package-data``, a test, a byte-code cache or a file outside the package fails it.
Each of the repository's distributions is checked.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.repository.dist_helpers import check_dist_module

check = check_dist_module()
LIBRARY, CHECKS, CLI, EVALS = check.DISTRIBUTIONS


def version_of(distribution) -> str:
    return check.source_version(distribution, ROOT)


def metadata(distribution, version: str | None = None) -> str:
    return (
        f"Metadata-Version: 2.4\nName: {distribution.name}\n"
        f"Version: {version or version_of(distribution)}\n"
        "License-Expression: MIT\nLicense-File: LICENSE\n\n"
    )


def entry_points(distribution) -> str:
    if distribution is CLI:
        return "[console_scripts]\nloop-agents = loop_agents_cli:main\n"
    return "\n".join(distribution.entry_points) + "\n"


def make_wheel(folder: Path, distribution, names: set[str], **dist_info: str) -> Path:
    """A wheel of ``distribution`` holding ``names`` (empty files) and a dist-info folder."""
    version = version_of(distribution)
    path = folder / f"{distribution.file_name}-{version}-py3-none-any.whl"
    files = {
        "METADATA": metadata(distribution),
        "entry_points.txt": entry_points(distribution),
        "WHEEL": "",
        "RECORD": "",
        "licenses/LICENSE": "MIT License",
    }
    files |= dist_info
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(names):
            archive.writestr(name, "")
        for name, text in files.items():
            archive.writestr(f"{distribution.file_name}-{version}.dist-info/{name}", text)
    return path


def make_sdist(folder: Path, distribution, names: set[str]) -> Path:
    version = version_of(distribution)
    path = folder / f"{distribution.file_name}-{version}.tar.gz"
    needed = {*distribution.sdist_files, f"{distribution.package}/__init__.py"}
    with tarfile.open(path, "w:gz") as archive:
        for name in sorted(names | needed):
            info = tarfile.TarInfo(f"{distribution.file_name}-{version}/{name}")
            archive.addfile(info, io.BytesIO(b""))
    return path


def test_the_expected_files_are_each_package_with_its_data_and_no_cache():
    evals = check.expected_package_files(EVALS, ROOT)
    for data in (ROOT / "libs" / "evals" / "loop_agents_evals" / "data").iterdir():
        assert f"loop_agents_evals/data/{data.name}" in evals
    assert "loop_agents/py.typed" in check.expected_package_files(LIBRARY, ROOT)
    # read as text at run time
    assert "loop_agents_checks/sandbox/_supervisor.py" in check.expected_package_files(CHECKS, ROOT)
    assert "loop_agents_cli/models/llama_cpp_server_only.cmake" in check.expected_package_files(
        CLI, ROOT
    )
    for distribution in check.DISTRIBUTIONS:
        expected = check.expected_package_files(distribution, ROOT)
        assert not any("__pycache__" in name or name.endswith(".pyc") for name in expected)
        folder = ROOT / distribution.folder
        assert all((folder / name).is_file() for name in expected)


def test_complete_wheels_and_clean_sdists_pass(tmp_path):
    for distribution in check.DISTRIBUTIONS:
        make_wheel(tmp_path, distribution, check.expected_package_files(distribution, ROOT))
        make_sdist(tmp_path, distribution, {"tests/conftest.py"})
    assert check.dist_problems(tmp_path, ROOT) == []
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_dist.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"loop-agents-cli {version_of(CLI)}" in done.stdout
    assert "hold what they should" in done.stdout


def test_a_missing_distribution_is_named(tmp_path):
    make_wheel(tmp_path, LIBRARY, check.expected_package_files(LIBRARY, ROOT))
    make_sdist(tmp_path, LIBRARY, set())
    problems = check.dist_problems(tmp_path, ROOT)
    assert any(
        f"loop_agents_evals-{version_of(EVALS)}-py3-none-any.whl is missing" in p for p in problems
    )


def test_a_missing_data_file_names_package_data(tmp_path):
    files = check.expected_package_files(EVALS, ROOT) - {"loop_agents_evals/data/code.jsonl"}
    wheel = make_wheel(tmp_path, EVALS, files)
    (problem,) = check.wheel_problems(wheel, EVALS, version_of(EVALS), ROOT)
    assert problem.startswith("loop_agents_evals/data/code.jsonl: in the source tree but not")
    assert "[tool.setuptools.package-data] in its pyproject.toml" in problem


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        ("tests/unit_tests/hosts/test_graph.py", "outside loop_agents/"),
        ("loop_agents/__pycache__/graph.cpython-311.pyc", "must not be in a wheel"),
        ("loop_agents/old_module.py", "in the wheel but not in the source tree"),
        ("loop_agents_cli/app.py", "outside loop_agents/"),  # a sibling's module
        ("examples/song_lyrics.py", "outside loop_agents/"),
    ],
)
def test_anything_else_in_the_library_s_wheel_is_named(tmp_path, extra, phrase):
    wheel = make_wheel(tmp_path, LIBRARY, check.expected_package_files(LIBRARY, ROOT) | {extra})
    problems = check.wheel_problems(wheel, LIBRARY, version_of(LIBRARY), ROOT)
    assert problems
    assert all(p.startswith(f"{extra}: ") for p in problems)
    assert any(phrase in p for p in problems)


def test_wrong_metadata_and_a_missing_command_are_named(tmp_path):
    version = version_of(CLI)
    wheel = make_wheel(
        tmp_path,
        CLI,
        check.expected_package_files(CLI, ROOT),
        METADATA=metadata(CLI, "9.9.9"),
        **{"entry_points.txt": "[console_scripts]\n"},
    )
    problems = check.wheel_problems(wheel, CLI, version, ROOT)
    assert f"METADATA names loop-agents-cli 9.9.9, expected loop-agents-cli {version}" in problems
    assert any("does not declare 'loop-agents = loop_agents_cli:main'" in p for p in problems)


def test_the_eval_command_s_entry_point_is_required(tmp_path):
    wheel = make_wheel(
        tmp_path, EVALS, check.expected_package_files(EVALS, ROOT), **{"entry_points.txt": ""}
    )
    problems = check.wheel_problems(wheel, EVALS, version_of(EVALS), ROOT)
    assert any("eval = loop_agents_evals.command:EVAL_COMMAND" in p for p in problems)


def test_a_wheel_without_its_licence_is_named(tmp_path):
    unlicensed = metadata(LIBRARY).replace("License-Expression: MIT\nLicense-File: LICENSE\n", "")
    wheel = make_wheel(
        tmp_path, LIBRARY, check.expected_package_files(LIBRARY, ROOT), METADATA=unlicensed
    )
    problems = check.wheel_problems(wheel, LIBRARY, version_of(LIBRARY), ROOT)
    assert any("License-Expression: MIT and License-File: LICENSE" in p for p in problems)


@pytest.mark.parametrize(
    "bad", [".env", "tests/__pycache__/x.pyc", ".venv/bin/python", "docs/.env", ".git/config"]
)
def test_secrets_caches_and_environments_fail_the_sdist(tmp_path, bad):
    version = version_of(LIBRARY)
    sdist = make_sdist(tmp_path, LIBRARY, {bad})
    assert check.sdist_problems(sdist, LIBRARY, version) == [
        f"loop_agents-{version}/{bad}: must not be in an sdist"
    ]


def test_an_sdist_without_its_readme_is_named(tmp_path):
    version = version_of(CHECKS)
    path = tmp_path / f"loop_agents_checks-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name in ("PKG-INFO", "pyproject.toml", "loop_agents_checks/__init__.py"):
            archive.addfile(
                tarfile.TarInfo(f"loop_agents_checks-{version}/{name}"), io.BytesIO(b"")
            )
    assert check.sdist_problems(path, CHECKS, version) == [
        f"loop_agents_checks-{version}/README.md is missing from the sdist"
    ]
