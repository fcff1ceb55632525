"""An arm that hangs, or blocks the event loop it runs on: its pair ends at the pair time
limit (an error a resumed eval runs again), the other pairs go on and are journaled, Ctrl-C
ends the eval at once keeping what finished, and the process never waits for the abandoned
thread; in process and as the command."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from test_eval_command import HANG, task_file

from loop_agents_evals import arun_eval, run_eval
from loop_agents_evals.journal import journal_path
from loop_agents_evals.tasks import parse_task
from tests.conftest import env_without_model_settings
from tests.eval_models import ReactiveOpenAI
from tests.fakes import FakeChat

STUCK = 60
"""Seconds after which an eval that should have ended at once is stuck (the hang the
tests catch), not slow: it ends within about a second when it works."""

TASKS = [
    parse_task(
        {
            "id": f"t{i}",
            "kind": "instructions",
            "prompt": f"Task t{i}: reply OK in capitals.",
            "checks": [{"check": "case", "case": "upper"}],
        }
    )
    for i in range(4)
]


async def test_a_hung_sync_agent_ends_at_the_pair_time_limit_and_runs_again_on_resume(tmp_path):
    release = threading.Event()
    hung: list[str] = []

    def waits_on_t2(messages):
        if "t2" in messages[-1].text and not release.is_set():
            hung.append("t2")
            release.wait(STUCK)  # a sync call the event loop must not wait for
        return "OK"

    def factory(task, model, settings):
        return RunnableLambda(waits_on_t2)

    out = tmp_path / "r.json"
    arms = {"single": "single", "stuck": factory}
    report = await arun_eval(
        TASKS, FakeChat.of("OK"), arms=arms, concurrency=2, out=out, pair_timeout=0.5
    )
    (error,) = report.errors
    assert (error.task_id, error.arm, error.attempts) == ("t2", "stuck", 1)  # not retried
    assert "did not finish within 0.5 s (the pair time limit)" in error.error
    assert len(report.results) == 7  # every other pair finished
    assert hung == ["t2"]
    recorded = journal_path(out).read_text().splitlines()[1:]
    assert len([r for r in recorded if '"task_id"' in r]) == 7
    release.set()
    again = await arun_eval(TASKS, FakeChat.of("OK"), arms=arms, out=out, pair_timeout=0.5)
    assert again.complete
    assert again.arms["stuck"].passed == 4


@pytest.mark.parametrize("blocks", ["sleeps", "spins"])
async def test_an_async_agent_that_blocks_its_event_loop_ends_at_the_pair_time_limit(
    tmp_path, blocks
):
    """``time.sleep`` in an ``async def``, or a coroutine that never awaits."""
    stop = threading.Event()

    def factory(task, model, settings):
        async def answer(messages):
            if task.id == "t2" and blocks == "sleeps":
                time.sleep(STUCK)
            while task.id == "t2" and blocks == "spins" and not stop.is_set():
                pass
            return "OK"

        return RunnableLambda(answer)

    out = tmp_path / "r.json"
    arms = {"single": "single", "stuck": factory}
    started = time.monotonic()
    try:
        report = await arun_eval(
            TASKS, FakeChat.of("OK"), arms=arms, concurrency=2, out=out, pair_timeout=0.5
        )
    finally:
        stop.set()  # the spinning coroutine ends, and its abandoned loop's thread with it
    assert time.monotonic() - started < STUCK / 2
    (error,) = report.errors
    assert (error.task_id, error.arm, error.attempts) == ("t2", "stuck", 1)
    assert "did not finish within 0.5 s (the pair time limit); it blocked its event loop, " in (
        error.error
    )
    # every other pair finished, those stalled on the blocked loop run again, not retried
    assert len(report.results) == 7
    assert {r.attempts for r in report.results} == {1}
    recorded = journal_path(out).read_text().splitlines()[1:]
    assert len([r for r in recorded if '"task_id"' in r]) == 7
    again = await arun_eval(TASKS, FakeChat.of("OK"), arms=arms, out=out, pair_timeout=0.5)
    assert [(e.task_id, e.arm) for e in again.errors] == [("t2", "stuck")] * (blocks == "sleeps")


def test_a_hung_sync_factory_does_not_stop_the_other_pairs():
    release = threading.Event()

    def hangs_on_t1(task, model, settings):
        if task.id == "t1":
            release.wait(STUCK)
        return model

    try:
        done: list[Any] = []
        runner = threading.Thread(
            target=lambda: done.append(
                run_eval(
                    TASKS,
                    FakeChat.of("OK"),
                    arms={"single": "single", "mine": hangs_on_t1},
                    concurrency=2,
                    pair_timeout=1,
                    retries=0,
                )
            ),
            daemon=True,
        )
        runner.start()
        runner.join(STUCK / 2)
        assert done, "the eval stopped at the hung factory"
    finally:
        release.set()
    (report,) = done
    assert [(e.task_id, e.arm) for e in report.errors] == [("t1", "mine")]
    assert len(report.results) == 7


HANGING = """
import asyncio
import os
import pathlib
import threading
import time

from langchain_core.runnables import RunnableLambda


def hangs(task, model, settings):
    if task.id != "t0" and os.environ.get("HANG_ARMS") == "1":
        pathlib.Path(f"hung-{task.id}").touch()
        threading.Event().wait()  # for ever: only the pair's end or Ctrl-C stops waiting
    return model


def sleeps(task, model, settings):
    async def answer(messages):
        if task.id != "t0" and os.environ.get("HANG_ARMS") == "1":
            pathlib.Path(f"hung-{task.id}").touch()
            time.sleep(3600)  # blocks the event loop it runs on
        return "OK"

    return RunnableLambda(answer)


def spins(task, model, settings):
    async def answer(messages):
        while task.id != "t0" and os.environ.get("HANG_ARMS") == "1":
            pass  # a busy coroutine: never gives its event loop back
        return "OK"

    return RunnableLambda(answer)


def stubborn(task, model, settings):
    async def answer(messages):
        if task.id == "t0":
            return "OK"
        pathlib.Path(f"hung-{task.id}").touch()
        while True:  # an agent that does not let go of a cancellation
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    return RunnableLambda(answer)
"""


def _command(tmp_path: Path, base_url: str, *args: str, factory: str = "hangs") -> list[str]:
    module = f"hanging_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(HANGING), encoding="utf-8")
    return [
        sys.executable, "-m", "loop_agents_cli", "eval", str(task_file(tmp_path)),
        "--arms", "single", "--arm", f"hang={module}:{factory}", "--concurrency", "2",
        "--out", str(tmp_path / "r.json"), "--base-url", base_url, *args,
    ]  # fmt: skip


@pytest.mark.parametrize("factory", ["hangs", "sleeps", "spins"])
def test_the_command_ends_a_hung_pair_at_pair_timeout_and_resumes_it(tmp_path, factory):
    scripted = ReactiveOpenAI(lambda body: "OK")
    env = env_without_model_settings(HANG_ARMS="1")
    with scripted.serve() as base_url:
        args = _command(tmp_path, base_url, "--limit", "2", "--pair-timeout", "1", factory=factory)
        done = subprocess.run(
            args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG
        )
        assert done.returncode == 1, done.stderr
        assert "t1 / hang: no result (TimeoutError: did not finish within 1 s" in done.stderr
        assert "retrying" not in done.stderr
        assert done.stderr.count(": passed (") == 3  # the other pairs finished
        env["HANG_ARMS"] = "0"
        again = subprocess.run(
            args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG
        )
    assert again.returncode == 0, again.stderr
    assert "4 task/arm pairs, 3 done before (resumed)" in again.stderr
    assert json.loads((tmp_path / "r.json").read_text())["arms"]["hang"]["passed"] == 2


@pytest.mark.slow  # a real eval process, interrupted
@pytest.mark.parametrize("factory", ["hangs", "stubborn"])
def test_ctrl_c_ends_an_eval_whose_arm_hangs_keeping_what_finished(tmp_path, factory):
    """A sync call that never returns, or an async one that ignores its cancellation."""
    scripted = ReactiveOpenAI(lambda body: "OK")
    env = env_without_model_settings(HANG_ARMS="1")
    with scripted.serve() as base_url:
        process = subprocess.Popen(
            _command(tmp_path, base_url, factory=factory),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # SIGINT must not be ignored in the child (as it is for `cmd &` in a script)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        journal = journal_path(tmp_path / "r.json")
        # both pairs running hang (concurrency 2): every other arm's pair waits for them
        while len(list(tmp_path.glob("hung-*"))) < 2:
            assert process.poll() is None, process.communicate()
            threading.Event().wait(0.05)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=STUCK)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("Ctrl-C did not end the eval")
    assert process.returncode == 130, stderr
    assert "run the same command (with the same --out) to resume" in stderr
    records = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    finished = {(r["task_id"], r["arm"]) for r in records if "task_id" in r}
    assert ("t0", "single") in finished  # what finished before the hang is kept
    assert all(arm == "single" or task == "t0" for task, arm in finished)
