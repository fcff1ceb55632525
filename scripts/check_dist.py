"""Check what `make dist` built: each distribution's wheel holds its package and nothing else.

Usage: ``python scripts/check_dist.py DIST_DIR`` (exit status 1 and one line per problem).

For each distribution of the repository (`DISTRIBUTIONS`: the library at the top, the others
in ``libs/``):

- the wheel ``<name>-VERSION-py3-none-any.whl`` holds exactly the files of the source tree's
  package folder, caches left out: every module, ``py.typed`` and every data file the package
  reads at run time. A file in the folder that the wheel lacks is a data file that
  ``package-data`` misses (or a stray file to delete); the wheel holds no tests, no
  ``__pycache__`` and nothing outside the package but its ``.dist-info`` folder, whose
  metadata names the distribution, its version, the MIT licence and its entry points;
- the sdist ``<name>-VERSION.tar.gz`` holds no caches, virtual environments, ``.git`` or
  ``.env`` files, and holds the files a build from it needs.
"""

from __future__ import annotations

import ast
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
CACHE_SUFFIXES = (".pyc", ".pyo")
FORBIDDEN_PARTS = {
    "__pycache__",
    ".git",
    ".venv",
    ".venv-lowest",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".langgraph_api",
    ".env",
}
"""No path in a distribution may have one of these as a folder or file name."""


@dataclass(frozen=True)
class Distribution:
    """One distribution of the repository.

    Attributes:
        name: Its name on an index (``loop-agents-cli``).
        folder: Its folder, relative to the repository (where its pyproject.toml is).
        package: The import package it ships (``loop_agents_cli``).
        entry_points: Lines its ``entry_points.txt`` must hold.
        sdist_files: Files its sdist must hold besides the package.

    """

    name: str
    folder: str
    package: str
    entry_points: tuple[str, ...] = ()
    sdist_files: tuple[str, ...] = ("PKG-INFO", "pyproject.toml", "README.md")

    @property
    def file_name(self) -> str:
        """The name in its wheel's and sdist's file names (``loop_agents_cli``)."""
        return self.name.replace("-", "_")


DISTRIBUTIONS = (
    Distribution(
        "loop-agents",
        ".",
        "loop_agents",
        sdist_files=("PKG-INFO", "pyproject.toml", "README.md", "CHANGELOG.md"),
    ),
    Distribution("loop-agents-checks", "libs/checks", "loop_agents_checks"),
    Distribution(
        "loop-agents-cli", "libs/cli", "loop_agents_cli", ("loop-agents = loop_agents_cli:main",)
    ),
    Distribution(
        "loop-agents-evals",
        "libs/evals",
        "loop_agents_evals",
        ("[loop_agents_cli.commands]", "eval = loop_agents_evals.command:EVAL_COMMAND"),
    ),
)
"""Every distribution `make dist` builds."""


def source_version(distribution: Distribution, root: Path = ROOT) -> str:
    """The version the source tree gives ``distribution`` (read, not imported).

    The library's is written in ``loop_agents/_version.py``; the others' in their
    pyproject.toml.

    Example:
        ```python
        print(source_version(DISTRIBUTIONS[0]))  # 0.3.0
        ```
    """
    folder = root / distribution.folder
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    if "version" in project:
        return str(project["version"])
    module = folder / distribution.package / "_version.py"
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise ValueError(f"{module} assigns no __version__ string")


def is_cache(path: PurePosixPath) -> bool:
    """Whether ``path`` is a byte-code cache or lies in a ``__pycache__`` folder."""
    return path.suffix in CACHE_SUFFIXES or "__pycache__" in path.parts


def expected_package_files(distribution: Distribution, root: Path = ROOT) -> set[str]:
    """Every file of the distribution's package folder, as wheel paths, caches left out.

    Example:
        ```python
        evals = DISTRIBUTIONS[3]
        assert "loop_agents_evals/data/code.jsonl" in expected_package_files(evals)
        ```
    """
    folder = root / distribution.folder
    found = set()
    for path in (folder / distribution.package).rglob("*"):
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if path.is_file() and not is_cache(relative):
            found.add(str(relative))
    return found


def forbidden(name: str) -> bool:
    """Whether a distribution must not hold the file ``name``."""
    path = PurePosixPath(name)
    return bool(FORBIDDEN_PARTS & set(path.parts)) or is_cache(path)


def wheel_problems(
    wheel: Path, distribution: Distribution, version: str, root: Path = ROOT
) -> list[str]:
    """What is wrong with ``wheel``: missing, extra or misplaced files, wrong metadata.

    Example:
        ```python
        wheel = Path("dist/loop_agents-0.3.0-py3-none-any.whl")
        assert wheel_problems(wheel, DISTRIBUTIONS[0], "0.3.0") == []
        ```
    """
    package_name = distribution.package
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if not n.endswith("/")}
        dist_info = f"{distribution.file_name}-{version}.dist-info/"

        def text(name: str) -> str:
            return archive.read(dist_info + name).decode() if dist_info + name in names else ""

        metadata = text("METADATA")
        entry_points = text("entry_points.txt")
    problems = []
    package = {n for n in names if n.startswith(f"{package_name}/")}
    expected = expected_package_files(distribution, root)
    for name in sorted(expected - package):
        problems.append(
            f"{name}: in the source tree but not in the wheel (a data file the package reads "
            "must be listed in [tool.setuptools.package-data] in its pyproject.toml; delete a "
            "stray file)"
        )
    for name in sorted(package - expected):
        problems.append(
            f"{name}: in the wheel but not in the source tree (a cache or a stale build)"
        )
    for name in sorted(names - package):
        if not name.startswith(dist_info):
            problems.append(
                f"{name}: outside {package_name}/ and {dist_info} (the wheel holds only the "
                "package)"
            )
    problems += [f"{name}: must not be in a wheel" for name in sorted(names) if forbidden(name)]
    if not metadata:
        problems.append(f"{dist_info}METADATA is missing")
    else:
        fields = Parser().parsestr(metadata, headersonly=True)
        if fields["Name"] != distribution.name or fields["Version"] != version:
            problems.append(
                f"METADATA names {fields['Name']} {fields['Version']}, expected "
                f"{distribution.name} {version}"
            )
        if fields["License-Expression"] != "MIT" or "LICENSE" not in fields.get_all(
            "License-File", []
        ):
            problems.append(
                "METADATA must declare License-Expression: MIT and License-File: LICENSE "
                "(license and license-files in pyproject.toml)"
            )
    if f"{dist_info}licenses/LICENSE" not in names:
        problems.append(f"{dist_info}licenses/LICENSE is missing (the MIT licence text)")
    for line in distribution.entry_points:
        if line not in entry_points.splitlines():
            problems.append(f"{dist_info}entry_points.txt does not declare {line!r}")
    return problems


def sdist_problems(sdist: Path, distribution: Distribution, version: str) -> list[str]:
    """What is wrong with ``sdist``: caches, environments or secrets inside, files missing.

    Example:
        ```python
        sdist = Path("dist/loop_agents-0.3.0.tar.gz")
        assert sdist_problems(sdist, DISTRIBUTIONS[0], "0.3.0") == []
        ```
    """
    top = f"{distribution.file_name}-{version}/"
    with tarfile.open(sdist) as archive:
        names = {m.name for m in archive.getmembers() if m.isfile()}
    problems = [f"{name}: outside {top}" for name in sorted(names) if not name.startswith(top)]
    problems += [f"{name}: must not be in an sdist" for name in sorted(names) if forbidden(name)]
    for needed in (*distribution.sdist_files, f"{distribution.package}/__init__.py"):
        if top + needed not in names:
            problems.append(f"{top}{needed} is missing from the sdist")
    return problems


def dist_problems(dist: Path, root: Path = ROOT) -> list[str]:
    """Every problem of the sdists and the wheels of the source's versions in ``dist``.

    Example:
        ```python
        for problem in dist_problems(Path("dist")):
            print(problem)
        ```
    """
    problems = []
    for distribution in DISTRIBUTIONS:
        version = source_version(distribution, root)
        wheel = dist / f"{distribution.file_name}-{version}-py3-none-any.whl"
        sdist = dist / f"{distribution.file_name}-{version}.tar.gz"
        problems += [
            f"{path} is missing (run: make dist)" for path in (wheel, sdist) if not path.is_file()
        ]
        if wheel.is_file():
            found = wheel_problems(wheel, distribution, version, root)
            problems += [f"{wheel.name}: {p}" for p in found]
        if sdist.is_file():
            problems += [f"{sdist.name}: {p}" for p in sdist_problems(sdist, distribution, version)]
    return problems


def main(argv: list[str]) -> int:
    """Check the distributions in ``argv[0]``; print each problem; 1 when there is one."""
    if len(argv) != 1:
        print("usage: python scripts/check_dist.py DIST_DIR", file=sys.stderr)
        return 2
    problems = dist_problems(Path(argv[0]))
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        names = ", ".join(f"{d.name} {source_version(d)}" for d in DISTRIBUTIONS)
        print(f"{argv[0]}: the sdists and the wheels of {names} hold what they should")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
