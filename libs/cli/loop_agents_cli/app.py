"""`main`: parse the arguments, run the subcommand's handler, turn errors into exit statuses."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import cast

from loop_agents_cli.errors import InputError, UsageError, judge_switches, one_line
from loop_agents_cli.parser import PROG, build_parser, closest

Handler = Callable[[argparse.Namespace], int]


def _handler(path: str) -> Handler:
    module, _, function = path.partition(":")
    return cast(Handler, getattr(importlib.import_module(module), function))


def _suggestion(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """`` (did you mean --rubric?)`` for a mistyped option, else ``""``."""
    options = sorted(set(re.findall(r"--[a-z][a-z0-9-]*", parser.format_usage())))
    names = [word.split("=", 1)[0] for word in unknown if word.startswith("--")]
    guesses = [guess for name in names if (guess := closest(name, options, cutoff=0.75))]
    return f" (did you mean {' or '.join(guesses)}?)" if guesses else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``loop-agents`` command with ``argv`` (default: the process's arguments).

    Returns the exit status: 0 the loop ran, 1 it failed, 2 bad arguments or settings, 141
    stdout closed (``| head``); after Ctrl-C the process ends with 130.

    Example:
        ```python
        status = main(["run", "Name a colour.", "--rubric", "One word.", "--json"])
        ```
    """
    try:
        try:
            return _main(argv)
        finally:  # also after argparse's exit (--help): what is left to write, now
            sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`| head -1`): end quietly, as a command killed by SIGPIPE,
        # and point stdout at /dev/null so that the interpreter's last flush cannot fail
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    _printable_text()
    parser, commands = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:  # prints the usage and the message, exits with 2
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.error("the following arguments are required: COMMAND")
    command = commands[args.command]
    if unknown:  # reported with the subcommand's usage, not the top-level one
        command.error(f"unrecognized arguments: {' '.join(unknown)}{_suggestion(unknown, command)}")
    try:
        if args.arguments_check is not None:  # bad arguments, as fast as --help
            _handler(args.arguments_check)(args)
        # any subcommand's judge (eval's too) that moves on to another method: said here
        with judge_switches(_note, lambda m: f"pass --structured-output {m} to ask for it at once"):
            return _handler(args.handler)(args)
    except InputError as exc:
        print(f"{PROG} {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except UsageError as exc:
        command.error(str(exc))  # prints the usage and the message, exits with 2
    except KeyboardInterrupt:  # before a run took Ctrl-C over: end now, as a run does
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)


def _note(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _printable_text() -> None:
    r"""Print text UTF-8 cannot hold (a model's lone surrogate) as its escape, not fail.

    A model's reply may hold half an emoji (``"smile \ud83d"``); a strict stdout would
    end the command with ``UnicodeEncodeError`` on printing it. With
    ``backslashreplace`` it is printed as ``\ud83d``: in ``--json`` output that is the
    JSON escape of the same text. A stream set otherwise (``PYTHONIOENCODING``) is left.
    """
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


if __name__ == "__main__":
    sys.exit(main())
