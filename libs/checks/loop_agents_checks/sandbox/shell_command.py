"""`command_problem`: whether a shell command can run as a check, before anything runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

__all__ = ["command_problem"]

# the standard library only: `loop-agents run --check` answers a mistyped program as fast as
# --help, before the model libraries load

_SHELL_WORDS = frozenset(
    {"!", ".", ":", "[", "[[", "{", "(", "alias", "break", "case", "cd", "command",
     "continue", "echo", "eval", "exec", "exit", "export", "false", "for", "function",
     "if", "printf", "pwd", "read", "return", "set", "shift", "source", "test", "times",
     "trap", "true", "type", "ulimit", "umask", "unset", "wait", "while", "until"}
)  # fmt: skip


def command_problem(command: str, cwd: str | Path | None = None) -> str | None:
    """Why ``command`` is unusable as a check (empty, not shell words, its program not found).

    ``None`` when it looks usable.

    Example:
        ```python
        command_problem("pytset -q")  # "the check's program 'pytset' is not found ..."
        ```
    """
    if not command.strip():
        return "the check command is empty; give a shell command, e.g. 'pytest -q'"
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"the check command {command!r} does not parse as shell words: {exc}"
    words = [w for w in words if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w)]
    if not words or words[0] in _SHELL_WORDS or words[0][0] in "({$`":
        return None
    program = words[0]
    if "/" in program:
        path = Path(cwd or ".") / program
        if path.is_file() and os.access(path, os.X_OK):
            return None
        return f"the check's program {program!r} is not an executable file"
    if shutil.which(program) is None:
        return (
            f"the check's program {program!r} is not found on PATH; check the spelling or "
            f"give its path"
        )
    return None
