"""The errors a subcommand reports to its user without a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """A bad argument or setting: reported with the subcommand's usage, exit status 2."""


class InputError(UsageError):
    """Input the usage would not help with: one line saying what and the fix, exit 2.

    A file that cannot be used, text that is not UTF-8, the file of saved runs.
    """


def one_line(text: str, *, limit: int = 2000) -> str:
    r"""``text`` on one line (runs of blanks and newlines become one space), cut at ``limit``.

    Example:
        ```python
        one_line("the server said:\\n  no")  # 'the server said: no'
        ```
    """
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
