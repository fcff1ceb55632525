"""What an arm learns across the tasks of one eval: `ArmLearning`.

An arm with an `Adaptive` control learns which kind of retry pays. The eval keeps one
store per such arm; each task's loop runs with a copy, and what it adds joins the store
when its result is recorded (the result keeps those items, so a resumed eval reads them
back). Its draws are seeded from the eval's seed and the arm's name (`learning_seed`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import BaseStore, Item
from langgraph.store.memory import InMemoryStore

__all__ = ["ArmLearning", "learned_items", "learning_seed"]

_PAGE = 1000


def learning_seed(eval_seed: int | None, arm: str) -> int:
    """The seed of an arm's `Adaptive` draws, from the eval's seed and the arm's name.

    Example:
        ```python
        assert learning_seed(7, "adaptive") == learning_seed(7, "adaptive")
        assert learning_seed(7, "adaptive") != learning_seed(8, "adaptive")
        ```
    """
    digest = hashlib.sha256(f"{eval_seed}|{arm}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _items(store: BaseStore) -> list[Item]:
    found: list[Item] = []
    while True:
        page = store.search((), limit=_PAGE, offset=len(found))
        found.extend(page)
        if len(page) < _PAGE:
            return found


def learned_items(data: object) -> list[dict[str, Any]]:
    """The well-formed ``{"namespace", "key", "value"}`` store items of ``data``.

    Example:
        ```python
        item = {"namespace": ["a"], "key": "k", "value": {"kind": "fresh", "success": True}}
        assert learned_items([item, "junk"]) == [item]
        ```
    """
    if not isinstance(data, Sequence) or isinstance(data, str):
        return []
    kept = []
    for item in data:
        if not isinstance(item, Mapping):
            continue
        namespace, key, value = item.get("namespace"), item.get("key"), item.get("value")
        if (
            isinstance(namespace, list)
            and namespace
            and all(isinstance(part, str) and part for part in namespace)
            and isinstance(key, str)
            and isinstance(value, dict)
        ):
            kept.append({"namespace": list(namespace), "key": key, "value": dict(value)})
    return kept


@dataclass
class ArmLearning:
    """One arm's learning in one eval: the seed of its draws and its store so far."""

    seed: int
    store: BaseStore = field(default_factory=InMemoryStore)
    # the pairs read it on the pair loop while the eval's loop adds what a pair learned
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def for_task(self) -> InMemoryStore:
        """A copy of the arm's store, for one task's loop."""
        copy = InMemoryStore()
        with self._lock:
            items = _items(self.store)
        for item in items:
            copy.put(item.namespace, item.key, item.value, index=False)
        return copy

    def learned(self, used: BaseStore) -> tuple[dict[str, Any], ...]:
        """The items a task's loop added to its copy (`for_task`), as plain JSON."""
        with self._lock:
            known = {(item.namespace, item.key): item.value for item in _items(self.store)}
        return tuple(
            {"namespace": list(item.namespace), "key": item.key, "value": dict(item.value)}
            for item in _items(used)
            if known.get((item.namespace, item.key)) != item.value
        )

    def add(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Add a recorded task's items (`learned`, or read back from a journal)."""
        with self._lock:
            for item in learned_items(list(items)):
                self.store.put(tuple(item["namespace"]), item["key"], item["value"], index=False)
