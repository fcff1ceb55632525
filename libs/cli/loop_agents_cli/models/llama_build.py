"""Whether the installed llama.cpp is the project's build: its flags, read from its build record.

pip's wheel cache does not look at ``CMAKE_ARGS``, so the build writes a record
(``llama_cpp/lib/loop_agents_build.json``) that `check_build` compares with `CMAKE_ARGS`;
``python -m loop_agents_cli.models.llama_build`` says whether it matches (docs/local-model.md).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SERVER_ONLY_CMAKE = Path(__file__).resolve().with_name("llama_cpp_server_only.cmake")
"""The CMake file the build includes: no common library, and the build record."""

CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
    "-DGGML_AMX_BF16=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF "
    f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={SERVER_ONLY_CMAKE}"
)
"""Portable code (a native build can crash), and only what the server loads."""

DISTRIBUTION = "llama-cpp-python"
"""The PyPI package that builds llama.cpp."""

RECORD_NAME = "loop_agents_build.json"
"""The build record's file name, in ``llama_cpp/lib`` next to the libraries."""

COMPILER_VARIABLES = ("CFLAGS", "CXXFLAGS")
"""Compiler flags CMake would add to the build (``-march=native``): the project's has none."""

CACHE_VARIABLE = "LOOP_AGENTS_BUILD_CACHE"
"""The pip cache ``make local`` keeps its builds in."""

_INCLUDE_FLAG = "CMAKE_PROJECT_llama.cpp_INCLUDE"
_TRUE = {"ON", "YES", "TRUE", "Y", "1"}
_FALSE = {"OFF", "NO", "FALSE", "N", "0", "", "IGNORE", "NOTFOUND"}


def project_flags(cmake_args: str = CMAKE_ARGS) -> dict[str, str]:
    """The ``-DNAME=VALUE`` settings of ``cmake_args`` (the included CMake file left out).

    Example:
        ```python
        project_flags()["GGML_NATIVE"]  # 'OFF'
        ```
    """
    flags: dict[str, str] = {}
    for word in shlex.split(cmake_args):
        if word.startswith("-D") and "=" in word:
            name, _, value = word[2:].partition("=")
            name = name.split(":", 1)[0]  # -DNAME:BOOL=OFF
            if name != _INCLUDE_FLAG:
                flags[name] = value
    return flags


def _same(built: str, wanted: str) -> bool:
    """Whether two CMake values mean the same (``OFF`` and ``0`` do, for a bool)."""
    b, w = built.strip().upper(), wanted.strip().upper()
    for kind in (_TRUE, _FALSE):
        if w in kind:
            return b in kind
    return built.strip() == wanted.strip()


def _include_sha256() -> str:
    return hashlib.sha256(SERVER_ONLY_CMAKE.read_bytes()).hexdigest()


def build_cache_dir() -> Path:
    """Where ``make local`` keeps the wheels it built with the project's flags (a pip cache).

    ``LOOP_AGENTS_BUILD_CACHE``, else ``loop_agents/pip`` in ``XDG_CACHE_HOME`` (``~/.cache``).

    Example:
        ```python
        print(build_cache_dir())  # /home/me/.cache/loop_agents/pip
        ```
    """
    given = os.environ.get(CACHE_VARIABLE, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "loop_agents" / "pip"


@dataclass(frozen=True)
class BuildCheck:
    """What `check_build` found (``version`` ``None``: not installed; ``problem`` "" if ok)."""

    ok: bool
    version: str | None
    problem: str = ""
    built: datetime | None = None
    record: dict[str, Any] | None = field(default=None, compare=False)
    location: Path | None = None

    def summary(self) -> str:
        """One line: the version and when it was built, or the problem.

        Example:
            ```python
            check_build().summary()  # "llama-cpp-python 0.3.36, built with the project's ..."
            ```
        """
        if not self.ok:
            return self.problem
        when = f" on {self.built:%Y-%m-%d %H:%M} UTC" if self.built is not None else ""
        return f"{DISTRIBUTION} {self.version}, built with the project's flags{when}"


def _installed_package() -> tuple[str | None, Path | None]:
    """llama-cpp-python's version and its ``llama_cpp`` folder, without importing it."""
    importlib.invalidate_caches()
    try:
        version: str | None = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        spec = None
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    return version, folder


def check_build(cmake_args: str = CMAKE_ARGS) -> BuildCheck:
    """Whether the installed llama-cpp-python was built with ``cmake_args`` (the project's).

    Its record must name every flag with the same value, come from the current
    `SERVER_ONLY_CMAKE`, and show no ``CFLAGS`` or ``CXXFLAGS``.

    Example:
        ```python
        if not (build := check_build()).ok:
            print(build.problem, "; rebuild with:", rebuild_command())
        ```
    """
    version, folder = _installed_package()
    if folder is None:
        return BuildCheck(False, version, f"{DISTRIBUTION} is not installed")
    name = f"{DISTRIBUTION} {version or '(version unknown)'}"
    location = folder / "lib" / RECORD_NAME
    try:
        record = json.loads(location.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problem = (
            f"{name} has no record of its build flags ({location} is missing): it was built "
            "by another command, or pip installed a wheel it had cached from such a build, "
            "so its flags are unknown"
        )
        return BuildCheck(False, version, problem, location=location)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = f"{name}'s build record {location} cannot be read: {exc}"
        return BuildCheck(False, version, problem, location=location)
    if not isinstance(record, dict) or not isinstance(record.get("flags"), dict):
        problem = f"{name}'s build record {location} is not one the project wrote (no flags in it)"
        return BuildCheck(False, version, problem, location=location)
    problem = _record_problem(name, record, cmake_args)
    return BuildCheck(
        not problem, version, problem, _parse_time(record.get("built")), record, location
    )


def _record_problem(name: str, record: dict[str, Any], cmake_args: str) -> str:
    """Why the build ``record`` tells of is not the project's; ``""`` when it is."""
    recorded = {str(k): str(v) for k, v in record["flags"].items()}
    differing = {
        flag: value
        for flag, value in project_flags(cmake_args).items()
        if flag not in recorded or not _same(recorded[flag], value)
    }
    compiler = record.get("compiler_flags")
    if differing:
        built_with = ", ".join(
            f"{flag}={recorded[flag]}" if flag in recorded else f"no {flag}" for flag in differing
        )
        wanted = ", ".join(f"{flag}={value}" for flag, value in differing.items())
        return f"{name} was built with other flags: {built_with} (the project's: {wanted})"
    if record.get("include_sha256") != _include_sha256():
        return (
            f"{name} was built with another version of {SERVER_ONLY_CMAKE.name} (an older "
            "loop_agents), which may leave out or add parts"
        )
    if not isinstance(compiler, dict):
        return f"{name}'s build record does not say which CFLAGS and CXXFLAGS it had"
    if given := {k: str(compiler.get(k)) for k in COMPILER_VARIABLES if compiler.get(k)}:
        return (
            f"{name} was built with compiler flags from the environment: "
            + ", ".join(f"{k}={v!r}" for k, v in given.items())
            + " (the project's build has none: they can make code that this CPU cannot run)"
        )
    return ""


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _checkout() -> Path | None:
    """The source checkout this module runs from (with its Makefile), if it does."""
    root = Path(__file__).resolve().parents[2]
    if (root / "Makefile").is_file() and (root / "pyproject.toml").is_file():
        return root
    return None


def build_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) for the project's build: no ``CFLAGS``/``CXXFLAGS``.

    Example:
        ```python
        env = build_environment({"CFLAGS": "-march=native", "PATH": "/usr/bin"})
        assert env == {"PATH": "/usr/bin", "CMAKE_ARGS": CMAKE_ARGS}
        ```
    """
    env = dict(os.environ if environ is None else environ)
    for name in COMPILER_VARIABLES:
        env.pop(name, None)
    return env | {"CMAKE_ARGS": CMAKE_ARGS}


def rebuild_command(
    version: str | None = None, python: str | None = None, *, from_source: bool = False
) -> str:
    """The shell command that rebuilds llama-cpp-python here with the project's flags.

    ``make local`` from a checkout whose ``.venv`` this is; else pip with
    ``--force-reinstall --no-deps --no-cache-dir`` and no ``CFLAGS``/``CXXFLAGS``.
    ``from_source``: a matching build that crashed; also remove that version's cached wheels.

    Example:
        ```python
        print(rebuild_command("0.3.36"))  # CFLAGS= CXXFLAGS= CMAKE_ARGS="..." python -m pip ...
        ```
    """
    interpreter = shlex.quote(python or sys.executable)
    root = _checkout()
    if root is not None and python is None and Path(sys.prefix).resolve() == root / ".venv":
        return f"make -C {shlex.quote(str(root))} local" + (" REBUILD=1" if from_source else "")
    version = version or _installed_package()[0]
    requirement = f"{DISTRIBUTION}=={version}" if version else DISTRIBUTION
    build = (
        f"{build_prefix()} {interpreter} -m pip install --force-reinstall --no-deps "
        f"--no-cache-dir {shlex.quote(requirement)}"
    )
    if not from_source:
        return build
    wheels = f"{DISTRIBUTION.replace('-', '_')}" + (f"-{version}" if version else "")
    return f"{interpreter} -m pip cache remove {wheels}; {build}"


def build_prefix() -> str:
    """The shell words that set a pip command's environment for the project's build.

    Example:
        ```python
        build_prefix()  # 'CFLAGS= CXXFLAGS= CMAKE_ARGS="-DGGML_NATIVE=OFF ..."'
        ```
    """
    return " ".join(f"{name}=" for name in COMPILER_VARIABLES) + f' CMAKE_ARGS="{CMAKE_ARGS}"'


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loop_agents_cli.models.llama_build``: is the installed build the project's?

    Prints one line and returns 0 when it is; else why not and the rebuild command, and 1.
    ``--json``: the check as JSON (what ``make local`` reads).
    """
    parser = argparse.ArgumentParser(
        prog="python -m loop_agents_cli.models.llama_build",
        description="Say whether the installed llama-cpp-python was built with the "
        "project's flags (its build record), and how to rebuild it when not.",
    )
    parser.add_argument("--json", action="store_true", help="print the check as JSON")
    args = parser.parse_args(argv)
    build = check_build()
    if args.json:
        print(
            json.dumps(
                {
                    "ok": build.ok,
                    "version": build.version,
                    "problem": build.problem,
                    "built": build.built.isoformat() if build.built else None,
                    "summary": build.summary(),
                    "rebuild": rebuild_command(build.version),
                }
            )
        )
    elif build.ok:
        print(build.summary())
    else:
        verb = "Rebuild" if build.version else "Install"
        print(f"llama_build: {build.problem}.\n{verb} it with:\n  {rebuild_command()}")
    return 0 if build.ok else 1


if __name__ == "__main__":
    sys.exit(main())
