"""A model file's identity: its SHA-256, computed once per file version and cached.

The cache (``$XDG_CACHE_HOME/loop_agents/file-digests.json``) is keyed by the file's path,
size and modification time; one that cannot be used is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

_CHUNK = 1 << 20


def default_cache_path() -> Path:
    """Where the digests are cached: ``$XDG_CACHE_HOME/loop_agents/file-digests.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loop_agents" / "file-digests.json"


def _read_cache(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def _write_cache(path: Path, data: dict[str, str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: the digest is simply computed again next time


def file_digest(path: str | Path, *, cache: Path | None = None) -> str:
    """The SHA-256 (hex) of a file, from the cache (default `default_cache_path`) when unchanged.

    Raises:
        OSError: the file cannot be read.

    Example:
        ```python
        assert len(file_digest("model.gguf")) == 64
        ```
    """
    file = Path(path).expanduser().resolve()
    status = file.stat()
    key = json.dumps([str(file), status.st_size, status.st_mtime_ns])
    cache_path = cache if cache is not None else default_cache_path()
    known = _read_cache(cache_path)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    with file.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    # drop the entries of earlier versions of the same file: the cache stays small
    kept = {k: v for k, v in _read_cache(cache_path).items() if not _same_file(k, str(file))}
    kept[key] = value
    _write_cache(cache_path, kept)
    return value


def _same_file(key: str, file: str) -> bool:
    try:
        entry = json.loads(key)
    except ValueError:
        return False
    return isinstance(entry, list) and bool(entry) and entry[0] == file
