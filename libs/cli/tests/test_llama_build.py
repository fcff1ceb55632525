"""llama.cpp's build record and `make local`: a build with other flags is never used silently.

pip's wheel cache does not look at ``CMAKE_ARGS``. The project's CMake file writes a build
record into the wheel (`loop_agents_cli.models.llama_build`); ``make local``
(``scripts/install_local.py``) checks it after pip and reinstalls llama-cpp-python with the
project's flags when it is not the project's build. Here: the record as CMake writes it
(a small CMake project that includes the file as llama-cpp-python's build does), the
check, and the installer's decisions with a stand-in for pip. The real ``make local``
with a poisoned pip cache is ``libs/cli/tests/test_make_local.py``.
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
from pathlib import Path

import pytest

from loop_agents_cli.models import llama_build
from loop_agents_cli.models.llama_build import (
    CMAKE_ARGS,
    RECORD_NAME,
    SERVER_ONLY_CMAKE,
    check_build,
    project_flags,
    rebuild_command,
)
from tests.conftest import ROOT

HANG = 600
"""Seconds after which a wait is a hang, not a slow machine."""


def _record(flags: dict[str, str] | None = None, **fields: object) -> dict[str, object]:
    """A build record as the project's CMake file writes it, for the project's flags."""
    import hashlib

    return {
        "format": 1,
        "built": "2025-12-05T07:43:00Z",
        "include_sha256": hashlib.sha256(SERVER_ONLY_CMAKE.read_bytes()).hexdigest(),
        "cmake_args": CMAKE_ARGS,
        "compiler_flags": {"CFLAGS": "", "CXXFLAGS": ""},
        "flags": dict(project_flags() | {"LLAMA_BUILD_COMMON": "OFF"}, **(flags or {})),
    } | fields


def _package(root: Path, record: dict[str, object] | str | None, version: str = "0.3.36") -> Path:
    """An installed llama-cpp-python stand-in in ``root``: metadata, package, record."""
    (root / "llama_cpp" / "lib").mkdir(parents=True)
    (root / "llama_cpp" / "__init__.py").write_text("")
    info = root / f"llama_cpp_python-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Name: llama_cpp_python\nVersion: {version}\n")
    if record is not None:
        text = record if isinstance(record, str) else json.dumps(record)
        (root / "llama_cpp" / "lib" / RECORD_NAME).write_text(text)
    return root


def _check_in(root: Path) -> dict[str, object]:
    """`python -m loop_agents_cli.models.llama_build --json` with ``root`` first on the path."""
    env = os.environ | {"PYTHONPATH": f"{root}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-m", "loop_agents_cli.models.llama_build", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    assert proc.returncode == (0 if result["ok"] else 1), proc.stderr
    return result


def test_the_project_flags_are_the_cmake_args_but_the_included_file():
    flags = project_flags()
    assert flags["GGML_NATIVE"] == "OFF"
    assert flags["LLAVA_BUILD"] == "OFF"
    assert "CMAKE_PROJECT_llama.cpp_INCLUDE" not in flags
    assert project_flags("-DA:BOOL=ON -DB='x y' -G Ninja") == {"A": "ON", "B": "x y"}


def test_a_build_with_the_projects_record_is_the_projects(tmp_path):
    result = _check_in(_package(tmp_path, _record()))
    assert result["ok"] is True
    assert result["summary"] == (
        "llama-cpp-python 0.3.36, built with the project's flags on 2025-12-05 07:43 UTC"
    )
    # a bool is the same bool however CMake spells it
    assert _check_in(_package(tmp_path / "b", _record({"GGML_NATIVE": "0"})))["ok"] is True


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (None, "has no record of its build flags"),
        ("{not json", "build record .* cannot be read"),
        (json.dumps({"format": 1}), "is not one the project wrote"),
        (
            _record({"GGML_NATIVE": "ON"}),
            r"was built with other flags: GGML_NATIVE=ON \(the project's: GGML_NATIVE=OFF\)",
        ),
        (
            {k: v for k, v in _record().items() if k != "flags"} | {"flags": {}},
            "was built with other flags: no GGML_NATIVE, ",
        ),
        (_record(include_sha256="0" * 64), "another version of llama_cpp_server_only.cmake"),
        (
            _record(compiler_flags={"CFLAGS": "-O3 -march=native", "CXXFLAGS": ""}),
            r"was built with compiler flags from the environment: CFLAGS='-O3 -march=native' "
            r"\(the project's build has none",
        ),
        (
            _record(compiler_flags={"CFLAGS": "", "CXXFLAGS": "-march=native"}),
            "compiler flags from the environment: CXXFLAGS='-march=native'",
        ),
        (
            {k: v for k, v in _record().items() if k != "compiler_flags"},
            "build record does not say which CFLAGS and CXXFLAGS it had",
        ),
    ],
    ids=[
        *("no record", "damaged", "foreign", "native", "no flags", "old cmake file"),
        *("native CFLAGS", "native CXXFLAGS", "no compiler flags"),
    ],
)
def test_a_build_without_the_projects_record_is_not_the_projects(tmp_path, record, problem):
    result = _check_in(_package(tmp_path, record))
    assert result["ok"] is False
    assert re.search(problem, str(result["problem"])), result["problem"]
    assert str(result["problem"]).startswith("llama-cpp-python 0.3.36")
    assert "--force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36" in str(
        result["rebuild"]
    ) or str(result["rebuild"]).endswith(" local")


def test_not_installed_and_the_commands_message(tmp_path, monkeypatch):
    monkeypatch.setattr(llama_build, "_installed_package", lambda: (None, None))
    build = check_build()
    assert not build.ok
    assert build.problem == "llama-cpp-python is not installed"
    monkeypatch.setattr(llama_build, "_installed_package", lambda: ("0.3.36", tmp_path))
    monkeypatch.setattr(llama_build, "_checkout", lambda: None)
    command = rebuild_command()
    assert command == (
        f'CFLAGS= CXXFLAGS= CMAKE_ARGS="{CMAKE_ARGS}" {sys.executable} -m pip install '
        "--force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36"
    )
    # a matching build that crashed: its cached wheels go, then the build from source
    assert rebuild_command(from_source=True) == (
        f"{sys.executable} -m pip cache remove llama_cpp_python-0.3.36; {command}"
    )


def test_in_a_checkout_the_rebuild_is_make_local_and_from_source_make_local_rebuild(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(llama_build, "_checkout", lambda: tmp_path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    assert rebuild_command() == f"make -C {tmp_path} local"
    assert rebuild_command(from_source=True) == f"make -C {tmp_path} local REBUILD=1"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_local_rebuild_asks_the_installer_to_rebuild_from_source(tmp_path):
    def recipe(*variables: str) -> str:
        proc = subprocess.run(
            ["make", "-n", "--no-print-directory", "-C", str(ROOT), "local",
             f"VENV={tmp_path / 'venv'}", *variables],
            env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
            capture_output=True, text=True, timeout=HANG, check=True,
        )  # fmt: skip
        return proc.stdout[proc.stdout.index("scripts/install_local.py") :]

    assert recipe("REBUILD=1").split()[-1] == "--rebuild"
    assert "--rebuild" not in recipe()
    assert "--rebuild" not in recipe("REBUILD=0")


def test_the_build_environment_has_the_project_flags_and_no_compiler_flags():
    env = llama_build.build_environment({"CFLAGS": "-march=native", "CXXFLAGS": "-O3", "A": "b"})
    assert env == {"A": "b", "CMAKE_ARGS": CMAKE_ARGS}


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_the_cmake_file_records_the_flags_the_build_had(tmp_path):
    """A CMake project shaped like llama-cpp-python's (a top project that forces an option,
    then llama.cpp's ``project()``, which includes the file), configured and installed
    with the project's CMAKE_ARGS and one more: the record says what the build had."""
    source = tmp_path / "src"
    (source / "vendor").mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(
        textwrap.dedent(
            """\
            cmake_minimum_required(VERSION 3.21)
            project(llama_cpp NONE)
            option(LLAVA_BUILD "x" ON)
            set(LLAMA_BUILD_COMMON ON CACHE BOOL "forced on by llama-cpp-python" FORCE)
            add_subdirectory(vendor)
            """
        )
    )
    (source / "vendor" / "CMakeLists.txt").write_text("project(llama.cpp NONE)\n")
    args = f"{CMAKE_ARGS} -DGGML_CUDA=ON"
    import shlex

    def build(name: str, **compiler_flags: str) -> dict[str, object]:
        env = llama_build.build_environment() | {"CMAKE_ARGS": args} | compiler_flags
        platlib = tmp_path / name / "platlib"
        for command in (
            ["cmake", "-S", str(source), "-B", str(tmp_path / name / "build"),
             *shlex.split(args), f"-DSKBUILD_PLATLIB_DIR={platlib}"],
            ["cmake", "--install", str(tmp_path / name / "build")],
        ):  # fmt: skip
            proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        record: dict[str, object] = json.loads(
            (platlib / "llama_cpp" / "lib" / RECORD_NAME).read_text()
        )
        return record

    record = build("project")
    assert record["cmake_args"] == args
    assert record["flags"]["GGML_NATIVE"] == "OFF"
    assert record["flags"]["GGML_CUDA"] == "ON"
    assert record["flags"]["LLAMA_BUILD_COMMON"] == "OFF"  # the file turned it off
    assert record["compiler_flags"] == {"CFLAGS": "", "CXXFLAGS": ""}
    built = datetime.strptime(record["built"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - built).total_seconds()) < 24 * 3600
    # that build is the project's: the check reads what the file wrote
    result = _check_in(_package(tmp_path / "site", record))
    assert result["ok"] is True, result["problem"]
    # the same flags with CFLAGS from the environment: recorded, and not the project's
    native = build("native", CFLAGS='-O2 -march=native "-DX=a b"', CXXFLAGS="-march=native")
    assert native["compiler_flags"] == {
        "CFLAGS": '-O2 -march=native "-DX=a b"',
        "CXXFLAGS": "-march=native",
    }
    result = _check_in(_package(tmp_path / "native-site", native))
    assert result["ok"] is False
    assert "built with compiler flags from the environment: CFLAGS=" in str(result["problem"])


# -- make local's installer, with a stand-in for pip ------------------------------------

FAKE_PYTHON = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    # `python -m pip install ...`: installs a llama-cpp-python stand-in as FAKE_PIP_PLAN says
    # for this kind of install; anything else runs the real interpreter
    import json, os, shutil, sys
    from pathlib import Path
    real, site = os.environ["REAL_PYTHON"], Path(os.environ["FAKE_SITE"])
    args = sys.argv[1:]
    if args[:3] == ["-m", "pip", "check"] and os.environ.get("FAKE_PIP_CHECK"):
        print(os.environ["FAKE_PIP_CHECK"], flush=True)
        sys.exit(1)
    compiler = [os.environ.get("CFLAGS"), os.environ.get("CXXFLAGS")]
    if args[:2] == ["-m", "pip"] and "cache" in args:  # never the real cache
        with open(os.environ["FAKE_PIP_LOG"], "a") as log:
            log.write(json.dumps(["cache", args[2:], None, compiler]) + "\\n")
        print("Files removed: 1 (14.1 MB)")
        sys.exit(0)
    if args[:3] != ["-m", "pip", "install"]:
        os.execve(real, [real, *args], os.environ)
    kind = "no-cache" if "--no-cache-dir" in args else "build-cache" if "--cache-dir" in args else "all"
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(json.dumps([kind, args[3:], os.environ.get("CMAKE_ARGS"), compiler]) + "\\n")
    what = json.loads(os.environ["FAKE_PIP_PLAN"]).get(kind, "nothing")
    if what == "fail":
        print("ERROR: pip failed", flush=True)
        sys.exit(5)
    print(f"Collecting llama-cpp-python==0.3.36 ({kind}: {what})", flush=True)
    if what == "nothing":
        sys.exit(0)
    shutil.rmtree(site / "llama_cpp", ignore_errors=True)
    (site / "llama_cpp" / "lib").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    if what != "foreign":
        record = json.loads(os.environ["FAKE_RECORD"])
        if what == "ours-now":
            from datetime import datetime, timezone
            record["built"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        (site / "llama_cpp" / "lib" / "loop_agents_build.json").write_text(json.dumps(record))
    print("Successfully installed llama-cpp-python-0.3.36", flush=True)
    """
)


def _install(
    tmp_path: Path,
    plan: dict[str, str],
    *,
    stamp: bool = False,
    installed: str = "",
    pip_check: str = "",
    rebuild: bool = False,
):
    """Run scripts/install_local.py with the stand-in pip; return (status, lines, pip calls)."""
    site = tmp_path / "site"
    if not site.exists():
        _package(site, None)  # metadata for version 0.3.36
        shutil.rmtree(site / "llama_cpp")
    if installed:
        (site / "llama_cpp" / "lib").mkdir(parents=True, exist_ok=True)
        (site / "llama_cpp" / "__init__.py").write_text("")
        (site / "llama_cpp" / "lib" / RECORD_NAME).write_text(json.dumps(_record()))
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    requirements = ROOT / "requirements" / "all.txt"
    stamp_file = tmp_path / ".installed-local"
    if stamp:
        stamp_file.touch()
    log = tmp_path / "pip-calls.jsonl"
    env = os.environ | {
        "REAL_PYTHON": sys.executable,
        "FAKE_SITE": str(site),
        "FAKE_PIP_LOG": str(log),
        "FAKE_PIP_PLAN": json.dumps(plan),
        "FAKE_RECORD": json.dumps(_record()),
        "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
        "LOOP_AGENTS_BUILD_CACHE": str(tmp_path / "build-cache"),
        "CMAKE_ARGS": "-DGGML_NATIVE=ON",  # a user's own: make local sets the project's
        "CFLAGS": "-march=native",  # the user's own too: make local builds without them
        "CXXFLAGS": "-march=native",
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),  # if a real pip ran, not the real cache
        "FAKE_PIP_CHECK": pip_check,  # what `pip check` finds (nothing: the real one runs)
    }
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "scripts" / "install_local.py"),
            "--python", str(python), "--requirements", str(requirements),
            "--log", str(tmp_path / "local-build.log"), "--stamp", str(stamp_file),
            "--every", "0", *(["--rebuild"] if rebuild else []),
        ],
        env=env, capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, proc.stdout.splitlines(), calls, stamp_file.exists()


def test_a_matching_build_from_the_lock_is_reused_or_said_built(tmp_path):
    status, lines, calls, stamped = _install(tmp_path, {"all": "ours"})
    assert status == 0, lines
    assert [c[0] for c in calls] == ["all"]
    assert calls[0][2] == CMAKE_ARGS  # the project's flags, not the user's
    assert calls[0][3] == [None, None]  # and no compiler flags of the user's
    # the lock is the whole closure: nothing is resolved (pip's resolver fails in hash mode
    # on a dependency asked for with an extra once a newer release exists, pypa/pip#9644)
    assert calls[0][1][-3:] == ["--no-deps", "-r", str(ROOT / "requirements" / "all.txt")]
    assert re.fullmatch(r"make local: installed the locked packages in \d+s", lines[-2])
    assert lines[-1] == (
        "make local: llama.cpp: reused a matching build (llama-cpp-python 0.3.36, built "
        "with the project's flags on 2025-12-05 07:43 UTC)"
    )
    assert stamped
    status, lines, calls, _ = _install(tmp_path / "b", {"all": "ours-now"})
    assert status == 0
    assert lines[-1].startswith("make local: llama.cpp: built just now (llama-cpp-python 0.3.36")


def test_a_cached_wheel_with_other_flags_is_reinstalled_through_the_build_cache(tmp_path):
    status, lines, calls, stamped = _install(tmp_path, {"all": "foreign", "build-cache": "ours"})
    assert status == 0, lines
    assert [c[0] for c in calls] == ["all", "build-cache"]
    reinstall = calls[1][1][calls[1][1].index("--force-reinstall") :]
    assert reinstall[:3] == ["--force-reinstall", "--no-deps", "--cache-dir"]
    assert reinstall[3] == str(tmp_path / "build-cache")
    assert calls[1][2] == CMAKE_ARGS
    said = "\n".join(lines)
    assert (
        "make local: llama.cpp: the installed build is not the project's: llama-cpp-python "
        "0.3.36 has no record of its build flags" in said
    )
    assert lines[-1] == (
        "make local: llama.cpp: reused a matching build from the project's build cache "
        "(llama-cpp-python 0.3.36, built with the project's flags on 2025-12-05 07:43 UTC)"
    )
    assert stamped


def test_a_build_cache_with_a_foreign_build_falls_back_to_no_cache(tmp_path):
    plan = {"all": "foreign", "build-cache": "foreign", "no-cache": "ours-now"}
    status, lines, calls, _ = _install(tmp_path, plan)
    assert status == 0, lines
    assert [c[0] for c in calls] == ["all", "build-cache", "no-cache"]
    assert "--no-cache-dir" in calls[2][1]
    assert any(line.startswith("make local: llama.cpp: still not the project's") for line in lines)
    assert lines[-1].startswith(
        "make local: llama.cpp: built with the project's flags (llama-cpp-python 0.3.36"
    )


def test_a_build_that_never_is_the_projects_fails_saying_why(tmp_path):
    plan = {"all": "foreign", "build-cache": "foreign", "no-cache": "foreign"}
    status, lines, _, stamped = _install(tmp_path, plan)
    assert status == 1
    assert lines[-1].startswith(
        "make local: llama.cpp: failed: even a build from source without any cache is not "
        "the project's build (llama-cpp-python 0.3.36 has no record of its build flags"
    )
    assert "nothing overrides CMAKE_ARGS" in lines[-1]
    assert not stamped


def test_pips_failure_keeps_pips_status_and_log(tmp_path):
    status, lines, _, stamped = _install(tmp_path, {"all": "fail"})
    assert status == 5
    assert any("failed after" in line and "(exit status 5)" in line for line in lines)
    assert "  ERROR: pip failed" in lines
    assert not stamped


def test_locked_packages_that_do_not_fit_together_stop_with_pip_checks_words(tmp_path):
    broken = "langchain 1.5.2 has requirement langgraph<1.3,>=1.2, but you have langgraph 9.0."
    status, lines, calls, stamped = _install(tmp_path, {"all": "ours"}, pip_check=broken)
    assert status == 1
    assert [c[0] for c in calls] == ["all"]
    assert lines[-1] == (
        f"make local: the locked packages do not fit together (`pip check`): {broken}; "
        "refresh the lock with `make lock`"
    )
    assert not stamped


def test_an_up_to_date_install_only_checks_the_build(tmp_path):
    # the stamp is newer than the lock: no pip install -r, only the check
    status, lines, calls, _ = _install(tmp_path, {}, stamp=True, installed="ours")
    assert status == 0, lines
    assert calls == []
    assert lines == [
        "make local: llama.cpp: reused a matching build (llama-cpp-python 0.3.36, built "
        "with the project's flags on 2025-12-05 07:43 UTC)"
    ]


def test_the_lock_entry_of_llama_cpp_python_keeps_its_hashes():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from install_local import locked_requirement
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    entry = locked_requirement(ROOT / "requirements" / "all.txt")
    first, *hashes = entry.splitlines()
    assert first.startswith("llama-cpp-python==")
    assert first.endswith(" \\")
    assert hashes
    assert all(line.strip().startswith("--hash=sha256:") for line in hashes)
    assert not entry.rstrip().endswith("\\")


# -- make local REBUILD=1: a matching build that crashed is compiled again ----------------


def test_rebuild_compiles_from_source_with_no_cache_although_the_record_matches(tmp_path):
    status, lines, calls, stamped = _install(
        tmp_path, {"no-cache": "ours-now"}, stamp=True, installed="ours", rebuild=True
    )
    assert status == 0, lines
    assert [c[0] for c in calls] == ["cache", "cache", "no-cache"]
    # the suspect's cached wheels leave pip's cache and the project's build cache ...
    assert calls[0][1] == ["cache", "remove", "llama_cpp_python-0.3.36"]
    cache = str(tmp_path / "build-cache")
    assert calls[1][1] == ["--cache-dir", cache, "cache", "remove", "llama_cpp_python-0.3.36"]
    assert lines[0] == (
        "make local: llama.cpp: rebuilding llama-cpp-python 0.3.36 from source as asked "
        "(REBUILD=1): the installed build is the suspect whatever its record says, so no "
        "cached build is used; cached wheels of that version removed: 1 from pip's cache; "
        f"1 from the project's build cache ({cache})"
    )
    # ... and it is compiled again with no cache at all, although its record matched
    reinstall = calls[2][1][calls[2][1].index("--force-reinstall") :]
    assert reinstall[:3] == ["--force-reinstall", "--no-deps", "--no-cache-dir"]
    assert calls[2][2:] == [CMAKE_ARGS, [None, None]]
    assert lines[-1].startswith(
        "make local: llama.cpp: rebuilt from source with the project's flags "
        "(llama-cpp-python 0.3.36, built with the project's flags on "
    )
    assert stamped


def test_rebuild_after_a_fresh_install_that_compiled_compiles_once(tmp_path):
    status, lines, calls, _ = _install(tmp_path, {"all": "ours-now"}, rebuild=True)
    assert status == 0, lines
    assert [c[0] for c in calls] == ["cache", "cache", "all"]
    assert lines[-1].startswith("make local: llama.cpp: built just now (llama-cpp-python 0.3.36")


def test_rebuild_that_compiles_nothing_fails_saying_so(tmp_path):
    status, lines, calls, _ = _install(
        tmp_path, {"no-cache": "ours"}, stamp=True, installed="ours", rebuild=True
    )
    assert status == 1
    assert [c[0] for c in calls] == ["cache", "cache", "no-cache"]
    assert lines[-1].startswith(
        "make local: llama.cpp: failed: pip installed llama-cpp-python without compiling it "
        "although no cache was allowed (llama-cpp-python 0.3.36, built with the project's "
        "flags on 2025-12-05 07:43 UTC): a wheel comes from elsewhere; check pip's config"
    )
