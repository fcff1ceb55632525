"""Files of the previous version: a journal and a ``--out`` JSON written by commit 7704665
(`libs/evals/tests/data/eval_7704665`, made by that commit's code on a scripted model: 3 tasks,
arms single, loop, resample, restart, diverse-first, K=3). Long evals started with that
version must resume with this one, and their results be drawn by it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from loop_agents.controls import History
from loop_agents_evals import arun_eval, eval_page, loop
from loop_agents_evals.journal import journal_path
from loop_agents_evals.tasks import parse_task
from tests.eval_models import ReactiveOpenAI, after_feedback
from tests.html_pages import Page

OLD = Path(__file__).resolve().parent / "data" / "eval_7704665"
ARMS = ["single", "loop", "resample", "restart", "diverse-first"]
TASKS = [
    parse_task(
        {
            "id": f"shout-{i}",
            "kind": "instructions",
            "prompt": f"Task {i}: reply OK in capitals.",
            "checks": [{"check": "case", "case": "upper"}, {"check": "word_count", "max": 1}],
        }
    )
    for i in range(2)
] + [
    parse_task(
        {
            "id": "add",
            "kind": "code",
            "prompt": "Write a function that adds two integers.",
            "entry_point": "add",
            "tests": "assert add(1, 2) == 3\nassert add(2, 2) == 4",
            "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
        }
    )
]
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a * b + 1\n```"


def respond(body):
    """The scripted model the old files were written with."""
    code = "integers" in json.dumps(body)
    if after_feedback(body):
        return RIGHT if code else "OK"
    return WRONG if code else "ok"


def old_results():
    lines = (OLD / "results.journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


async def test_an_old_journal_resumes_with_nothing_run_again(tmp_path):
    out = tmp_path / "results.json"
    shutil.copy(OLD / "results.journal.jsonl", journal_path(out))
    server = ReactiveOpenAI(respond)
    report = await arun_eval(TASKS, server.chat_model(), arms=ARMS, iterations=3, out=out)
    assert server.requests == []  # the same settings: every pair resumed
    old = {(r["task_id"], r["arm"]): r for r in old_results()}
    assert len(report.results) == len(old) == 15
    for result in report.results:
        line = old[(result.task_id, result.arm)]
        assert result.passed == line["passed"]
        assert list(result.by_attempt) == line["by_attempt"]
        assert [dict(e) for e in result.transcript] == line["transcript"]
        assert not result.opaque
    written = json.loads(out.read_text())
    assert written["by_attempt"] == json.loads((OLD / "results.json").read_text())["by_attempt"]


async def test_an_arm_of_your_own_is_added_to_an_old_journal(tmp_path):
    out = tmp_path / "results.json"
    shutil.copy(OLD / "results.journal.jsonl", journal_path(out))
    server = ReactiveOpenAI(respond)
    arms = {name: name for name in ARMS} | {"fresh": loop(controls=[History("feedback_log")])}
    report = await arun_eval(TASKS, server.chat_model(), arms=arms, iterations=3, out=out)
    assert {r.arm for r in report.results} == {*ARMS, "fresh"}
    asked = {json.dumps(b["messages"][1]) for b in server.requests}
    assert len(asked) == 3  # only the new arm's pairs ran (each task's request)
    comparisons = {(c.arm, c.baseline) for c in report.comparisons}
    assert {("fresh", "resample"), ("fresh", "single"), ("restart", "resample")} <= comparisons
    lines = journal_path(out).read_text(encoding="utf-8").splitlines()
    assert lines[0] == (OLD / "results.journal.jsonl").read_text().splitlines()[0]


def test_an_old_result_is_drawn_attempt_by_attempt():
    data = json.loads((OLD / "results.json").read_text(encoding="utf-8"))
    page = Page(eval_page(data))
    assert "Answer —" not in page.text
    assert "Answer 1 (sent the task)" in page.text
    assert "Answer 2 (a repair: sent its earlier answers and their feedback)" in page.text
    assert "not accepted by the arm's evaluator" in page.text
    assert "restart vs resample" in page.text


async def test_the_adaptive_arm_is_added_to_an_old_journal(tmp_path):
    out = tmp_path / "results.json"
    shutil.copy(OLD / "results.journal.jsonl", journal_path(out))
    server = ReactiveOpenAI(respond)
    report = await arun_eval(
        TASKS, server.chat_model(), arms=[*ARMS, "adaptive"], iterations=3, out=out
    )
    assert {r.arm for r in report.results} == {*ARMS, "adaptive"}
    ran = [r for r in report.results if r.arm == "adaptive"]
    assert len(server.requests) == sum(r.model_calls for r in ran)  # its pairs only
    lines = journal_path(out).read_text(encoding="utf-8").splitlines()
    assert lines[0] == (OLD / "results.journal.jsonl").read_text().splitlines()[0]
    declared = [json.loads(line) for line in lines if "loop_agents_eval_arm" in line]
    assert [(d["loop_agents_eval_arm"], d["arm"]["temperature"]) for d in declared] == [
        ("adaptive", 1.0)
    ]
    assert report.settings["temperatures"]["adaptive"] == 1.0
    assert "arms" not in report.settings  # a built-in arm, not one of yours
    # and the journal, adaptive's pairs included, resumes with nothing run again
    again = ReactiveOpenAI(respond)
    await arun_eval(TASKS, again.chat_model(), arms=[*ARMS, "adaptive"], iterations=3, out=out)
    assert again.requests == []
