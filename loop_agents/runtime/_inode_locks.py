"""SQLite thread locks keyed by the database file's identity (device and inode).

A thread is locked with an open-file-description lock (``F_OFD_SETLK``, Linux) on one
byte of the database file, between 1 and 2 TiB (SQLite's own locks sit at 1 GiB), picked
by a hash of the thread: every path to the file meets it, and the kernel drops it when
the process ends. The file is opened once per process and closed only once it is deleted
(closing any descriptor of a file drops every POSIX lock of the process on it, SQLite's
own included). Locks of one descriptor never conflict, so runs of this process are kept
apart by `_claimed` first.
"""

from __future__ import annotations

import errno
import os
import struct
import threading

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None) if fcntl is not None else None
_FLOCK = struct.Struct("=hh4xqqi4x")  # struct flock on 64-bit Linux
_FIRST = 2**40
_SPAN = 2**40

AVAILABLE = _SETLK is not None and struct.calcsize("P") == 8  # Linux, 64-bit

_lock = threading.Lock()
_files: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> descriptor
_claimed: set[tuple[int, int, int]] = set()  # (st_dev, st_ino, offset) held here


def _forget_after_fork() -> None:
    # the child shares the parent's descriptors, and so its locks: it opens its own
    # (never closing the inherited ones, which would drop the parent's SQLite locks)
    global _lock
    _lock = threading.Lock()
    _files.clear()
    _claimed.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _descriptor(database: str) -> tuple[tuple[int, int], int]:
    """The identity of ``database``'s file and this process's descriptor of it."""
    with _lock:
        for identity, fd in list(_files.items()):
            if os.fstat(fd).st_nlink == 0 and not any(c[:2] == identity for c in _claimed):
                del _files[identity]
                os.close(fd)  # deleted: no SQLite connection can still use its locks
        found = os.stat(database)
        identity = (found.st_dev, found.st_ino)
        fd = _files.get(identity, -1)
        if fd >= 0:
            return identity, fd
        fd = os.open(database, os.O_RDWR | os.O_CLOEXEC)
        opened = os.fstat(fd)
        identity = (opened.st_dev, opened.st_ino)  # the file may have been replaced
        if identity in _files:
            os.close(fd)  # never open (nothing locked through it yet): closing is harmless
            return identity, _files[identity]
        _files[identity] = fd
        return identity, fd


def _set(fd: int, kind: int, offset: int) -> None:
    assert fcntl is not None
    assert _SETLK is not None
    fcntl.fcntl(fd, _SETLK, _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0))


class InodeLock:
    """A one-byte open-file-description lock on the database file, for one thread."""

    def __init__(self, database: str, digest: bytes) -> None:
        self.database = database
        self.offset = _FIRST + int.from_bytes(digest[:8], "big") % _SPAN
        self._held: tuple[tuple[int, int], int] | None = None

    def try_acquire(self) -> bool:
        assert fcntl is not None
        identity, fd = _descriptor(self.database)
        claim = (*identity, self.offset)
        with _lock:
            if claim in _claimed:
                return False
            _claimed.add(claim)
        try:
            _set(fd, fcntl.F_WRLCK, self.offset)
        except OSError as exc:
            with _lock:
                _claimed.discard(claim)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._held = (identity, fd)
        return True

    def release(self) -> None:
        assert fcntl is not None
        held, self._held = self._held, None
        if held is None:
            return
        identity, fd = held
        try:
            _set(fd, fcntl.F_UNLCK, self.offset)
        finally:
            with _lock:
                _claimed.discard((*identity, self.offset))


def usable(database: str) -> bool:
    """Whether ``database`` can be locked by identity here (else: the lock folder)."""
    if not AVAILABLE:
        return False
    try:
        _descriptor(database)
    except OSError:
        return False  # e.g. a read-only file: the run fails at its first write anyway
    return True
