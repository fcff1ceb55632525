"""The eval runner: the JSON result, resuming an interrupted eval, retrying a failing
task (never a pass), concurrency, and refusing bad settings before any model call."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from io import StringIO

import httpx
import pytest
from rich.console import Console

from loop_agents_evals import EvalSettings, JournalError, arun_eval, eval_page, run_eval
from loop_agents_evals.journal import journal_path
from loop_agents_evals.report import render_report
from loop_agents_evals.stats import sign_test, wilson_interval
from loop_agents_evals.tasks import TaskFileError, parse_task
from tests.eval_models import ReactiveOpenAI, after_feedback, user_text
from tests.fakes import FakeChat


def tasks(count: int, prefix: str = "t"):
    return [
        parse_task(
            {
                "id": f"{prefix}{i}",
                "kind": "instructions",
                "prompt": f"Task {prefix}{i}: reply OK in capitals.",
                "checks": [{"check": "case", "case": "upper"}],
            }
        )
        for i in range(count)
    ]


def feedback_helps(body):
    return "OK" if after_feedback(body) else "ok"


ARMS = ["single", "loop", "resample"]


async def test_the_json_result_has_the_documented_shape(tmp_path):
    server = ReactiveOpenAI(feedback_helps)
    out = tmp_path / "results.json"
    report = await arun_eval(tasks(3), server.chat_model(), arms=ARMS, iterations=2, out=out)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data == report.to_json()
    assert list(data["arms"]) == ARMS
    for summary in data["arms"].values():
        assert set(summary) >= {
            "passed",
            "tasks",
            "pass_rate",
            "ci95",
            "model_calls",
            "input_tokens",
            "output_tokens",
            "seconds",
        }
    assert data["arms"]["loop"]["passed"] == 3
    assert data["arms"]["loop"]["pass_rate"] == 1.0
    low, high = data["arms"]["single"]["ci95"]
    assert (low, high) == pytest.approx(wilson_interval(0, 3))
    assert len(data["results"]) == 9
    for result in data["results"]:
        assert set(result) >= {"task_id", "arm", "passed", "iterations", "model_calls"}
    assert [(r["task_id"], r["arm"]) for r in data["results"][:3]] == [
        ("t0", "single"),
        ("t0", "loop"),
        ("t0", "resample"),
    ]
    assert data["settings"]["iterations"] == 2
    assert data["settings"]["tasks"] == 3
    assert data["errors"] == []


async def test_an_interrupted_eval_resumes_without_running_done_pairs_again(tmp_path):
    out = tmp_path / "results.json"
    first = ReactiveOpenAI(feedback_helps)
    finished = []

    def stop_after_four(event):
        if event.result is not None:
            finished.append((event.result.task_id, event.result.arm))
            if len(finished) == 4:
                running.cancel()  # what Ctrl-C does to the eval under asyncio.run

    running = asyncio.create_task(
        arun_eval(tasks(4), first.chat_model(), arms=ARMS, out=out, progress=stop_after_four)
    )
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not out.exists()  # no result yet, only the journal
    journal = journal_path(out).read_text(encoding="utf-8").splitlines()
    assert len(journal) == 1 + len(finished)  # the settings, then each finished pair
    assert 4 <= len(finished) < 12

    second = ReactiveOpenAI(feedback_helps)
    events = []
    report = await arun_eval(
        tasks(4), second.chat_model(), arms=ARMS, out=out, progress=events.append
    )
    resumed = len(finished)
    assert (events[0].resumed, events[0].done, events[0].total) == (resumed, resumed, 12)
    done_again = {(r.task_id, r.arm) for r in (e.result for e in events) if r is not None}
    assert done_again.isdisjoint(finished)
    assert len(done_again) == 12 - resumed
    calls = {"single": 1, "loop": 2, "resample": 4}
    assert len(second.requests) == sum(calls[arm] for _, arm in done_again)
    assert len(report.results) == 12
    assert report.arms["loop"].passed == 4

    # everything is done: a third run makes no model call and reports the same
    third = ReactiveOpenAI(feedback_helps)
    again = await arun_eval(tasks(4), third.chat_model(), arms=ARMS, out=out)
    assert third.requests == []
    assert again.arms == report.arms
    # the per-attempt outcomes came back from the journal too
    assert (
        again.by_attempt
        == report.by_attempt
        == {
            "single": [0.0],
            "loop": [0.0, 1.0, 1.0, 1.0],
            "resample": [0.0, 0.0, 0.0, 0.0],
        }
    )
    assert {r.by_attempt for r in again.results if r.arm == "loop"} == {(False, True, True, True)}


async def test_a_changed_task_runs_again_and_a_torn_line_is_ignored(tmp_path):
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(feedback_helps)
    await arun_eval(tasks(2), server.chat_model(), arms=["single"], out=out)
    path = journal_path(out)
    with path.open("a", encoding="utf-8") as file:
        file.write('{"task_id": "t1", "arm": "lo')  # killed in the middle of a write
    changed = tasks(2)
    changed[1] = parse_task(changed[1].to_json() | {"prompt": "Reply OK, loudly."})
    server.requests.clear()
    report = await arun_eval(changed, server.chat_model(), arms=["single", "loop"], out=out)
    prompts = sorted({user_text(b) for b in server.requests})
    assert prompts == ["Reply OK, loudly.", "Task t0: reply OK in capitals."]
    assert len(report.results) == 4
    lines = path.read_text(encoding="utf-8").splitlines()
    assert all(
        json.loads(line) for line in lines if not line.startswith('{"task_id": "t1", "arm": "lo')
    )


async def test_a_journal_of_other_settings_is_refused(tmp_path):
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(feedback_helps)
    await arun_eval(tasks(1), server.chat_model(), arms=["single"], iterations=2, out=out)
    with pytest.raises(JournalError, match=r"other settings \(iterations 2 there, 3 now\)"):
        await arun_eval(tasks(1), server.chat_model(), arms=["single"], iterations=3, out=out)
    assert len(server.requests) == 1

    # every setting that changes an answer is in the key, and the message names it
    def again(**changed):
        model_options = changed.pop("model_options", {})
        return arun_eval(
            tasks(1),
            server.chat_model(**model_options),
            arms=["single"],
            iterations=2,
            out=out,
            settings=EvalSettings(**changed),
        )

    for changed, difference in (
        ({"model_options": {"max_tokens": 256}}, "max_tokens None there, 256 now"),
        ({"temperature": 0.5}, "temperatures.loop 1.0 there, 0.5 now"),
        ({"arm_temperatures": {"resample": 0.7}}, "temperatures.resample 1.0 there, 0.7 now"),
        ({"judge_temperature": 0.3}, "judge_temperature 0.0 there, 0.3 now"),
        ({"judge_method": "text"}, "judge_method 'json_schema' there, 'text' now"),
        ({"model_digest": "ab" * 32}, f"model_sha256 None there, '{'ab' * 32}' now"),
    ):
        with pytest.raises(JournalError, match=re.escape(difference)):
            await again(**changed)
    # the same settings resume: nothing runs again
    await again()
    not_a_journal = tmp_path / "x.journal.jsonl"
    not_a_journal.write_text("hello\n", encoding="utf-8")
    with pytest.raises(JournalError, match="not an eval journal"):
        await arun_eval(tasks(1), server.chat_model(), out=tmp_path / "x.json")
    assert len(server.requests) == 1  # no refused eval called the model


async def test_a_server_error_is_retried_and_reported_never_a_pass(tmp_path):
    failures = {"t1": 1, "t2": 99}  # t1 fails once, t2 always
    lock = threading.Lock()

    def respond(body):
        task_id = user_text(body).split(":")[0].removeprefix("Task ")
        with lock:
            if failures.get(task_id, 0) > 0:
                failures[task_id] -= 1
                return httpx.Response(500, json={"error": {"message": "the model crashed"}})
        return "OK"

    server = ReactiveOpenAI(respond)
    out = tmp_path / "r.json"
    events = []
    report = await arun_eval(
        tasks(3),
        server.chat_model(),
        arms=["single"],
        out=out,
        retries=2,
        progress=events.append,
        settings=EvalSettings(retry_delay=0),
    )
    by_task = {r.task_id: r for r in report.results}
    assert set(by_task) == {"t0", "t1"}
    assert by_task["t1"].passed
    assert by_task["t1"].attempts == 2
    assert by_task["t0"].attempts == 1
    (error,) = report.errors
    assert (error.task_id, error.arm, error.attempts) == ("t2", "single", 3)
    assert "Error code: 500 - the model crashed" in error.error
    summary = report.arms["single"]
    assert (summary.passed, summary.tasks, summary.errors) == (2, 2, 1)  # t2 is not counted
    assert not report.complete
    retried = [e.retrying for e in events if e.retrying is not None]
    # concurrent pairs: their retries are reported in the order their tries failed
    assert sorted((r.task_id, r.attempts) for r in retried) == [("t1", 1), ("t2", 1), ("t2", 2)]
    assert json.loads(out.read_text())["errors"][0]["task_id"] == "t2"

    # the failed pair has no result in the journal: the next run tries it again
    server.requests.clear()
    failures["t2"] = 0
    again = await arun_eval(
        tasks(3),
        server.chat_model(),
        arms=["single"],
        out=out,
        settings=EvalSettings(retry_delay=0),
    )
    assert [user_text(b) for b in server.requests] == ["Task t2: reply OK in capitals."]
    assert again.complete
    assert again.arms["single"].passed == 3


class SlowChat(FakeChat):
    """Answers after a pause, counting how many calls are in flight at once."""

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        FLIGHT["now"] += 1
        FLIGHT["peak"] = max(FLIGHT["peak"], FLIGHT["now"])
        try:
            await asyncio.sleep(0.05)
        finally:
            FLIGHT["now"] -= 1
        return self._generate(messages, stop, None, **kwargs)


FLIGHT = {"now": 0, "peak": 0}


async def test_pairs_run_concurrently_up_to_the_limit():
    FLIGHT.update(now=0, peak=0)
    report = await arun_eval(tasks(8), SlowChat.of("OK"), arms=["single"], concurrency=3)
    assert FLIGHT["peak"] == 3
    assert report.arms["single"].passed == 8


def test_the_sync_form_runs_the_same_eval(tmp_path):
    server = ReactiveOpenAI(feedback_helps)
    first = run_eval(tasks(2), server.chat_model(), arms=["loop"], out=tmp_path / "a.json")
    second = run_eval(tasks(2), server.chat_model(), arms=["loop"], out=tmp_path / "b.json")
    assert first.arms["loop"].passed == second.arms["loop"].passed == 2


async def test_the_sync_form_refuses_a_running_event_loop():
    with pytest.raises(RuntimeError, match="use await arun_eval"):
        run_eval(tasks(1), FakeChat.of("OK"))


@pytest.mark.parametrize(
    ("options", "error", "phrase"),
    [
        ({"arms": ["loop", "best-of"]}, ValueError, "unknown arm 'best-of'"),
        ({"arms": "loop"}, ValueError, "non-empty list"),
        ({"arms": []}, ValueError, "non-empty list"),
        ({"iterations": 0}, ValueError, "iterations must be >= 1"),
        ({"iterations": 2.5}, TypeError, "whole number"),
        ({"concurrency": 0}, ValueError, "concurrency must be"),
        ({"temperature": 3}, ValueError, "temperature must be from 0 to 2"),
        ({"judge_threshold": 101}, ValueError, "judge_threshold"),
        ({"retries": -1}, ValueError, "retries must be"),
        ({"code_timeout": 0}, ValueError, "code_timeout must be > 0"),
        ({"judge_method": "xml"}, ValueError, "judge_method must be one of"),
        ({"server": "http://127.0.0.1:1"}, ValueError, "a model or a server, not both"),
        ({"task_ids": ["nope"]}, TaskFileError, "no task has the id 'nope'"),
        ({"limit": 0}, ValueError, "limit must be"),
    ],
)
async def test_bad_settings_are_refused_before_any_model_call(options, error, phrase):
    model = FakeChat.of("OK")
    settings = {k: v for k, v in options.items() if k in EvalSettings.__dataclass_fields__}
    keywords = {k: v for k, v in options.items() if k not in settings}
    with pytest.raises(error, match=phrase):
        await arun_eval(tasks(2), model, **keywords, settings=EvalSettings(**settings))
    assert model.calls == []


async def test_no_model_and_a_bad_server_url_are_refused():
    with pytest.raises(TypeError, match="must be a chat model"):
        await arun_eval(tasks(1), "gpt-5.4-mini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="URL of a LangGraph server"):
        await arun_eval(tasks(1), settings=EvalSettings(server="127.0.0.1:2024"))


def test_statistics():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(10, 10)
    assert high == 1.0
    assert low == pytest.approx(0.722, abs=1e-3)
    low, high = wilson_interval(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(0.0625)
    assert sign_test(3, 3) == 1.0
    assert sign_test(1, 9) == sign_test(9, 1) == pytest.approx(0.02148, abs=1e-5)


async def test_tasks_that_name_their_part_are_reported_part_by_part(tmp_path):
    # feedback helps on the "caught" tasks only: the parts' pass rates must differ
    parted = [
        parse_task(
            {
                "id": f"{part}{i}",
                "kind": "instructions",
                "prompt": f"Task {part}{i}: reply OK in capitals.",
                "checks": [{"check": "case", "case": "upper"}],
                "part": part,
            }
        )
        for part in ("caught", "traps")
        for i in range(2)
    ]

    def helps_on_caught(body):
        return "OK" if after_feedback(body) and "caught" in user_text(body) else "ok"

    out = tmp_path / "parts.json"
    server = ReactiveOpenAI(helps_on_caught)
    report = await arun_eval(parted, server.chat_model(), arms=ARMS, iterations=2, out=out)
    assert list(report.by_part) == ["caught", "traps"]
    assert report.by_part["caught"]["loop"].passed == 2
    assert report.by_part["traps"]["loop"].passed == 0
    assert report.by_part["caught"]["single"].tasks == 2
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["by_part"]["caught"]["loop"]["pass_rate"] == 1.0
    assert {r["part"] for r in data["results"]} == {"caught", "traps"}
    page = eval_page(data)  # the page shows each part's pass rates too
    assert "By part</h2>" in page
    assert page.index(">caught</h3>") < page.index(">traps</h3>") < page.index("Task by task")
    # a resume reports the same parts, without running anything again
    calls = len(server.requests)
    again = await arun_eval(parted, server.chat_model(), arms=ARMS, iterations=2, out=out)
    assert len(server.requests) == calls
    assert again.by_part["caught"]["loop"].passed == 2

    text = StringIO()
    render_report(report, Console(file=text, width=100))
    shown = text.getvalue()
    assert "Pass rate by part" in shown
    assert "2/2 (100%)" in shown
    assert "0/2 (0%)" in shown


async def test_tasks_without_parts_have_no_part_table(tmp_path):
    report = await arun_eval(tasks(2), FakeChat.of("OK"), arms=["single"], iterations=1)
    assert report.by_part == {}
    assert report.to_json()["by_part"] == {}


async def test_the_settings_given_as_keywords_before_0_3_are_refused(tmp_path):
    server = ReactiveOpenAI(feedback_helps)
    with pytest.raises(
        TypeError, match=r"^arun_eval\(\) got an unexpected keyword argument 'temperature'"
    ):
        await arun_eval(tasks(2), server.chat_model(), arms=["single"], temperature=0.5)
    report = await arun_eval(
        tasks(2),
        server.chat_model(),
        arms=["single"],
        settings=EvalSettings(temperature=0.5, task_ids=["t1"]),
    )
    assert report.settings["temperature"] == 0.5
    assert [r.task_id for r in report.results] == ["t1"]
    with pytest.raises(
        TypeError, match=r"^arun_eval\(\) got an unexpected keyword argument 'temprature'"
    ):
        await arun_eval(tasks(1), server.chat_model(), temprature=0.5)


def test_the_sync_form_names_the_setting_a_keyword_belongs_in():
    with pytest.raises(TypeError) as raised:
        run_eval(tasks(1), FakeChat.of("OK"), arms=["single"], retry_delay=0)
    assert str(raised.value) == (
        "run_eval() got an unexpected keyword argument 'retry_delay': removed in loop_agents "
        "0.3; pass settings=EvalSettings(retry_delay=0)"
    )
    with pytest.raises(TypeError, match=r"'temprature' \(did you mean 'temperature'\?\)"):
        run_eval(tasks(1), FakeChat.of("OK"), temprature=0.5)


def test_tasks_may_be_given_as_the_mappings_of_a_task_file():
    lines = [task.to_json() for task in tasks(2)]
    report = run_eval(lines, FakeChat.of("OK"), arms=["single"])
    assert [r.task_id for r in report.results] == ["t0", "t1"]
    assert report.arms["single"].passed == 2
    with pytest.raises(TaskFileError, match="tasks line 2, field 'checks'"):
        run_eval([lines[0], lines[1] | {"checks": []}], FakeChat.of("OK"))
    with pytest.raises(TaskFileError, match="'t0' is the id of another task"):
        run_eval([lines[0], lines[0]], FakeChat.of("OK"))
    with pytest.raises(TypeError, match=r"tasks\[1\] is str 'add'; give a task .* or a mapping"):
        run_eval([lines[0], "add"], FakeChat.of("OK"))
