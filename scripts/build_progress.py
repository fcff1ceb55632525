"""Run a long install or build command and show its progress: what `make venv` and `make local` use.

``python scripts/build_progress.py --log FILE [--expect TEXT] -- COMMAND ...`` runs
COMMAND (e.g. ``pip install -v``), writes all its output to FILE, and prints one line
every ``--every`` seconds (15 by default) whether or not the command printed anything:
the compile step it is at (``[45/164]`` from ninja, ``[ 27%]`` from make) with the time
so far and an estimate of the time left (from the files compiled so far), or what pip
is doing (collecting the Nth package, building a wheel, installing). At the end it says
how long it took; when the command fails it prints the end of the log. Its exit status
is the command's. Only the standard library is used (it runs before anything is
installed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

STEP = re.compile(r"^\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: [12/164] Building ...
PERCENT = re.compile(r"^\s*\[\s*(\d+)%\]")  # make: [ 27%] Building ...
COLLECTING = re.compile(r"^\s*Collecting (\S+)")  # pip: Collecting langgraph==1.2.0
BUILDING_WHEEL = re.compile(r"^\s*Building wheel for (\S+)")
INSTALLING = re.compile(r"^\s*Installing collected packages")
TAIL_LINES = 40
MIN_STEPS_FOR_ESTIMATE = 5
"""Files compiled before the time left is estimated (the first ones say little)."""


def elapsed(seconds: float) -> str:
    """``"42s"`` below a minute, ``"7m 05s"`` above."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s"


def progress_of(line: str) -> str | None:
    """``"45/164 files (27%)"`` or ``"27%"`` when ``line`` is a compile step, else None."""
    step = STEP.match(line)
    if step:
        done, total = int(step[1]), int(step[2])
        share = f" ({done * 100 // total}%)" if total else ""
        return f"{done}/{total} files{share}"
    percent = PERCENT.match(line)
    if percent:
        return f"{percent[1]}%"
    return None


def time_left(done: int, total: int, compiling_for: float) -> str | None:
    """``"about 3m 10s left"`` at the rate of the files compiled so far, else None.

    Example:
        ```python
        time_left(50, 200, 60.0)  # 'about 3m 00s left'
        ```
    """
    if done < MIN_STEPS_FOR_ESTIMATE or total <= done or compiling_for <= 0:
        return None
    return f"about {elapsed(compiling_for / done * (total - done))} left"


@dataclass
class Progress:
    """What the command's output said so far; read by the reporter, written by the reader."""

    started: float
    packages: int | None = None
    collected: int = 0
    phase: str | None = None
    step: tuple[int, int] | None = None
    percent: int | None = None
    compiling_since: float | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, line: str, now: float) -> None:
        """Note what ``line`` says about the command's progress."""
        with self.lock:
            self.tail.append(line.rstrip("\n"))
            if step := STEP.match(line):
                self.step, self.percent = (int(step[1]), int(step[2])), None
                self._compiling(now)
            elif percent := PERCENT.match(line):
                self.step, self.percent = None, int(percent[1])
                self._compiling(now)
            elif collecting := COLLECTING.match(line):
                self.collected += 1
                self.phase = f"collecting {collecting[1]}"
            elif wheel := BUILDING_WHEEL.match(line):
                self.phase = f"building the wheel of {wheel[1]}"
            elif INSTALLING.match(line):
                self.phase = "installing the packages"

    def _compiling(self, now: float) -> None:
        if self.compiling_since is None:
            self.compiling_since = now
            self.phase = None

    def line(self, now: float) -> str:
        """The progress line for now: where the command is, how long so far, what is left."""
        with self.lock:
            so_far = elapsed(now - self.started)
            if self.step is not None or self.percent is not None:
                if self.step is not None:
                    done, total = self.step
                    share = f" ({done * 100 // total}%)" if total else ""
                    where = f"compiling, {done}/{total} files{share}"
                    since = self.compiling_since if self.compiling_since is not None else now
                    left = time_left(done, total, now - since)
                else:
                    where, left = f"compiling, {self.percent}%", None
                return f"{where} · {so_far}" + (f" · {left}" if left else "")
            if self.phase is not None:
                count = ""
                if self.collected:
                    of = f" of {self.packages}" if self.packages else ""
                    count = f" ({self.collected}{of} packages collected)"
                return f"{self.phase}{count} · {so_far}"
            return f"working · {so_far}"


def count_packages(requirements: Path) -> int | None:
    """The pinned packages (``name==version`` lines) of a requirements file, or None."""
    try:
        text = requirements.read_text(encoding="utf-8")
    except OSError:
        return None
    return sum(1 for line in text.splitlines() if re.match(r"^[A-Za-z0-9][^\s=]*==", line))


def run(
    command: list[str],
    log: Path,
    *,
    every: float,
    what: str,
    expect: str,
    packages: int | None = None,
    done: str = "done",
    env: dict[str, str] | None = None,
) -> int:
    """Run ``command``; print a progress line every ``every`` seconds; return its status.

    The last line says ``{what}: {done} in {time}`` (or that it failed, with the end of
    the log). ``env`` is the command's environment (default this process's).
    """
    started = time.monotonic()
    print(f"{what}: started ({expect}); the full log is in {log}", flush=True)
    progress = Progress(started, packages=packages)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as file:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            errors="replace",
            bufsize=1,
        )
        assert process.stdout is not None
        stream = process.stdout

        def read() -> None:
            for line in stream:
                file.write(line)
                progress.take(line, time.monotonic())
                if every <= 0:  # a line per line of output (for tests)
                    print(f"{what}: {progress.line(time.monotonic())}", flush=True)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        # a line every `every` seconds, also while the command prints nothing (a long
        # compile step, pip resolving): never silent for longer than that
        while reader.is_alive():
            reader.join(timeout=every if every > 0 else None)
            if reader.is_alive():
                print(f"{what}: {progress.line(time.monotonic())}", flush=True)
        status = process.wait()
    took = elapsed(time.monotonic() - started)
    if status == 0:
        print(f"{what}: {done} in {took}", flush=True)
    else:
        print(f"{what}: failed after {took} (exit status {status}); the log ends with:")
        print("\n".join(f"  {line}" for line in progress.tail), flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    """The command line: parse the options, run the command, return its exit status."""
    parser = argparse.ArgumentParser(prog="build_progress.py", description=__doc__)
    parser.add_argument("--log", type=Path, required=True, help="where the full output goes")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    parser.add_argument("--what", default="build", help="what is built, for the lines")
    parser.add_argument("--expect", default="this may take a while", help="how long it takes")
    parser.add_argument("--done", default="done", help="what the last line says it did")
    parser.add_argument(
        "--requirements",
        type=Path,
        help="the requirements file pip installs (its packages are counted for the lines)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    packages = count_packages(args.requirements) if args.requirements else None
    try:
        return run(
            command,
            args.log,
            every=args.every,
            what=args.what,
            expect=args.expect,
            packages=packages,
            done=args.done,
        )
    except FileNotFoundError as exc:
        print(f"{args.what}: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
