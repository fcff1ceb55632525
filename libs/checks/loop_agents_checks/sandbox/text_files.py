r"""A model's text in files, though it may hold a lone surrogate that UTF-8 cannot encode.

A lone surrogate is half a character (``"\ud83d"``, an emoji cut in two). In a file to be
read it becomes U+FFFD (`utf8_text`, `write_utf8`); in JSON to be read back, its ``\uXXXX``
escape, so the text comes back exactly (`json_text`).
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
