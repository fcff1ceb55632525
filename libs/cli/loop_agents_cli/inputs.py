"""Reading a run's texts (task, rubric, instructions) from the command line or a file.

A file is read up to a cap (``--max-file-bytes``); devices, folders and sockets are
refused before anything is read; text must be UTF-8.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from loop_agents_cli.errors import InputError, UsageError

DEFAULT_MAX_FILE_BYTES = 1 << 20
"""The largest task, rubric or instructions file read (``--max-file-bytes`` raises it)."""

_KINDS = {
    stat.S_IFCHR: "a character device, which never ends",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


def _read_capped(stream: BinaryIO, limit: int, where: str, what: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(
            f"the {what} in {where} is larger than {limit:,} bytes (--max-file-bytes); give "
            f"a shorter {what}, or raise the cap with --max-file-bytes N"
        )
    return data


def _decode(data: bytes, where: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"the {what} in {where} is not UTF-8 text (byte {data[exc.start]:#04x} at "
            f"offset {exc.start}); save it as UTF-8"
        ) from exc


def _refuse_special(mode: int, where: str, what: str) -> None:
    kind = stat.S_IFMT(mode)
    if kind in _KINDS:
        hint = f" (for standard input use --{what}-file -)" if kind == stat.S_IFCHR else ""
        raise InputError(
            f"--{what}-file {where} is {_KINDS[kind]}, not a text file; give a file{hint}"
        )


def read_text_file(path: Path, what: str, *, limit: int = DEFAULT_MAX_FILE_BYTES) -> str:
    """The text of ``path`` (``-``: standard input), at most ``limit`` bytes of UTF-8.

    Raises:
        InputError: the file cannot be read, never ends, is too large or is not UTF-8.

    Example:
        ```python
        task = read_text_file(Path("task.md"), "task")
        ```
    """
    if str(path) == "-":
        return _decode(_read_capped(sys.stdin.buffer, limit, "stdin", what), "stdin", what)
    where = repr(str(path))
    try:
        _refuse_special(os.stat(path).st_mode, where, what)
        with open(path, "rb") as handle:
            _refuse_special(os.fstat(handle.fileno()).st_mode, where, what)  # replaced?
            data = _read_capped(handle, limit, where, what)
    except OSError as exc:
        raise InputError(f"cannot read the {what} from {where}: {exc.strerror or exc}") from exc
    return _decode(data, where, what)


def check_utf8(value: str, what: str) -> str:
    """``value`` when it is valid text; `InputError` for bytes that are not UTF-8.

    Example:
        ```python
        assert check_utf8("Name three primes.", "task") == "Name three primes."
        ```
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = value.encode("utf-8", "surrogateescape")
        raise InputError(
            f"the {what} given is not UTF-8 text (byte {raw[exc.start]:#04x}); pass it as "
            f"UTF-8 (check the terminal's or the script's encoding)"
        ) from exc
    return value


def text_argument(
    value: str | None, path: Path | None, what: str, *, required: bool, limit: int
) -> str | None:
    """The text given inline or in a file (``-``: stdin), stripped; at most one of the two.

    Raises:
        UsageError: both or (``required``) neither are given, or the text is empty.
        InputError: the file cannot be used, or the text is not UTF-8.

    Example:
        ```python
        text_argument("Name a colour.", None, "task", required=True, limit=1 << 20)
        ```
    """
    if value is not None and path is not None:
        raise UsageError(f"give the {what} as text or with --{what}-file, not both")
    if path is not None:
        value = read_text_file(path, what, limit=limit)
    if value is None:
        if required:
            raise UsageError(f"no {what} given: pass it as text or with --{what}-file FILE")
        return None
    check_utf8(value, what)
    if not value.strip():
        raise UsageError(f"the {what} is empty; give some text")
    return value.strip()
