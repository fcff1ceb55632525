"""The rich ``Console`` a command prints on: the terminal's, or one that never wraps a line.

Outside a terminal rich would break every line at 80 columns, mid-value; there text is
never wrapped and tables are laid out at ``COLUMNS`` (else `PIPE_WIDTH`) characters.
"""

from __future__ import annotations

import errno
import os

from rich.console import Console

PIPE_WIDTH = 200
"""The width tables are laid out at outside a terminal when ``COLUMNS`` is not set."""


def command_console(*, stderr: bool = False) -> Console:
    """The console for a command's output on stdout (or ``stderr``); see the module docstring.

    Example:
        ```python
        command_console().print("iteration 1 of 3 · 0.0s elapsed", style="dim")
        ```
    """
    console = _Console(stderr=stderr)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH
    return _Console(stderr=stderr, soft_wrap=True, width=width)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits with status 1 here; the command's `main` ends as SIGPIPE would (141)
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def section_header(title: str) -> str:
    """The header line of a section, as in the article: ``----Agent----`` with 20 dashes."""
    return f"{'-' * 20}{title}{'-' * 20}"


def format_seconds(seconds: float) -> str:
    """``"4.2s"`` below a minute, ``"2m 05s"`` above."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s"


def format_cost(cost: float | None) -> str:
    """A cost in the price table's currency: ``0.0123``, ``1.25``; ``-`` when unknown."""
    if cost is None:
        return "-"
    return f"{cost:.4f}" if cost < 1 else f"{cost:.2f}"


def format_score(score: float | None) -> str:
    """A score without a useless ``.0``; ``"-"`` when there is none."""
    return "-" if score is None else f"{score:g}"
