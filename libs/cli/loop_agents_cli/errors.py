"""The errors a subcommand reports to its user without a traceback."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from typing import TextIO


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


_SWITCHED = re.compile(
    r"llm_judge '.*?': the server refused (?P<refused>.*); the judge now uses "
    r'method="(?P<method>\w+)"',
    re.DOTALL,
)
"""The warning `llm_judge` gives when it moves on from a method the server refused."""


@contextlib.contextmanager
def judge_switches(say: Callable[[str], None], fix: Callable[[str], str]) -> Iterator[None]:
    """Say `llm_judge`'s move from a refused method in the command's words, in the block.

    ``say`` prints the line, ``fix(method)`` tells how to ask for that method at once; other
    warnings are shown as usual.

    Example:
        ```python
        with judge_switches(print, lambda m: f"--structured-output {m}"):
            outcome = await stream_loop(...)
        ```
    """
    shown, said = warnings.showwarning, set[str]()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        found = _SWITCHED.match(str(message))
        if found is None:
            shown(message, category, filename, lineno, file, line)
            return
        from loop_agents.evaluators.judge import REFUSALS  # loaded by then: a judge warned

        refused = found["refused"]
        methods = re.findall(r"(?:^|; )(json_schema|function_calling|json_mode) \(", refused)
        lowered = refused.lower()
        words = [refused[i : i + len(w)] for w in REFUSALS if (i := lowered.find(w)) >= 0]
        why = f' ("{words[0]}")' if words else ""
        note = (
            f"the judge's server refused structured output as {' and '.join(methods)}{why}; "
            f"the judge now uses {found['method']}: {fix(found['method'])}"
        )
        if note not in said:  # once, however many judges (an eval's) move on
            said.add(note)
            say(note)

    with warnings.catch_warnings():
        warnings.filterwarnings("always", "llm_judge .*: the server refused", UserWarning)
        warnings.showwarning = show
        yield
