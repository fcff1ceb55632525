"""`command_problem`: whether a shell command can run as a check, before anything runs.

Only the standard library is used, so that the ``loop-agents run --check`` command can
answer a mistyped program as fast as ``--help`` answers, before the model libraries load.

Example:
    ```python
    from loop_agents_checks.sandbox.shell_command import command_problem

    command_problem("pytset -q")  # "the check's program 'pytset' is not found on PATH; ..."
    ```
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

__all__ = ["command_problem"]

_SHELL_WORDS = frozenset(
    {"!", ".", ":", "[", "[[", "{", "(", "alias", "break", "case", "cd", "command",
     "continue", "echo", "eval", "exec", "exit", "export", "false", "for", "function",
     "if", "printf", "pwd", "read", "return", "set", "shift", "source", "test", "times",
     "trap", "true", "type", "ulimit", "umask", "unset", "wait", "while", "until"}
)  # fmt: skip


def command_problem(command: str, cwd: str | Path | None = None) -> str | None:
    """What makes ``command`` unusable as a check, or ``None`` when it looks usable.

    It is unusable when it is empty, does not parse as shell words, or its first
    program is not found.

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
