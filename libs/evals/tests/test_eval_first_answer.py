"""``same_first_answer``: one first answer per task, every arm starting from it."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loop_agents.controls import Restart
from loop_agents.controls.restart import REQUIREMENTS_HEADER
from loop_agents_cli.app import main
from loop_agents_evals import EvalSettings, arun_eval, loop
from loop_agents_evals.journal import journal_path
from loop_agents_evals.report import render_report
from loop_agents_evals.tasks import parse_task
from tests.eval_models import ReactiveOpenAI

TASK = {
    "kind": "code",
    "prompt": "Write a function that adds two integers.",
    "entry_point": "add",
    "tests": "assert add(1, 2) == 3",
    "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def numbered() -> tuple[ReactiveOpenAI, list[str]]:
    """A model whose every answer is a new wrong program (numbered), so each is told apart."""
    count = itertools.count(1)
    lock = threading.Lock()
    sent: list[str] = []

    def respond(body: dict) -> str:
        with lock:
            n = next(count)
        later = any(m["role"] == "assistant" for m in body["messages"])
        fresh = REQUIREMENTS_HEADER in json.dumps(body)
        sent.append("later" if later else "fresh" if fresh else "first")
        return f"```python\ndef add(a, b):\n    return -{n}\n```"

    return ReactiveOpenAI(respond), sent


ARMS = ["single", "loop", "resample", "restart", "diverse-first"]


async def test_every_arm_starts_from_the_same_first_answer(tmp_path: Path) -> None:
    server, sent = numbered()
    tasks = [parse_task(TASK | {"id": f"add-{i}"}) for i in range(3)]
    report = await arun_eval(
        tasks,
        server.chat_model(),
        arms=ARMS,
        iterations=3,
        concurrency=4,
        out=tmp_path / "r.json",
        settings=EvalSettings(same_first_answer=True),
    )
    by_task: dict[str, dict[str, list[str]]] = {}
    for result in report.results:
        by_task.setdefault(result.task_id, {})[result.arm] = [
            e["answer"] for e in result.transcript
        ]
    for answers in by_task.values():
        firsts = {arm: found[0] for arm, found in answers.items()}
        assert len(set(firsts.values())) == 1, firsts
        # diverse-first's second first answer is a sample of its own
        assert answers["diverse-first"][1] != answers["diverse-first"][0]
    # per task the model was asked the first request once for all arms, then by
    # diverse-first for its second first answer and by resample twice more
    assert sent.count("first") == len(tasks) * (1 + 1 + 2)
    # each arm is still charged the first answer: K=3 calls each but single's one
    calls = {a: s.model_calls for a, s in report.arms.items()}
    assert calls == {"single": 1, "loop": 3, "resample": 3, "restart": 3, "diverse-first": 3}
    assert report.settings["same_first_answer"] is True
    assert report.settings["own_first_answer"] == {}  # every arm shared it


async def test_a_resumed_eval_starts_the_remaining_arms_from_the_kept_answer(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.json"
    tasks = [parse_task(TASK | {"id": "add"})]
    server, _ = numbered()
    first = await arun_eval(
        tasks,
        server.chat_model(),
        arms=["single"],
        iterations=3,
        out=out,
        settings=EvalSettings(same_first_answer=True),
    )
    kept = first.results[0].answer
    lines = [json.loads(line) for line in journal_path(out).read_text().splitlines()]
    assert [line for line in lines if "loop_agents_eval_first_answer" in line]
    server, sent = numbered()  # a new process: the model's answers start again at 1
    again = await arun_eval(
        tasks,
        server.chat_model(),
        arms={"single": "single", "loop": "loop", "fresh": loop(controls=[Restart(max_repairs=0)])},
        iterations=3,
        out=out,
        settings=EvalSettings(same_first_answer=True),
    )
    for result in again.results:
        assert result.transcript[0]["answer"] == kept
    assert sent.count("first") == 0  # the first answer came from the journal


async def test_an_arm_at_its_own_temperature_samples_its_own(tmp_path: Path) -> None:
    server, _ = numbered()
    report = await arun_eval(
        [parse_task(TASK | {"id": "add"})],
        server.chat_model(),
        arms=["single", "resample"],
        iterations=2,
        settings=EvalSettings(arm_temperatures={"resample": 0.5}, same_first_answer=True),
    )
    single, resample = report.results
    assert single.transcript[0]["answer"] != resample.transcript[0]["answer"]
    assert report.settings["own_first_answer"] == {"resample": "its own temperature, 0.5"}
    assert "except resample (its own temperature, 0.5): they sample their own" in shown(report)


def shown(report: Any) -> str:
    console = Console(record=True, width=400)
    render_report(report, console)
    return " ".join(console.export_text().split())


async def test_an_arm_of_ones_own_samples_its_own_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    server, sent = numbered()
    report = await arun_eval(
        [parse_task(TASK | {"id": "add"})],
        server.chat_model(),
        arms={"single": "single", "loop": "loop", "mine": lambda task, model, settings: model},
        iterations=2,
        settings=EvalSettings(same_first_answer=True),
    )
    firsts = {r.arm: r.transcript[0]["answer"] for r in report.results}
    assert firsts["single"] == firsts["loop"] != firsts["mine"]
    assert sent.count("first") == 2  # the shared one, and the factory agent's own
    why = "an agent of its own sends its first request"
    assert report.settings["own_first_answer"] == {"mine": why}
    assert f"except mine ({why}): they sample their own" in shown(report)


async def test_a_journal_without_it_is_refused_with_it(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(lambda body: RIGHT)
    tasks = [parse_task(TASK | {"id": "add"})]
    await arun_eval(tasks, server.chat_model(), arms=["single"], iterations=2, out=out)
    with pytest.raises(ValueError, match="same_first_answer"):
        await arun_eval(
            tasks,
            server.chat_model(),
            arms=["single"],
            iterations=2,
            out=out,
            settings=EvalSettings(same_first_answer=True),
        )


def test_the_command_refuses_it_with_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", "code", "--server", "http://127.0.0.1:9", "--same-first-answer"])
    assert exited.value.code == 2
    assert "--same-first-answer" in capsys.readouterr().err
