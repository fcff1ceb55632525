r"""What a console shows of a small model's text: no code fences, no debris, no gibberish.

`LoopConsole` with ``tidy=True`` (the demo) shows text through these functions; what the
loop keeps is never changed.

```python
assert tidy("相见欢\n```\n无言独上西楼") == "相见欢\n无言独上西楼"
```
"""

from __future__ import annotations

import re

UNREADABLE = "(the judge gave no readable feedback)"
"""Shown in place of feedback that is not readable text."""

_FENCE_LINE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[\w+.-]*[ \t]*$")
_MAYBE_FENCE = re.compile(r"^[ \t]*(?:`{0,2}|~{0,2}|`{3,}[\w+.-]*|~{3,}[\w+.-]*)$")
_FENCE = re.compile(r"`{3,}")
_PARTIAL = re.compile(r"(?:<(?:\|[A-Za-z0-9_]*\|?)?|`+|\x1b(?:\[[0-9;?]*[ -/]*)?)$")
_DEBRIS = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"  # a terminal's escape sequence
    r"|<\|[A-Za-z0-9_]{1,40}\|>"  # a chat template's token, e.g. <|im_end|>
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # control characters (tabs and line ends stay)
)
_SCORE_LINE = re.compile(r"\n\n([^\n]{0,40}\d[^\n]{0,40})\s*$")
_WORD = re.compile(r"[A-Za-z]{2,}")
_CONSONANTS = re.compile(r"[^aeiouy]{4,}")


def _clean(text: str) -> str:
    """``text`` without debris and without runs of three backticks inside a line."""
    return _FENCE.sub("", _DEBRIS.sub("", text))


def _tidy_lines(text: str) -> str:
    lines = [line for line in text.split("\n") if not _FENCE_LINE.match(line)]
    return _clean("\n".join(lines))


def tidy(text: str) -> str:
    r"""``text`` as shown: no code-fence lines, chat-template tokens or control characters.

    Example:
        ```python
        assert tidy("```json\n2.38}\n```<|im_end|>") == "2.38}"
        ```
    """
    return _tidy_lines(text).strip("\n")


def without_unclosed_fence(text: str) -> str:
    r"""``text`` without the fence line of a code block that never closes (as run shows it).

    Example:
        ```python
        assert without_unclosed_fence("```python\nprint(1)") == "print(1)"
        ```
    """
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if _FENCE_LINE.match(line)]
    if len(fences) % 2:  # fences pair up in order: the last one opens a block never closed
        del lines[fences[-1]]
    return "\n".join(lines)


def readable(text: str) -> bool:
    """Whether ``text`` reads as words: Chinese, or mostly pronounceable Latin words.

    Example:
        ```python
        assert readable("格律欠工整。") and readable("Too long; cut a line.")
        assert not readable("mopbeznbla;gwjrldh6,")
        ```
    """
    if sum(1 for char in text if "\u4e00" <= char <= "\u9fff") >= 2:
        return True
    words = _WORD.findall(text.lower())
    plausible = [w for w in words if len(w) <= 15 and not _CONSONANTS.search(w)]
    return bool(plausible) and 2 * len(plausible) >= len(words)


def shown_feedback(text: str) -> str:
    r"""Feedback as shown: tidied, and `UNREADABLE` in place of comments that are not text.

    A last paragraph that is a short line with a number (``Score: 55/100 (needed: 80)``,
    ``综合得分：70``) is the score, kept as it is; the rest is the judge's comment.

    Example:
        ```python
        assert shown_feedback("Good.\n\nScore: 81/100") == "Good.\n\nScore: 81/100"
        ```
    """
    shown = tidy(text)
    found = _SCORE_LINE.search(shown)
    comment, score = (shown[: found.start()], shown[found.start() :]) if found else (shown, "")
    if not readable(comment):
        comment = UNREADABLE
    return comment + score


class TidyStream:
    r"""`tidy` for text that arrives in pieces: what may still become debris is held back.

    Example:
        ```python
        stream = TidyStream()
        shown = stream.feed("相见欢\n``") + stream.feed("`\n无言<|im_") + stream.feed("end|>")
        assert shown + stream.end() == "相见欢\n无言"
        ```
    """

    def __init__(self) -> None:
        self._text = ""
        self._shown = 0  # the characters of the tidied text shown so far

    def feed(self, piece: str) -> str:
        """What to show now that ``piece`` came."""
        self._text += piece
        line = self._text.rfind("\n") + 1
        if _MAYBE_FENCE.match(self._text[line:]):
            return self._show(self._text[:line])
        partial = _PARTIAL.search(self._text, line)
        return self._show(self._text[: partial.start() if partial else len(self._text)])

    def end(self) -> str:
        """What is left to show at the end of the text; the stream starts over."""
        shown = self._show(self._text)
        self._text, self._shown = "", 0
        return shown

    def _show(self, text: str) -> str:
        tidied = _tidy_lines(text)
        new = tidied[self._shown :]
        self._shown = max(self._shown, len(tidied))
        return new
