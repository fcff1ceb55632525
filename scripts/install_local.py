"""`make local`: install the `local` extra and end with llama.cpp built with the project's flags.

``python scripts/install_local.py --requirements requirements/all.txt --log .venv/local-build.log
--stamp .venv/.installed-local [--rebuild]`` (run by the virtual environment's interpreter):

1. unless the stamp is newer than the requirements file, installs them (``pip install
   --no-deps -r``: the lock is the whole closure; ``CMAKE_ARGS`` set to the project's
   flags, ``CFLAGS`` and ``CXXFLAGS`` unset), with a progress line every 15 s
   (``build_progress.py``), then ``pip check``;
2. checks the installed llama-cpp-python's build record (``python -m
   loop_agents_cli.models.llama_build --json``): pip's wheel cache does not look at
   ``CMAKE_ARGS``, so pip may have installed a wheel it cached from a build with other
   flags, or left alone one that was installed already;
3. when it is not the project's build, reinstalls llama-cpp-python alone at the locked
   version and hashes: first through the project's build cache (a pip cache that only
   builds with the project's flags go into, ``LOOP_AGENTS_BUILD_CACHE``), so that a build
   is made once per machine; if what that installs is still not the project's build,
   without any cache. The record is checked after each;
4. says what happened: built now, or reused a matching build; or exactly why it failed
   (exit status 1; pip's own failure keeps pip's exit status).

With ``--rebuild`` (``make local REBUILD=1``, the fix a crash of a matching build prints)
the installed build is the suspect whatever its record says: the cached wheels of the
locked version are removed from pip's cache and from the project's build cache (so that
no later install takes them again), and llama-cpp-python is compiled from source with no
cache at all (``--force-reinstall --no-deps --no-cache-dir``), unless step 1 compiled it
in this very run.

Its last line starts with ``make local: llama.cpp:``. Only the standard library and
``build_progress.py`` are imported; the check runs in the interpreter given by ``--python``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import build_progress

FIRST_BUILD = "llama.cpp is compiled from source: about 2 minutes on 2 quiet cores"
DISTRIBUTION = "llama-cpp-python"


def locked_requirement(requirements: Path, name: str = DISTRIBUTION) -> str:
    """The lock's entry for ``name``: its ``name==version`` line and its ``--hash`` lines.

    Raises:
        SystemExit: the requirements file has no pinned entry for ``name``.
    """
    lines = requirements.read_text(encoding="utf-8").splitlines()
    pattern = re.compile(rf"^{re.escape(name)}==\S+", re.IGNORECASE)
    for index, line in enumerate(lines):
        if pattern.match(line):
            entry = [line]
            while entry[-1].rstrip().endswith("\\") and index + len(entry) < len(lines):
                entry.append(lines[index + len(entry)])
            return "\n".join(entry).rstrip(" \\") + "\n"
    raise SystemExit(f"install_local: {requirements} pins no version of {name} ({name}==...)")


def check(python: str) -> dict[str, Any]:
    """The build check of ``python``'s environment (``loop_agents_cli.models.llama_build``)."""
    proc = subprocess.run(
        [python, "-m", "loop_agents_cli.models.llama_build", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise SystemExit(
            f"install_local: cannot check the llama.cpp build with {python} "
            f"(exit status {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        ) from None
    return result


def _built_since(result: dict[str, Any], started: float) -> bool:
    built = result.get("built")
    if not built:
        return False
    # the record has whole seconds: a build made in this run is at most 1 s before it
    return datetime.fromisoformat(built).timestamp() >= started - 1


def _pip(python: str, *args: str) -> list[str]:
    return [python, "-m", "pip", "install", "-v", "--progress-bar", "off", *args]


def _locked_version(requirements: Path) -> str:
    """The version the lock pins llama-cpp-python at."""
    return locked_requirement(requirements).split("==", 1)[1].split()[0]


def remove_cached_wheels(python: str, version: str, caches: list[tuple[str, list[str]]]) -> str:
    """Remove llama-cpp-python ``version``'s wheels from each pip cache; say what was removed.

    ``caches`` names each cache and the pip options that point at it.
    """
    said = []
    for name, options in caches:
        proc = subprocess.run(
            [python, "-m", "pip", *options, "cache", "remove", f"llama_cpp_python-{version}"],
            capture_output=True,
            text=True,
            check=False,
        )
        removed = re.search(r"Files removed: (\d+)", proc.stdout)
        if removed is not None:
            said.append(f"{removed[1]} from {name}")
        else:  # a disabled cache (PIP_NO_CACHE_DIR) holds nothing to remove
            said.append(f"none from {name} ({(proc.stderr or proc.stdout).strip()[-200:]})")
    return "; ".join(said)


def main(argv: list[str] | None = None) -> int:
    """The command line: install, check, rebuild when needed; return the exit status."""
    parser = argparse.ArgumentParser(prog="install_local.py", description=__doc__)
    parser.add_argument("--requirements", type=Path, required=True, help="the lock file")
    parser.add_argument("--log", type=Path, required=True, help="pip's full output goes here")
    parser.add_argument("--stamp", type=Path, help="touched when all is done")
    parser.add_argument("--python", default=sys.executable, help="the environment's python")
    parser.add_argument("--what", default="make local", help="what the lines start with")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="compile llama.cpp again from source with no cache, whatever its build record says",
    )
    args = parser.parse_args(argv)
    what, python = args.what, args.python
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from loop_agents_cli.models.llama_build import build_cache_dir, build_environment

    env = build_environment()
    started = time.time()
    stamp, requirements = args.stamp, args.requirements
    cache = build_cache_dir()
    if args.rebuild:
        version = _locked_version(requirements)
        caches = [
            ("pip's cache", []),
            (f"the project's build cache ({cache})", ["--cache-dir", str(cache)]),
        ]
        print(
            f"{what}: llama.cpp: rebuilding llama-cpp-python {version} from source as asked "
            "(REBUILD=1): the installed build is the suspect whatever its record says, so no "
            "cached build is used; cached wheels of that version removed: "
            f"{remove_cached_wheels(python, version, caches)}",
            flush=True,
        )
    if stamp is None or not stamp.exists() or stamp.stat().st_mtime < requirements.stat().st_mtime:
        status = build_progress.run(
            _pip(python, "--no-deps", "-r", str(requirements)),
            args.log,
            every=args.every,
            what=what,
            expect=f"the locked packages of every extra; {FIRST_BUILD} the first time",
            packages=build_progress.count_packages(requirements),
            done="installed the locked packages",
            env=env,
        )
        if status != 0:
            return status
        pip_check = subprocess.run(
            [python, "-m", "pip", "check"], capture_output=True, text=True, check=False
        )
        if pip_check.returncode != 0:
            print(
                f"{what}: the locked packages do not fit together (`pip check`): "
                f"{(pip_check.stdout + pip_check.stderr).strip()[-2000:]}; refresh the lock "
                "with `make lock`",
                flush=True,
            )
            return pip_check.returncode
    result = check(python)
    if result["ok"] and (not args.rebuild or _built_since(result, started)):
        how = "built just now" if _built_since(result, started) else "reused a matching build"
        print(f"{what}: llama.cpp: {how} ({result['summary']})", flush=True)
        if stamp is not None:
            stamp.touch()
        return 0
    attempts = [("from source without any cache, as asked (REBUILD=1)", ["--no-cache-dir"])]
    if not args.rebuild:
        print(
            f"{what}: llama.cpp: the installed build is not the project's: {result['problem']}. "
            "Reinstalling it with the project's flags.",
            flush=True,
        )
        attempts = [
            (
                f"through the project's build cache ({cache}; {FIRST_BUILD} when it holds no "
                "build yet)",
                ["--cache-dir", str(cache)],
            ),
            ("without any cache (the build cache held another build)", ["--no-cache-dir"]),
        ]
    with tempfile.TemporaryDirectory(prefix="install_local_") as folder:
        pinned = Path(folder) / "llama-cpp-python.txt"
        pinned.write_text(locked_requirement(requirements), encoding="utf-8")
        for expect, options in attempts:
            attempt_started = time.time()
            status = build_progress.run(
                _pip(python, "--force-reinstall", "--no-deps", *options, "-r", str(pinned)),
                args.log.with_name(args.log.stem + "-llama" + args.log.suffix),
                every=args.every,
                what=what,
                expect=f"llama-cpp-python alone, {expect}",
                done="reinstalled llama-cpp-python",
                env=env,
            )
            if status != 0:
                return status
            result = check(python)
            built = _built_since(result, attempt_started)
            if result["ok"] and (built or not args.rebuild):
                if not built:
                    how = "reused a matching build from the project's build cache"
                elif args.rebuild:
                    how = "rebuilt from source with the project's flags"
                else:
                    how = "built with the project's flags"
                print(f"{what}: llama.cpp: {how} ({result['summary']})", flush=True)
                if stamp is not None:
                    stamp.touch()
                return 0
            if result["ok"]:  # --no-cache-dir, and still pip compiled nothing
                print(
                    f"{what}: llama.cpp: failed: pip installed llama-cpp-python without "
                    f"compiling it although no cache was allowed ({result['summary']}): a "
                    f"wheel comes from elsewhere; check pip's config (`{python} -m pip config "
                    "list`: find-links, another index) and read the build log above",
                    flush=True,
                )
                return 1
            print(f"{what}: llama.cpp: still not the project's build: {result['problem']}")
    print(
        f"{what}: llama.cpp: failed: even a build from source without any cache is not the "
        f"project's build ({result['problem']}); the flags did not reach the build: check "
        f"that nothing overrides CMAKE_ARGS (e.g. pip's config: `{python} -m pip config "
        "list`) and read the build log above",
        flush=True,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
