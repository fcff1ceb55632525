"""Task files: both kinds load; a bad file gets an error naming the line and the field."""

from __future__ import annotations

import json

import pytest

from loop_agents_evals.tasks import (
    CodeTask,
    InstructionsTask,
    TaskFileError,
    load_tasks,
    parse_task,
    select_tasks,
    task_digest,
)

CODE = {
    "id": "add",
    "kind": "code",
    "prompt": "Add two numbers.",
    "entry_point": "add",
    "tests": "assert add(1, 2) == 3",
    "hidden_tests": "assert add(-1, 1) == 0\nassert add(2, 2) == 4",
}
WRITING = {
    "id": "haiku",
    "kind": "instructions",
    "prompt": "Write a haiku about rain, in lowercase.",
    "checks": [{"check": "line_count", "min": 3, "max": 3}, {"check": "case", "case": "lower"}],
}


def write(tmp_path, *lines: object) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
        encoding="utf-8",
    )
    return str(path)


def test_both_kinds_load_in_order(tmp_path):
    tasks = load_tasks(write(tmp_path, CODE, "", "   ", WRITING))
    code, writing = tasks
    assert isinstance(code, CodeTask)
    assert code.entry_point == "add"
    assert code.kind == "code"
    assert isinstance(writing, InstructionsTask)
    assert writing.kind == "instructions"
    assert [c.name for c in writing.checks] == ["line_count", "case"]
    assert [parse_task(t.to_json()) for t in tasks] == tasks


def test_subsets_by_id_and_limit(tmp_path):
    lines = [CODE | {"id": f"t{i}"} for i in range(5)]
    path = write(tmp_path, *lines)
    assert [t.id for t in load_tasks(path, limit=2)] == ["t0", "t1"]
    assert [t.id for t in load_tasks(path, ids=["t3", "t1"])] == ["t1", "t3"]
    assert [t.id for t in load_tasks(path, ids=["t3", "t1", "t4"], limit=2)] == ["t1", "t3"]
    with pytest.raises(TaskFileError, match="no task has the id 'nope'"):
        load_tasks(path, ids=["t1", "nope"])
    with pytest.raises(ValueError, match="limit must be"):
        select_tasks(load_tasks(path), limit=0)


def test_a_task_may_name_the_part_of_its_set(tmp_path):
    lines = [CODE | {"part": "traps"}, WRITING | {"part": "style"}, CODE | {"id": "plain"}]
    tasks = load_tasks(write(tmp_path, *lines))
    assert [t.part for t in tasks] == ["traps", "style", None]
    assert [parse_task(t.to_json()) for t in tasks] == tasks
    assert [t.to_json() for t in tasks] == lines
    # the part is where the task is filed, not what it asks: the digest ignores it
    assert task_digest(tasks[0]) == task_digest(parse_task(CODE))
    assert task_digest(tasks[1]) == task_digest(parse_task(WRITING | {"part": "other"}))


def test_a_changed_task_gets_a_new_digest():
    task = parse_task(CODE)
    assert task_digest(task) == task_digest(parse_task(dict(CODE)))
    assert task_digest(task) != task_digest(
        parse_task(CODE | {"hidden_tests": "assert add(0, 0) == 0"})
    )


@pytest.mark.parametrize(
    ("line", "field", "phrase"),
    [
        ("{not json", "", "not valid JSON"),
        ('["a list"]', "", "must be a JSON object"),
        ({k: v for k, v in CODE.items() if k != "id"}, "id", "is missing"),
        (CODE | {"id": ""}, "id", "non-empty string"),
        (CODE | {"id": 7}, "id", "non-empty string"),
        ({k: v for k, v in CODE.items() if k != "kind"}, "kind", '"code" or "instructions"'),
        (CODE | {"kind": "Code"}, "kind", "got 'Code'"),
        ({k: v for k, v in CODE.items() if k != "hidden_tests"}, "hidden_tests", "is missing"),
        (CODE | {"hiden_tests": "assert 1"}, "hiden_tests", "not a field of a code task"),
        (CODE | {"entry_point": "add numbers"}, "entry_point", "Python function name"),
        (CODE | {"tests": "assert add(1, 2 == 3"}, "tests", "not valid Python"),
        (CODE | {"hidden_tests": "print(add(1, 2))"}, "hidden_tests", "no assert statement"),
        (CODE | {"tests": ["assert add(1, 2) == 3"]}, "tests", "non-empty string"),
        (WRITING | {"checks": []}, "checks", "non-empty list"),
        (WRITING | {"checks": {"check": "no_commas"}}, "checks", "non-empty list"),
        (
            WRITING | {"checks": [{"check": "no_commas"}, {"check": "word_count", "max": "5"}]},
            "checks[1].max",
            "whole number",
        ),
        (WRITING | {"checks": [{"check": "rhymes"}]}, "checks[0].check", "known check"),
        (WRITING | {"tests": "assert 1"}, "tests", "not a field of a instructions task"),
        (WRITING | {"prompt": "   "}, "prompt", "non-empty string"),
        (CODE | {"part": ""}, "part", "non-empty string"),
        (WRITING | {"part": ["traps"]}, "part", "non-empty string"),
        (WRITING | {"prompt": "Say \ud800 hi."}, "prompt", "lone surrogate '\\ud800' (task"),
        (CODE | {"id": "add\udc00"}, "id", "lone surrogate '\\udc00' (task 'add\\udc00')"),
        (
            WRITING | {"checks": [{"check": "ends_with", "text": "\ud83d"}]},
            "checks",
            "lone surrogate",
        ),
        ("[" * 100_000 + "]" * 100_000, "", "nested too deeply"),
    ],
)
def test_a_bad_line_is_named_with_its_field(tmp_path, line, field, phrase):
    path = write(tmp_path, WRITING | {"id": "fine"}, line)
    with pytest.raises(TaskFileError) as caught:
        load_tasks(path)
    error = caught.value
    assert (error.line, error.field) == (2, field)
    assert phrase in error.problem
    message = str(error)
    assert message.startswith(f"{path} line 2")
    if field:
        assert f"field {field!r}" in message


def test_duplicate_ids_name_both_lines(tmp_path):
    path = write(tmp_path, CODE, WRITING, CODE)
    with pytest.raises(TaskFileError, match="line 3, field 'id': 'add' is also the id on line 1"):
        load_tasks(path)


def test_files_that_cannot_be_used(tmp_path):
    with pytest.raises(TaskFileError, match="holds no task"):
        load_tasks(write(tmp_path, "", ""))
    with pytest.raises(TaskFileError, match="neither a file nor a bundled task set"):
        load_tasks(tmp_path / "missing.jsonl")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TaskFileError, match="cannot be read"):
        load_tasks(binary)


def test_a_file_wins_over_a_bundled_set_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "instructions").write_text(json.dumps(WRITING) + "\n", encoding="utf-8")
    assert [t.id for t in load_tasks("instructions")] == ["haiku"]


def test_the_bundled_instructions_set_loads():
    tasks = load_tasks("instructions")
    assert len(tasks) >= 30
    assert all(isinstance(t, InstructionsTask) for t in tasks)


def test_a_task_object_holding_a_lone_surrogate_is_refused_naming_it():
    task = InstructionsTask(id="t1", prompt="Say \ud800 hi.", checks=parse_task(WRITING).checks)
    with pytest.raises(TaskFileError, match=r"tasks line 2, field 'prompt': holds the lone"):
        load_tasks([parse_task(WRITING), task])
