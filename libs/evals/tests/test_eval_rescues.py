"""What an arm did after its first answer: rescued and broken first answers."""

from __future__ import annotations

from loop_agents_evals.report import TaskResult, build_report


def result(task: str, arm: str, steps: tuple[bool, ...]) -> TaskResult:
    return TaskResult(task, arm, steps[-1], len(steps), len(steps), by_attempt=steps)


def test_rescues_count_what_happened_after_the_first_answer() -> None:
    results = [
        result("a", "single", (False,)),
        result("a", "loop", (False, False, True)),  # rescued
        result("b", "loop", (False, False, False)),
        result("c", "loop", (True, True, True)),
        result("d", "loop", (True, False, False)),  # broken (a judge talked it out of it)
        result("a", "resample", (False, True, True)),
        TaskResult("e", "opaque", True, 1, 1),  # no curve: left out
    ]
    report = build_report(["single", "loop", "resample", "opaque"], results)
    assert set(report.rescues) == {"loop", "resample"}  # single has one step
    loop = report.rescues["loop"]
    assert (loop.failed_first, loop.rescued, loop.passed_first, loop.broken) == (2, 1, 2, 1)
    assert loop.rescue_rate == 0.5
    assert report.to_json()["rescues"]["resample"] == {
        "arm": "resample",
        "failed_first": 1,
        "rescued": 1,
        "passed_first": 0,
        "broken": 0,
    }
