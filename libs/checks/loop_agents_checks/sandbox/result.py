"""What a run returns (`RunResult`) and how its output is kept within a byte budget."""

from __future__ import annotations

import os
from dataclasses import dataclass

from loop_agents_checks.sandbox.limits import SCRIPT_NAME

__all__ = ["CappedOutput", "RunResult"]


@dataclass(frozen=True)
class RunResult:
    r"""What happened when a program ran.

    Attributes:
        exit_code: The program's exit status; negative when a signal ended it
            (``-9`` after the time limit).
        stdout: What it printed (decoded as UTF-8, undecodable bytes replaced).
        stderr: Its error output, e.g. a traceback.
        timed_out: Whether it was killed at the time limit.
        truncated: Whether some stdout or stderr was dropped for the output limit.
        seconds: Wall-clock run time, the cleanup after it included.
        isolation: The isolation it ran in: ``"bwrap"``, ``"unshare"`` or ``"process"``.

    Example:
        ```python
        result = run_python("print(2 + 2)")
        assert result.ok and result.stdout == "4\\n" and not result.truncated
        ```
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    seconds: float = 0.0
    isolation: str = "process"

    @property
    def ok(self) -> bool:
        """Whether the program finished in time with exit code 0."""
        return self.exit_code == 0 and not self.timed_out


class CappedOutput:
    """Keeps the first and last bytes of a stream, at most ``limit`` in all."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        """Keep what fits of ``data`` in the head, the rest in the rolling tail."""
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            self.dropped += excess
            del self.tail[:excess]

    def text(self, root: str) -> str:
        """The kept output as text, with a marker where bytes were cut."""
        if self.dropped:
            head = self.head.decode("utf-8", "replace")
            tail = self.tail.decode("utf-8", "replace")
            text = f"{head}\n... [{self.dropped} bytes cut: output limit] ...\n{tail}"
        else:
            text = (self.head + self.tail).decode("utf-8", "replace")
        return text.replace(os.path.join(root, SCRIPT_NAME), SCRIPT_NAME)
