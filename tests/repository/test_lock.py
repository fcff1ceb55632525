"""The lock (requirements/*.txt) agrees with the distributions' pyproject.toml files.

- ``all.txt`` pins every requirement of every distribution and extra at an allowed version;
- ``dev.txt`` is every distribution's requirements and the library's ``dev`` extra, at
  exactly ``all.txt``'s versions;
- ``lowest.txt`` pins each direct requirement of the distributions and the ``dev`` extra at
  its declared lower bound, so ``make test-lowest`` tests the bounds the projects state.

The distributions themselves are never in the lock: they are installed from the clone. A
failure here means a pyproject.toml changed without ``make lock``. The library's version
has one source (``loop_agents/_version.py``).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import loop_agents
from loop_agents._version import __version__
from tests.conftest import ROOT
from tests.repository.dist_helpers import lock_pins, normalize

LOCKS = ROOT / "requirements"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PROJECTS = [
    tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for folder in (ROOT, *sorted((ROOT / "libs").iterdir()))
    if (folder / "pyproject.toml").is_file()
]
OURS = {normalize(project["name"]) for project in PROJECTS}
TARGET = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux"}
FIX = "pyproject.toml changed without the lock: run `make lock`"


def requirements(*extras: str, every_extra: bool = False) -> list[Requirement]:
    """Every distribution's requirements plus those of ``extras`` (of any distribution that
    has them; every extra with ``every_extra``), the distributions themselves left out."""
    found = []
    for project in PROJECTS:
        found += [Requirement(text) for text in project["dependencies"]]
        optional = project.get("optional-dependencies", {})
        todo, seen = list(optional) if every_extra else [e for e in extras if e in optional], set()
        while todo:
            extra = todo.pop()
            if extra in seen:
                continue
            seen.add(extra)
            for text in optional[extra]:
                requirement = Requirement(text)
                if normalize(requirement.name) == normalize(project["name"]):
                    todo.extend(requirement.extras)
                else:
                    found.append(requirement)
    return [
        r
        for r in found
        if normalize(r.name) not in OURS and (r.marker is None or r.marker.evaluate(TARGET))
    ]


def lower_bound(requirement: Requirement) -> Version:
    bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    assert len(bounds) == 1, f"{requirement}: state one lower bound (>=)"
    return bounds[0]


def test_every_extra_is_locked_at_an_allowed_version():
    pins = lock_pins(LOCKS / "all.txt")
    assert not OURS & set(pins), "the distributions are installed from the clone, not locked"
    for requirement in requirements(every_extra=True):
        name = normalize(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements/all.txt: {FIX}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"all.txt pins {name}=={pins[name]}, outside {requirement}: {FIX}"
        )


def test_the_dev_lock_is_the_dev_extra_at_the_same_versions():
    everything = lock_pins(LOCKS / "all.txt")
    dev = lock_pins(LOCKS / "dev.txt")
    assert {name: everything.get(name) for name in dev} == dev
    for requirement in requirements("dev"):
        assert normalize(requirement.name) in dev, f"{requirement.name} not in dev.txt: {FIX}"
    # nothing of the local extra (llama.cpp is compiled only by `make local`)
    assert "llama-cpp-python" not in dev
    assert "llama-cpp-python" in everything


def test_the_lowest_lock_pins_every_direct_requirement_at_its_lower_bound():
    pins = lock_pins(LOCKS / "lowest.txt")
    for requirement in requirements("dev"):
        name = normalize(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements/lowest.txt: {FIX}"
        assert Version(pins[name]) == lower_bound(requirement), (
            f"lowest.txt has {name}=={pins[name]} for {requirement}: the bound is not the "
            "lowest installable version; raise it to the version pinned there, or run `make lock`"
        )


@pytest.mark.parametrize("lock", ["all.txt", "dev.txt", "lowest.txt"])
def test_every_pin_has_hashes_and_the_lock_says_how_to_refresh_it(lock):
    text = (LOCKS / lock).read_text(encoding="utf-8")
    assert "make lock" in text.splitlines()[1]
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2].strip())
    assert entries
    for entry in entries:
        assert "==" in entry.splitlines()[0], entry
        assert "--hash=sha256:" in entry, entry


def test_the_version_has_one_source():
    assert loop_agents.__version__ == __version__
    assert importlib.metadata.version("loop-agents") == __version__, (
        "the installed metadata is stale: reinstall (make venv)"
    )
    assert "version" in PROJECT["dynamic"]
    assert "version" not in PROJECT
    done = subprocess.run(
        [sys.executable, "-m", "loop_agents_cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"loop-agents {__version__}"


def test_the_changelog_has_a_section_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.MULTILINE)
    assert headings, "CHANGELOG.md has no '## [VERSION]' section"
    if headings[0] == "Unreleased":  # Keep a Changelog: what the next version will add
        assert f"The next version, {__version__} (" in changelog, (
            "the [Unreleased] section of CHANGELOG.md does not name this version"
        )
        assert __version__ not in headings, f"{__version__} is both released and unreleased"
    else:
        assert headings[0] == __version__, "the newest section of CHANGELOG.md is not this version"


def test_the_supported_pythons_are_stated_and_match_the_lock():
    assert PROJECT["requires-python"] == ">=3.11"
    classifiers = PROJECT["classifiers"]
    tested = sorted(c.rsplit(" ", 1)[-1] for c in classifiers if re.search(r":: 3\.\d+$", c))
    assert tested == ["3.11"]
    for lock in ("all.txt", "dev.txt", "lowest.txt"):
        assert "--python-version 3.11" in (LOCKS / lock).read_text(encoding="utf-8")
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    assert "Python 3.11" in install
