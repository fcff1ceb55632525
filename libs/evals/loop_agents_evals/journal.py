r"""The resume file of an eval: one JSON line per finished task and arm, next to ``--out``.

Its first line is the settings that change an answer (a journal of other settings is
refused); each further line is a `TaskResult` with its task's digest, flushed at once,
an arm of your own's declaration (its identity), or a shared first answer. A last line
cut short by a kill is dropped and its pair runs again (docs/eval.md, "Resuming").
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from langchain_core.messages import AIMessage, message_to_dict

from loop_agents_checks.sandbox.text_files import json_text
from loop_agents_evals.report import TaskResult
from loop_agents_evals.sampling import message_of_record

__all__ = ["Journal", "JournalError", "journal_path"]

_HEADER = "loop_agents_eval_journal"
_VERSION = 1
_ARM = "loop_agents_eval_arm"
_FIRST = "loop_agents_eval_first_answer"


class JournalError(ValueError):
    """The journal cannot be used: other settings, not a journal, not writable."""


def journal_path(out: Path) -> Path:
    """Where the journal of ``--out PATH`` lives.

    Example:
        ```python
        assert journal_path(Path("runs/r.json")) == Path("runs/r.journal.jsonl")
        ```
    """
    return out.with_name(f"{out.stem}.journal.jsonl")


class Journal:
    """Finished task/arm results on disk, read back when an eval resumes."""

    def __init__(
        self, path: Path, settings: Mapping[str, Any], file: IO[str], seed: int | None = None
    ) -> None:
        self.path = path
        self.settings = dict(settings)
        self._file = file
        self._lock = threading.Lock()  # results are written from the eval's loop, first
        # answers from the pair loop's
        self._done: dict[tuple[str, str], tuple[str, TaskResult]] = {}
        self._firsts: dict[tuple[str, str], AIMessage] = {}
        self._seeds: dict[tuple[str, str], int | None] = {}
        self.seed = seed
        """The model's seed in this run, recorded with each result `append` writes."""

    @classmethod
    def open(
        cls,
        path: Path,
        settings: Mapping[str, Any],
        *,
        arms: Mapping[str, Mapping[str, Any]] | None = None,
        seed: int | None = None,
    ) -> Journal:
        """Open (or create) the journal at ``path`` for an eval with ``settings``.

        Args:
            path: The journal's file.
            settings: Everything that changes an answer (the first line's).
            arms: The eval's arms of your own: name -> its identity and temperature.
            seed: The model's seed in this run (kept with each result it records).

        Raises:
            JournalError: not a journal, other settings, an arm of the same name that
                is something else, or unreadable; the message says what to do.

        Example:
            ```python
            journal = Journal.open(Path("r.journal.jsonl"), {"iterations": 4})
            journal.close()
            ```
        """
        wanted = json.loads(json.dumps(dict(settings)))  # as it reads back from JSON
        try:
            raw = path.read_bytes() if path.exists() else b""
        except OSError as exc:
            raise JournalError(f"cannot read the eval journal {str(path)!r}: {exc}") from exc
        # a killed eval may have cut its last line anywhere, even inside a character: only
        # the lines that end with a newline were written whole
        whole = raw.rfind(b"\n") + 1
        lines = [_decoded(line) for line in raw[:whole].split(b"\n")[:-1]]
        records: list[dict[str, Any]] = []
        if lines:
            header = _json_line(lines[0])
            if not isinstance(header, dict) or header.get(_HEADER) != _VERSION:
                raise JournalError(
                    f"{str(path)!r} exists and is not an eval journal; move it away or give "
                    f"--out another name"
                )
            found = header.get("settings")
            if found != wanted:
                raise JournalError(
                    f"{str(path)!r} holds results of an eval with other settings "
                    f"({_difference(found, wanted)}); delete it to start over, or give "
                    f"--out another name"
                )
            records = [r for r in map(_json_line, lines[1:]) if isinstance(r, dict)]
        elif raw and not _could_be_header(raw):
            raise JournalError(
                f"{str(path)!r} exists and is not an eval journal; move it away or give "
                f"--out another name"
            )
        declared = {str(r[_ARM]): r.get("arm") for r in records if isinstance(r.get(_ARM), str)}
        firsts = [r for r in records if isinstance(r.get(_FIRST), str)]
        results = [r for r in records if _ARM not in r and _FIRST not in r]
        new_arms = _check_arms(path, json.loads(json.dumps(dict(arms or {}))), declared, results)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if whole < len(raw):
                os.truncate(path, whole)  # a torn last line: dropped, its pair runs again
            file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise JournalError(f"cannot write the eval journal {str(path)!r}: {exc}") from exc
        journal = cls(path, wanted, file, seed)
        if not lines:
            journal._write({_HEADER: _VERSION, "settings": wanted})
        for name, arm in new_arms.items():
            journal._write({_ARM: name, "arm": arm})
        for record in firsts:
            message = message_of_record(record.get("message"))
            if message is not None and isinstance(record.get("task_digest"), str):
                journal._firsts[(record[_FIRST], record["task_digest"])] = message
        for record in results:
            try:
                result = TaskResult.from_json(record)
                digest = str(record["task_digest"])
            except (KeyError, TypeError, ValueError):
                continue
            journal._done[(result.task_id, result.arm)] = (digest, result)
            seed = record.get("seed")
            journal._seeds[(result.task_id, result.arm)] = (
                seed if isinstance(seed, int) and not isinstance(seed, bool) else None
            )
        return journal

    def lookup(self, task_id: str, arm: str, digest: str) -> TaskResult | None:
        """The recorded result of this task and arm, if its task is unchanged."""
        found = self._done.get((task_id, arm))
        if found is None or found[0] != digest:
            return None
        return found[1]

    def first_answers(self) -> dict[tuple[str, str], AIMessage]:
        """The first answers kept (``same_first_answer``), by task id and task digest."""
        return dict(self._firsts)

    def keep_first(self, task_id: str, digest: str, message: AIMessage) -> None:
        """Record a task's shared first answer, on disk at once."""
        self._firsts[(task_id, digest)] = message
        self._write({_FIRST: task_id, "task_digest": digest, "message": message_to_dict(message)})

    def seed_of(self, task_id: str, arm: str) -> int | None:
        """The model's seed of the run that recorded this task and arm (``None``: not said)."""
        return self._seeds.get((task_id, arm))

    def append(self, result: TaskResult, digest: str) -> None:
        """Record a finished task and arm, on disk at once, with this run's `seed`."""
        self._done[(result.task_id, result.arm)] = (digest, result)
        self._seeds[(result.task_id, result.arm)] = self.seed
        seed = {} if self.seed is None else {"seed": self.seed}
        self._write(result.to_json() | {"task_digest": digest} | seed)

    def _write(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self._file.write(json_text(record) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def _check_arms(
    path: Path,
    arms: Mapping[str, Any],
    declared: Mapping[str, Any],
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    """The arms of your own not declared yet; `JournalError` for one declared otherwise."""
    new: dict[str, Any] = {}
    ran = {r.get("arm") for r in results}
    for name, arm in arms.items():
        if name in declared:
            found = declared[name]
            if found != arm:
                shown = _difference(found, arm) if isinstance(arm, dict) else "not the same"
                raise JournalError(
                    f"{str(path)!r} belongs to an eval with another arm named {name!r} "
                    f"({shown}); "
                    f"give this arm another name, delete the journal to start over, or give "
                    f"--out another name"
                )
        elif name in ran:
            raise JournalError(
                f"{str(path)!r} holds results of an arm named {name!r} without saying what "
                f"it was; give this arm another name, delete the journal to start over, or "
                f"give --out another name"
            )
        else:
            new[name] = arm
    return new


def _decoded(line: bytes) -> str | None:
    """A line's text, or ``None`` when it is not UTF-8 (a damaged line is skipped)."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _json_line(line: str | None) -> Any:
    try:
        return None if line is None else json.loads(line)
    except ValueError:
        return None


def _could_be_header(torn: bytes) -> bool:
    """Whether ``torn``, a file's only line, cut before its end, is a journal's header."""
    start = json.dumps({_HEADER: _VERSION}).encode()[:-1]  # '{"loop_agents_eval_journal": 1'
    return torn.startswith(start) or start.startswith(torn)


def _difference(found: object, wanted: Mapping[str, Any]) -> str:
    """What differs, setting by setting (``temperatures.resample 1.0 there, 0.7 now``)."""
    if not isinstance(found, dict):
        return "unreadable settings"
    return "; ".join(_differences(found, wanted, ""))


def _differences(found: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str) -> list[str]:
    parts: list[str] = []
    for key in sorted(set(found) | set(wanted)):
        there, now = found.get(key), wanted.get(key)
        if there == now:
            continue
        if isinstance(there, dict) and isinstance(now, dict):
            parts += _differences(there, now, f"{prefix}{key}.")
        elif isinstance(there, list) and isinstance(now, list) and len(there) == len(now):
            then, later = ({str(n): item for n, item in enumerate(v)} for v in (there, now))
            parts += _differences(then, later, f"{prefix}{key}.")  # controls.0.policy
        else:
            parts.append(f"{prefix}{key} {there!r} there, {now!r} now")
    return parts
