r"""A model's text in files: what UTF-8 can hold, and JSON that keeps it exactly.

A model's reply may hold a *lone surrogate*: half of a character outside the Basic
Multilingual Plane (``"smile \ud83d"``, an emoji cut in two), which a server sends as
the JSON escape ``\ud83d`` and Python decodes as it is. UTF-8 has no encoding for it,
so ``Path.write_text(text, encoding="utf-8")`` raises ``UnicodeEncodeError``. Two
remedies, by what the file is for:

- a file that a program, a check or a person reads (the answer a check runs, a
  program's source, a page): each lone surrogate becomes U+FFFD, the replacement
  character, as a UTF-8 decoder shows bytes it cannot read (`utf8_text`,
  `write_utf8`);
- JSON kept to be read back (an eval's journal and results): each lone surrogate is
  written as its ``\uXXXX`` escape, which ``json.loads`` turns back into the same
  text, and every other character as it is (`json_text`).

Example:
    ```python
    assert utf8_text("smile \ud83d") == "smile \ufffd"
    assert json.loads(json_text({"answer": "smile \ud83d"})) == {"answer": "smile \ud83d"}
    ```
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["json_text", "utf8_text", "write_utf8"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def utf8_text(text: str) -> str:
    r"""``text`` with each lone surrogate replaced by U+FFFD, so that UTF-8 can hold it.

    Example:
        ```python
        assert utf8_text("smile \ud83d") == "smile \ufffd"
        assert utf8_text("相见欢 🙂") == "相见欢 🙂"
        ```
    """
    if text.isascii():  # the common case, without a regular expression
        return text
    return _LONE_SURROGATE.sub(REPLACEMENT, text)


def write_utf8(path: str | Path, text: str) -> None:
    r"""Write ``text`` to ``path`` as UTF-8, lone surrogates as U+FFFD (see `utf8_text`).

    Example:
        ```python
        write_utf8(Path("answer.txt"), "smile \ud83d")  # "smile \ufffd" on disk
        ```
    """
    Path(path).write_text(utf8_text(text), encoding="utf-8")


def json_text(value: Any, **options: Any) -> str:
    r"""``json.dumps(value, ensure_ascii=False, **options)`` that UTF-8 can always hold.

    Lone surrogates are written as ``\uXXXX`` escapes, so the text reads back exactly;
    every other character is written as it is (Chinese stays readable).

    Example:
        ```python
        line = json_text({"answer": "smile \ud83d 相见欢"})
        line.encode("utf-8")  # no error
        assert json.loads(line)["answer"] == "smile \ud83d 相见欢"
        ```
    """
    text = json.dumps(value, ensure_ascii=False, **options)
    if text.isascii():
        return text
    # outside strings JSON has only ASCII, so every lone surrogate is inside a string
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
