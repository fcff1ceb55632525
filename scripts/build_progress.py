"""Run a long build command and show its progress: what `make local` uses for llama.cpp.

``python scripts/build_progress.py --log FILE [--expect TEXT] -- COMMAND ...`` runs
COMMAND (e.g. ``pip install -v``), writes all its output to FILE, and prints one line
now and then instead: the compile step it is at (``[45/164]`` from ninja, ``[ 27%]`` from
make) and the time so far, or that it is still working. At the end it says how long it
took; when the command fails it prints the end of the log. Its exit status is the
command's. Only the standard library is used (it runs before anything is installed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

STEP = re.compile(r"^\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: [12/164] Building ...
PERCENT = re.compile(r"^\s*\[\s*(\d+)%\]")  # make: [ 27%] Building ...
TAIL_LINES = 40


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


def run(command: list[str], log: Path, *, every: float, what: str, expect: str) -> int:
    """Run ``command``; print progress at most every ``every`` seconds; return its status."""
    started = time.monotonic()
    print(f"{what}: started ({expect}); the full log is in {log}", flush=True)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    latest: str | None = None
    shown_at = started
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as file:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            file.write(line)
            tail.append(line.rstrip("\n"))
            latest = progress_of(line) or latest
            now = time.monotonic()
            if now - shown_at >= every:
                where = f"compiling, {latest}" if latest else "working"
                print(f"{what}: {where} · {elapsed(now - started)}", flush=True)
                shown_at = now
        status = process.wait()
    took = elapsed(time.monotonic() - started)
    if status == 0:
        print(f"{what}: done in {took}", flush=True)
    else:
        print(f"{what}: failed after {took} (exit status {status}); the log ends with:")
        print("\n".join(f"  {line}" for line in tail), flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    """The command line: parse the options, run the command, return its exit status."""
    parser = argparse.ArgumentParser(prog="build_progress.py", description=__doc__)
    parser.add_argument("--log", type=Path, required=True, help="where the full output goes")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    parser.add_argument("--what", default="build", help="what is built, for the lines")
    parser.add_argument("--expect", default="this may take a while", help="how long it takes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    try:
        return run(command, args.log, every=args.every, what=args.what, expect=args.expect)
    except FileNotFoundError as exc:
        print(f"{args.what}: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
