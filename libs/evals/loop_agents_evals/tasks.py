"""Eval tasks: the two kinds, reading and checking a JSONL task file, the bundled sets.

One task per line (the fields are in docs/eval.md, "Task files"): ``code`` (write a
function; visible ``tests`` give feedback, ``hidden_tests`` decide) or ``instructions``
(every check must pass). A malformed file raises `TaskFileError` naming the line and field.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias

from loop_agents_evals.checks import Check, CheckSpecError, parse_check

__all__ = [
    "BUNDLED_SETS",
    "CodeTask",
    "InstructionsTask",
    "Task",
    "TaskFileError",
    "bundled_path",
    "check_sandbox",
    "load_tasks",
    "parse_task",
    "read_tasks",
    "select_tasks",
    "task_digest",
]

BUNDLED_SETS = ("code", "instructions")
"""The task sets shipped with the package (``libs/evals/loop_agents_evals/data/NAME.jsonl``)."""

TaskKind = Literal["code", "instructions"]

_CODE_FIELDS = ("id", "kind", "prompt", "entry_point", "tests", "hidden_tests", "part")
_INSTRUCTIONS_FIELDS = ("id", "kind", "prompt", "checks", "part")


@dataclass(frozen=True)
class CodeTask:
    """Write a Python function ``entry_point``; ``tests`` give feedback, ``hidden_tests`` decide."""

    id: str
    prompt: str
    entry_point: str
    tests: str
    hidden_tests: str
    part: str | None = None
    kind: ClassVar[Literal["code"]] = "code"

    def to_json(self) -> dict[str, Any]:
        """The task as a line of a task file."""
        return _line(self)


@dataclass(frozen=True)
class InstructionsTask:
    """Write a text that passes every check (their failures are the feedback)."""

    id: str
    prompt: str
    checks: tuple[Check, ...]
    part: str | None = None
    kind: ClassVar[Literal["instructions"]] = "instructions"

    def to_json(self) -> dict[str, Any]:
        """The task as a line of a task file."""
        return _line(self)


Task: TypeAlias = CodeTask | InstructionsTask
"""Either kind of task."""


def _line(task: Task) -> dict[str, Any]:
    """A task as a line of a task file (no ``part`` when it has none)."""
    line: dict[str, Any] = {"id": task.id, "kind": task.kind}
    for field in fields(task)[1:]:
        value = getattr(task, field.name)
        if value is not None:
            line[field.name] = [c.to_json() for c in value] if field.name == "checks" else value
    return line


class TaskFileError(ValueError):
    """A malformed task file or task: ``source``, ``line``, ``field`` and ``problem`` say why."""

    def __init__(self, source: str, line: int | None, field: str, problem: str) -> None:
        where = source or "task"
        if line is not None:
            where += f" line {line}"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem


class _FieldError(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


def _text(data: Mapping[str, Any], name: str) -> str:
    if name not in data:
        raise _FieldError(name, "is missing")
    value = data[name]
    if not isinstance(value, str) or not value.strip():
        raise _FieldError(name, f"must be a non-empty string; got {value!r:.60}")
    return value


def _optional_text(data: Mapping[str, Any], name: str) -> str | None:
    return _text(data, name) if name in data else None


def _asserts(data: Mapping[str, Any], name: str) -> str:
    source = _text(data, name)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise _FieldError(
            name, f"is not valid Python (line {exc.lineno} of the tests: {exc.msg})"
        ) from exc
    if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
        raise _FieldError(name, "holds no assert statement; write tests such as 'assert f(2) == 4'")
    return source


def _unknown_fields(data: Mapping[str, Any], allowed: Sequence[str], kind: str) -> None:
    for key in data:
        if key not in allowed:
            raise _FieldError(
                str(key), f"is not a field of a {kind} task (its fields: {', '.join(allowed)})"
            )


def _parse(data: object) -> Task:
    if not isinstance(data, Mapping):
        raise _FieldError("", f"must be a JSON object; got {type(data).__name__}")
    task_id = _text(data, "id")
    kind = data.get("kind")
    if kind == "code":
        _unknown_fields(data, _CODE_FIELDS, "code")
        prompt = _text(data, "prompt")
        entry_point = _text(data, "entry_point")
        if not entry_point.isidentifier():
            raise _FieldError(
                "entry_point", f"must be a Python function name; got {entry_point!r:.60}"
            )
        return CodeTask(
            id=task_id,
            prompt=prompt,
            entry_point=entry_point,
            tests=_asserts(data, "tests"),
            hidden_tests=_asserts(data, "hidden_tests"),
            part=_optional_text(data, "part"),
        )
    if kind == "instructions":
        _unknown_fields(data, _INSTRUCTIONS_FIELDS, "instructions")
        prompt = _text(data, "prompt")
        raw = data.get("checks")
        if not isinstance(raw, list) or not raw:
            raise _FieldError("checks", f"must be a non-empty list of checks; got {raw!r:.60}")
        checks: list[Check] = []
        for index, item in enumerate(raw):
            try:
                checks.append(parse_check(item))
            except CheckSpecError as exc:
                where = f"checks[{index}]" + (f".{exc.field}" if exc.field else "")
                raise _FieldError(where, exc.problem) from exc
        return InstructionsTask(
            id=task_id, prompt=prompt, checks=tuple(checks), part=_optional_text(data, "part")
        )
    if "kind" not in data:
        raise _FieldError("kind", 'is missing; give "code" or "instructions"')
    raise _FieldError("kind", f'must be "code" or "instructions"; got {kind!r:.60}')


def _check_text(task: Task) -> Task:
    """``task``, unless a field holds a lone surrogate (valid JSON, but no text to send)."""
    for name, value in task.to_json().items():
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start : exc.end]
            raise _FieldError(
                name,
                f"holds the lone surrogate {bad!r} (task {task.id!r}), which is not text a "
                f"model can be sent (UTF-8); write the character itself, or a surrogate pair",
            ) from None
    return task


def parse_task(data: object, *, source: str = "", line: int | None = None) -> Task:
    """Validate one task given as a JSON object (a parsed line of a task file).

    Raises:
        TaskFileError: the task is malformed; names ``source``, ``line`` and the field.

    Example:
        ```python
        task = parse_task({"id": "t1", "kind": "instructions", "prompt": "Say hi.",
                           "checks": [{"check": "word_count", "max": 3}]})
        ```
    """
    try:
        return _check_text(_parse(data))
    except _FieldError as exc:
        raise TaskFileError(source, line, exc.field, exc.problem) from None


def read_tasks(lines: Iterable[str], *, source: str = "") -> list[Task]:
    """Parse the lines of a JSONL task file.

    Raises:
        TaskFileError: a line is not a valid task, an id repeats, or there is no task.

    Example:
        ```python
        tasks = read_tasks(Path("tasks.jsonl").read_text().splitlines(), source="tasks.jsonl")
        ```
    """
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TaskFileError(
                source, number, "", f"is not valid JSON ({exc}); write one JSON object per line"
            ) from None
        except RecursionError:
            raise TaskFileError(
                source, number, "", "is nested too deeply to read; a task is one flat JSON object"
            ) from None
        task = parse_task(data, source=source, line=number)
        if task.id in seen:
            raise TaskFileError(
                source, number, "id", f"{task.id!r} is also the id on line {seen[task.id]}"
            )
        seen[task.id] = number
        tasks.append(task)
    if not tasks:
        raise TaskFileError(source, None, "", "holds no task; write one JSON object per line")
    return tasks


def bundled_path(name: str) -> Path:
    """The file of a bundled task set inside the package.

    Example:
        ```python
        print(bundled_path("instructions"))  # .../loop_agents_evals/data/instructions.jsonl
        ```
    """
    return Path(str(resources.files("loop_agents_evals").joinpath("data", f"{name}.jsonl")))


def _bundled_text(name: str) -> str:
    try:
        return bundled_path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskFileError(
            name, None, "", f"the bundled task set is missing from this installation ({exc})"
        ) from None


def load_tasks(
    source: str | Path | Sequence[Task | Mapping[str, Any]],
    *,
    limit: int | None = None,
    ids: Sequence[str] | None = None,
) -> list[Task]:
    """The tasks of a JSONL file or a bundled set (a file of that name wins), or given ones.

    Args:
        source: A JSONL file, a bundled set (``"code"``, ``"instructions"``), or tasks:
            `Task` objects or mappings shaped as a task file's lines.
        limit: Keep the first ``limit`` tasks (after ``ids``).
        ids: Keep only these task ids (in file order).

    Raises:
        TaskFileError: malformed (line and field named), unreadable, a repeated id, or
            an id of ``ids`` not in it.
        TypeError: a given item that is neither a task nor a mapping.
        ValueError: ``limit`` is below 1.

    Example:
        ```python
        tasks = load_tasks("code", ids=["fizzbuzz", "rle"])
        given = load_tasks([{"id": "t1", "kind": "instructions", "prompt": "Say hi.",
                             "checks": [{"check": "word_count", "max": 3}]}])
        ```
    """
    if not isinstance(source, str | Path):
        return select_tasks(_given(source), limit=limit, ids=ids)
    path = Path(source)
    name = str(source)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskFileError(name, None, "", f"cannot be read ({exc})") from None
    elif name in BUNDLED_SETS:
        text = _bundled_text(name)
    else:
        raise TaskFileError(
            name,
            None,
            "",
            f"is neither a file nor a bundled task set ({', '.join(BUNDLED_SETS)}); give "
            f"the path of a JSONL task file or one of those names",
        )
    return select_tasks(read_tasks(text.splitlines(), source=name), limit=limit, ids=ids)


def _given(source: object) -> list[Task]:
    """Tasks given as objects or as mappings (task-file lines), checked; ids unique."""
    if not isinstance(source, Sequence):
        raise TypeError(
            f"tasks must be a task file, a bundled set ({', '.join(BUNDLED_SETS)}) or a list "
            f"of tasks; got {type(source).__name__}"
        )
    tasks: list[Task] = []
    for number, item in enumerate(source, start=1):
        if not isinstance(item, Mapping | CodeTask | InstructionsTask):
            raise TypeError(
                f"tasks[{number - 1}] is {type(item).__name__} {item!r:.60}; give a task "
                f"(load_tasks, parse_task) or a mapping shaped as a line of a task file"
            )
        if isinstance(item, Mapping):
            item = parse_task(item, source="tasks", line=number)
        else:
            try:
                _check_text(item)
            except _FieldError as exc:
                raise TaskFileError("tasks", number, exc.field, exc.problem) from None
        if any(task.id == item.id for task in tasks):
            raise TaskFileError("tasks", number, "id", f"{item.id!r} is the id of another task")
        tasks.append(item)
    return tasks


def select_tasks(
    tasks: Sequence[Task], *, limit: int | None = None, ids: Sequence[str] | None = None
) -> list[Task]:
    """The tasks whose id is in ``ids`` (all with ``None``), then the first ``limit``.

    Raises:
        TaskFileError: an id of ``ids`` is not among the tasks.
        ValueError: ``limit`` is below 1.

    Example:
        ```python
        subset = select_tasks(tasks, limit=2)
        ```
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a whole number >= 1 (or None for all); got {limit!r}")
    chosen = list(tasks)
    if ids is not None:
        wanted = list(dict.fromkeys(ids))
        known = {t.id for t in tasks}
        unknown = [i for i in wanted if i not in known]
        if unknown:
            sample = ", ".join(t.id for t in list(tasks)[:5])
            raise TaskFileError(
                "",
                None,
                "",
                f"no task has the id {', '.join(map(repr, unknown))} (the ids look like: "
                f"{sample}, ...)",
            )
        chosen = [t for t in tasks if t.id in set(wanted)]
    return chosen[:limit] if limit is not None else chosen


def check_sandbox(tasks: Sequence[Task]) -> None:
    """Refuse code tasks where the sandbox cannot run code: once, before any model call.

    Raises:
        IsolationUnavailable: code tasks, and no isolation works here (why, what to do).

    Example:
        ```python
        check_sandbox(load_tasks("code"))
        ```
    """
    if any(isinstance(task, CodeTask) for task in tasks):
        from loop_agents_checks.sandbox import make_limits, resolve_isolation

        resolve_isolation(make_limits())


def task_digest(task: Task) -> str:
    """A short fingerprint of the task's content (its ``part`` left out).

    Example:
        ```python
        assert task_digest(task) == task_digest(parse_task(task.to_json()))
        ```
    """
    content = {k: v for k, v in task.to_json().items() if k != "part"}
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
