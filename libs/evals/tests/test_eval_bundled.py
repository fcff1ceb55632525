"""The bundled instructions set: every task's reference answer passes every check, and
its wrong answer fails, graded exactly as an eval grades answers."""

from __future__ import annotations

import json

import pytest

from loop_agents_evals.grading import grader_for
from loop_agents_evals.tasks import InstructionsTask, bundled_path, load_tasks

TASKS = load_tasks("instructions")
REFERENCE = {
    row["id"]: row
    for row in map(
        json.loads,
        bundled_path("instructions_reference").read_text(encoding="utf-8").splitlines(),
    )
}


def test_the_set_is_large_enough_and_every_task_has_a_reference():
    assert len(TASKS) >= 30
    assert all(isinstance(t, InstructionsTask) for t in TASKS)
    assert set(REFERENCE) == {t.id for t in TASKS}
    assert all(set(row) == {"id", "solution", "wrong_solution"} for row in REFERENCE.values())


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
async def test_the_reference_passes_and_the_wrong_answer_fails(task):
    grader = grader_for(task)
    row = REFERENCE[task.id]
    ok, feedback = await grader.visible(row["solution"])
    assert (ok, feedback) == (True, "")
    assert await grader.final(row["solution"])
    ok, feedback = await grader.visible(row["wrong_solution"])
    assert not ok
    assert feedback.startswith("The answer breaks")
    assert not await grader.final(row["wrong_solution"])


def test_the_checks_used_cover_most_of_the_vocabulary():
    from loop_agents_evals.checks import CHECKS

    used = {c.name for t in TASKS for c in t.checks}
    assert used == set(CHECKS)


@pytest.mark.slow  # every bundled code task graded twice in the sandbox
async def test_the_eval_grades_the_bundled_code_references_as_their_tests_say():
    """The eval's own grading (its harness, the code taken from a Markdown answer) agrees
    with the code set: each reference passes both test sources, each wrong solution fails
    the hidden tests, and passes the visible ones exactly in the part ``traps``
    (libs/evals/tests/test_code_tasks.py checks the set itself)."""
    import asyncio

    tasks = load_tasks("code")
    rows = {
        row["id"]: row
        for row in map(
            json.loads, bundled_path("code_reference").read_text(encoding="utf-8").splitlines()
        )
    }
    assert len(tasks) >= 30
    assert set(rows) == {t.id for t in tasks}

    async def grade(task):
        grader = grader_for(task)
        right = f"```python\n{rows[task.id]['solution']}\n```"
        wrong = f"```python\n{rows[task.id]['wrong_solution']}\n```"
        return task, await asyncio.gather(
            grader.visible(right), grader.final(right), grader.final(wrong), grader.visible(wrong)
        )

    gate = asyncio.Semaphore(8)

    async def gated(task):
        async with gate:
            return await grade(task)

    graded = await asyncio.gather(*map(gated, tasks))
    for task, (visible, right_passes, wrong_passes, (wrong_visible, feedback)) in graded:
        assert visible == (True, ""), task.id
        assert right_passes, task.id
        assert not wrong_passes, task.id
        assert wrong_visible == (task.part == "traps"), task.id
        if task.part == "caught":  # the feedback names a failed call of the function
            assert f"- {task.entry_point}(" in feedback or f"= {task.entry_point}(" in feedback
    assert {task.part for task in tasks} == {"traps", "caught"}
