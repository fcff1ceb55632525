"""Check what `make dist` built: the wheel holds the package and nothing else.

Usage: ``python scripts/check_dist.py DIST_DIR`` (exit status 1 and one line per problem).

- The wheel ``loop_agents-VERSION-py3-none-any.whl`` (VERSION from ``loop_agents/_version.py``)
  holds exactly the files of the source tree's ``loop_agents/`` folder, caches left out: every
  module, ``py.typed`` and every data file the package reads at run time (the eval task sets).
  A file in the folder that the wheel lacks is a data file that ``package-data`` in
  ``pyproject.toml`` misses (or a stray file to delete); the wheel holds no tests, no
  ``__pycache__`` and nothing outside ``loop_agents/`` but its ``.dist-info`` folder, whose
  metadata names that version and the ``loop-agents`` command.
  The licence text (``LICENSE``) is in the ``.dist-info`` folder and named in the metadata.
- The sdist ``loop_agents-VERSION.tar.gz`` holds no caches, virtual environments, ``.git``
  or ``.env`` files.
"""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "loop_agents"
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
ENTRY_POINT = "loop-agents = loop_agents_cli:main"


def source_version(root: Path = ROOT) -> str:
    """The version written in ``loop_agents/_version.py`` (read, not imported).

    Example:
        ```python
        print(source_version())  # 0.2.0
        ```
    """
    tree = ast.parse((root / PACKAGE / "_version.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise ValueError(f"{root / PACKAGE / '_version.py'} assigns no __version__ string")


def is_cache(path: PurePosixPath) -> bool:
    """Whether ``path`` is a byte-code cache or lies in a ``__pycache__`` folder."""
    return path.suffix in CACHE_SUFFIXES or "__pycache__" in path.parts


def expected_package_files(root: Path = ROOT) -> set[str]:
    """Every file of the source tree's package folder, as wheel paths, caches left out.

    Example:
        ```python
        assert "libs/evals/loop_agents_evals/data/code.jsonl" in expected_package_files()
        ```
    """
    found = set()
    for path in (root / PACKAGE).rglob("*"):
        relative = PurePosixPath(path.relative_to(root).as_posix())
        if path.is_file() and not is_cache(relative):
            found.add(str(relative))
    return found


def forbidden(name: str) -> bool:
    """Whether a distribution must not hold the file ``name``."""
    path = PurePosixPath(name)
    return bool(FORBIDDEN_PARTS & set(path.parts)) or is_cache(path)


def wheel_problems(wheel: Path, version: str, root: Path = ROOT) -> list[str]:
    """What is wrong with ``wheel``: missing, extra or misplaced files, wrong metadata.

    Example:
        ```python
        assert wheel_problems(Path("dist/loop_agents-0.2.0-py3-none-any.whl"), "0.2.0") == []
        ```
    """
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if not n.endswith("/")}
        dist_info = f"{PACKAGE}-{version}.dist-info/"

        def text(name: str) -> str:
            return archive.read(dist_info + name).decode() if dist_info + name in names else ""

        metadata = text("METADATA")
        entry_points = text("entry_points.txt")
    problems = []
    package = {n for n in names if n.startswith(f"{PACKAGE}/")}
    expected = expected_package_files(root)
    for name in sorted(expected - package):
        problems.append(
            f"{name}: in the source tree but not in the wheel (a data file the package reads "
            "must be listed in [tool.setuptools.package-data] in pyproject.toml; delete a "
            "stray file)"
        )
    for name in sorted(package - expected):
        problems.append(
            f"{name}: in the wheel but not in the source tree (a cache or a stale build)"
        )
    for name in sorted(names - package):
        if not name.startswith(dist_info):
            problems.append(
                f"{name}: outside {PACKAGE}/ and {dist_info} (the wheel holds only the package)"
            )
    problems += [f"{name}: must not be in a wheel" for name in sorted(names) if forbidden(name)]
    if not metadata:
        problems.append(f"{dist_info}METADATA is missing")
    else:
        fields = Parser().parsestr(metadata, headersonly=True)
        if fields["Name"] != PACKAGE or fields["Version"] != version:
            problems.append(
                f"METADATA names {fields['Name']} {fields['Version']}, expected {PACKAGE} {version}"
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
    if ENTRY_POINT not in entry_points:
        problems.append(f"{dist_info}entry_points.txt does not declare {ENTRY_POINT!r}")
    return problems


def sdist_problems(sdist: Path, version: str) -> list[str]:
    """What is wrong with ``sdist``: caches, environments or secrets inside, files missing.

    Example:
        ```python
        assert sdist_problems(Path("dist/loop_agents-0.2.0.tar.gz"), "0.2.0") == []
        ```
    """
    top = f"{PACKAGE}-{version}/"
    with tarfile.open(sdist) as archive:
        names = {m.name for m in archive.getmembers() if m.isfile()}
    problems = [f"{name}: outside {top}" for name in sorted(names) if not name.startswith(top)]
    problems += [f"{name}: must not be in an sdist" for name in sorted(names) if forbidden(name)]
    needed_files = ("PKG-INFO", "pyproject.toml", "README.md", "CHANGELOG.md")
    for needed in (*needed_files, f"{PACKAGE}/_version.py"):
        if top + needed not in names:
            problems.append(f"{top}{needed} is missing from the sdist")
    return problems


def dist_problems(dist: Path, root: Path = ROOT) -> list[str]:
    """Every problem of the sdist and the wheel of the source's version in ``dist``.

    Example:
        ```python
        for problem in dist_problems(Path("dist")):
            print(problem)
        ```
    """
    version = source_version(root)
    wheel = dist / f"{PACKAGE}-{version}-py3-none-any.whl"
    sdist = dist / f"{PACKAGE}-{version}.tar.gz"
    problems = [
        f"{path} is missing (run: make dist)" for path in (wheel, sdist) if not path.is_file()
    ]
    if wheel.is_file():
        problems += [f"{wheel.name}: {p}" for p in wheel_problems(wheel, version, root)]
    if sdist.is_file():
        problems += [f"{sdist.name}: {p}" for p in sdist_problems(sdist, version)]
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
        version = source_version()
        print(f"{argv[0]}: the sdist and the wheel of {PACKAGE} {version} hold what they should")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
