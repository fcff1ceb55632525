"""A model file's SHA-256 is cached by (path, size, mtime_ns) and recomputed on change."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from loop_agents_cli.models import file_identity
from loop_agents_cli.models.file_identity import default_cache_path, file_digest


def test_the_digest_is_the_sha256_and_is_read_from_the_cache_afterwards(tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 5000)
    cache = tmp_path / "cache" / "file-digests.json"
    expected = hashlib.sha256(model.read_bytes()).hexdigest()
    assert file_digest(model, cache=cache) == expected
    entries = json.loads(cache.read_text())
    [(key, value)] = entries.items()
    status = model.stat()
    assert json.loads(key) == [str(model.resolve()), status.st_size, status.st_mtime_ns]
    assert value == expected

    # the second call does not read the file again
    def no_hashing(*args, **kwargs):
        raise AssertionError("the file was hashed again")

    monkeypatch.setattr(file_identity.hashlib, "sha256", no_hashing)
    assert file_digest(str(model), cache=cache) == expected


def test_a_changed_file_is_hashed_again_and_its_old_entry_dropped(tmp_path):
    model = tmp_path / "m.gguf"
    cache = tmp_path / "digests.json"
    model.write_bytes(b"one")
    first = file_digest(model, cache=cache)
    model.write_bytes(b"two")
    os.utime(model, ns=(1, 1))  # a different mtime even on a coarse clock
    second = file_digest(model, cache=cache)
    assert first != second == hashlib.sha256(b"two").hexdigest()
    assert list(json.loads(cache.read_text()).values()) == [second]


def test_an_unusable_cache_is_ignored_and_a_missing_file_raises(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    cache = tmp_path / "digests.json"
    cache.write_text("not json")
    assert file_digest(model, cache=cache) == hashlib.sha256(b"x").hexdigest()
    blocked = tmp_path / "file" / "digests.json"
    (tmp_path / "file").write_text("a file where the folder should be")
    assert file_digest(model, cache=blocked) == hashlib.sha256(b"x").hexdigest()
    with pytest.raises(OSError):
        file_digest(tmp_path / "missing.gguf", cache=cache)


def test_the_default_cache_is_under_the_user_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "loop_agents" / "file-digests.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        default_cache_path() == tmp_path / "home" / ".cache" / "loop_agents" / "file-digests.json"
    )
