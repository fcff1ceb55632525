"""The eval command: end to end in a subprocess against a scripted OpenAI-compatible
server on loopback (tables, --out JSON, progress lines, a kill and a resume), and its
argument errors, which exit with 2 before any model call."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from loop_agents_cli import main as loop_agents_main
from loop_agents_evals.journal import journal_path
from tests.conftest import ROOT, env_without_model_settings
from tests.eval_models import ReactiveOpenAI, after_feedback
from tests.fakes import FakeChat

TASKS = [
    {
        "id": f"t{i}",
        "kind": "instructions",
        "prompt": f"Task t{i}: reply OK in capitals.",
        "checks": [{"check": "case", "case": "upper"}],
    }
    for i in range(6)
]


HANG = 600
"""Seconds after which a wait is a hang, not a slow machine: the waits here wait for an
event (records in the journal, an exit, an idle server); on a loaded machine an eval
process may take long to start, which is not a failure."""


def task_file(folder: Path) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    return path


def feedback_helps(body):
    return "OK" if after_feedback(body) else "ok"


def main(args: list[str]) -> int:
    """``loop-agents eval ARGS`` in this process."""
    return loop_agents_main(["eval", *args])


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "loop_agents_cli", "eval", *args]


def run_eval(
    tmp_path: Path, base_url: str, out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``loop-agents eval`` on `task_file`'s tasks with K = 3, in a subprocess."""
    return subprocess.run(
        command(
            str(task_file(tmp_path)), "--iterations", "3", "--out", str(out),
            "--base-url", base_url, *args,
        ),
        capture_output=True,
        text=True,
        env=env_without_model_settings(COLUMNS="100"),
        cwd=tmp_path,
        timeout=HANG,
    )  # fmt: skip


def test_the_command_prints_the_tables_and_writes_the_json(tmp_path):
    scripted = ReactiveOpenAI(feedback_helps)
    out = tmp_path / "results.json"
    with scripted.serve() as base_url:
        done = run_eval(tmp_path, base_url, out, "--arms", "single,loop,resample", "--limit", "4")
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert "loop vs resample" in table
    assert "loop vs single" in table
    first_table = table.split("Pass rate by attempt")[0]
    rows = {line.split()[0]: line.split()[1:3] for line in first_table.splitlines() if line.strip()}
    assert rows["single"] == ["0/4", "0%"]
    assert rows["loop"] == ["4/4", "100%"]
    assert rows["resample"] == ["0/4", "0%"]
    # one temperature for every arm: said once in the title, with the token cap
    assert "Eval: K=3, T=1, max tokens none, judge T=default, gpt-5.4-mini" in table
    curves = table.split("Pass rate by attempt")[1].split("After the first answer")[0]
    rows = {line.split()[0]: line.split()[1:] for line in curves.splitlines() if line.strip()}
    assert rows["loop"] == ["0%", "100%", "100%"]
    assert rows["single"] == ["0%"]
    after = table.split("After the first answer")[1].split("Paired, task by task")[0]
    rows = {line.split()[0]: line.split()[1:] for line in after.splitlines() if line.strip()}
    assert rows["loop"] == ["4", "4", "(100%)", "0", "0"]
    assert rows["resample"] == ["4", "0", "(0%)", "0", "0"]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["arms"]["loop"]["passed"] == 4
    assert data["by_attempt"]["loop"] == [0.0, 1.0, 1.0]
    assert data["settings"]["temperatures"]["single"] == 1.0
    assert data["settings"]["judge_temperature"] is None  # gpt-5.4-mini: its default only
    assert len(data["results"]) == 12
    assert data["settings"]["model"].startswith("gpt-5.4-mini at http://127.0.0.1:")
    # not a terminal: one progress line per finished pair
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 12
    assert progress[-1].startswith("[12/12]")
    assert "12 task/arm pairs\n" in done.stderr  # a first run is not "resumed"
    assert "resumed" not in done.stderr
    assert len(scripted.requests) == 4 * (1 + 2 + 3)


class JournalGate:
    """Holds every request once the journal has `hold_from` records, until the next stage.

    The eval then cannot finish before it is interrupted, however slow the machine: the
    process is stopped while it waits for an answer, on an event rather than a timing.
    """

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.hold_from = math.inf
        self.holding = threading.Event()
        self._open = threading.Event()

    def hold_at(self, records: float) -> None:
        """Release what is held, then hold from ``records`` records on."""
        held = self._open
        self.holding, self._open = threading.Event(), threading.Event()
        self.hold_from = records
        held.set()

    def __call__(self, body: dict[str, Any]) -> Any:
        recorded = len(self.journal.read_text().splitlines()) - 1 if self.journal.exists() else 0
        if recorded >= self.hold_from:
            opened = self._open
            self.holding.set()
            opened.wait(HANG)
        return feedback_helps(body)


@pytest.mark.slow  # a real eval process, interrupted and killed, then resumed
def test_an_interrupted_or_killed_eval_resumes_where_it_stopped(tmp_path):
    out = tmp_path / "results.json"
    journal = journal_path(out)
    gate = JournalGate(journal)
    scripted = ReactiveOpenAI(gate)
    env = env_without_model_settings()
    with scripted.serve() as base_url:
        args = command(
            str(task_file(tmp_path)),
            *("--arms", "single,loop", "--concurrency", "1", "--out", str(out)),
            *("--base-url", base_url),
        )

        def start() -> subprocess.Popen[str]:
            return subprocess.Popen(
                args,
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                # SIGINT must not be ignored in the child (as it is for `cmd &` in a script)
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )

        def held(process: subprocess.Popen[str]) -> None:
            """Wait until the process waits for a held answer."""
            while not gate.holding.wait(0.05):
                assert process.poll() is None, "the eval ended before it was interrupted"

        # Ctrl-C while a pair waits for the model: a clean stop, status 130, a resume hint
        gate.hold_at(2)
        process = start()
        held(process)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=HANG)
        assert process.returncode == 130, stderr
        assert "interrupted; run the same command (with the same --out) to resume" in stderr
        assert "12 task/arm pairs\n" in stderr  # a first run is not said to be resumed
        assert "resumed" not in stderr
        interrupted = len(journal.read_text().splitlines()) - 1
        assert interrupted >= 2

        # a hard kill after a few more pairs: what was recorded stays recorded
        gate.hold_at(interrupted + 2)
        process = start()
        held(process)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=HANG)
        records = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
        done_before = {(r["task_id"], r["arm"]) for r in records}
        assert len(done_before) == len(records)
        assert interrupted + 2 <= len(done_before) < 12
        assert not out.exists()
        gate.hold_at(math.inf)

        # a request the killed process had sent may still be on its way in: once the
        # server is idle it is counted, and nothing more can come from that process
        scripted.wait_idle(HANG)
        asked = len(scripted.requests)
        again = subprocess.run(
            args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG
        )
    assert again.returncode == 0, again.stderr
    assert f"12 task/arm pairs, {len(done_before)} done before (resumed)" in again.stderr
    rerun = [line for line in again.stderr.splitlines() if line.startswith("[")]
    assert len(rerun) == 12 - len(done_before)
    calls = {"single": 1, "loop": 2}
    remaining = {(t["id"], a) for t in TASKS for a in calls} - done_before
    # only the remaining pairs ran (the one running at the kill started over)
    assert len(scripted.requests) - asked == sum(calls[a] for _, a in remaining)
    data = json.loads(out.read_text())
    assert data["arms"]["loop"]["passed"] == 6
    assert data["arms"]["single"]["tasks"] == 6


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--arms", "loop,best"], "--arms 'loop,best': give a comma-separated list"),
        (["--iterations", "0"], "--iterations must be >= 1"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--temperature", "-1"], "--temperature must be from 0 to 2"),
        (["--limit", "0"], "--limit must be >= 1"),
        (["--tasks", ","], "--tasks is empty"),
        (["--tasks", "t1,zz"], "no task has the id 'zz'"),
        (["--server", "localhost:2024"], "--server must be the URL of a LangGraph server"),
        (["--judge-threshold", "120"], "--judge-threshold must be from 0 to 100"),
        (["--judge-temperature", "3"], "--judge-temperature must be from 0 to 2"),
        (["--arm-temperature", "resample"], "--arm-temperature 'resample': give ARM=T"),
        (["--arm-temperature", "best=1"], "--arm-temperature 'best=1': give ARM=T"),
        (["--arm-temperature", "loop=2.5"], "--arm-temperature 'loop=2.5': give ARM=T"),
        (["--arm-temperature", "loop=warm"], "--arm-temperature 'loop=warm': give ARM=T"),
        (
            ["--arms", "loop,loop-candidates", "--iterations", "3"],
            "give --iterations 4 (or 2), or leave loop-candidates out of --arms",
        ),
    ],
)
def test_bad_arguments_exit_with_2(tmp_path, capsys, args, phrase):
    with pytest.raises(SystemExit) as caught:
        main([str(task_file(tmp_path)), *args, "--base-url", "http://127.0.0.1:9/v1"])
    assert caught.value.code == 2
    assert phrase in capsys.readouterr().err


def test_a_bad_task_file_names_the_line_and_field_before_any_model_call(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    lines = [json.dumps(TASKS[0]), json.dumps(TASKS[1] | {"checks": [{"check": "case"}]})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    scripted = ReactiveOpenAI(feedback_helps)
    with scripted.serve() as base_url, pytest.raises(SystemExit) as caught:
        main([str(path), "--base-url", base_url])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"{path} line 2, field 'checks[0].case': is required by 'case'" in err
    assert scripted.requests == []


def test_help_lists_the_arms_and_the_bundled_sets():
    done = subprocess.run(command("--help"), capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert done.returncode == 0
    for word in (
        "single",
        "loop",
        "resample",
        "judge-loop",
        "loop-candidates",
        "code, instructions",
        "--server",
        "--arm-temperature",
        "--judge-temperature",
    ):
        assert word in done.stdout


def test_the_progress_lines_count_answers_and_calls_in_good_english():
    import io

    from rich.console import Console

    from loop_agents_evals.command import _ProgressView
    from loop_agents_evals.report import TaskResult
    from loop_agents_evals.runner import EvalProgress

    out = io.StringIO()
    view = _ProgressView(Console(file=out, force_terminal=False, width=200))
    one = TaskResult(task_id="t1", arm="single", passed=True, iterations=1, model_calls=1)
    three = TaskResult(task_id="t2", arm="loop", passed=False, iterations=3, model_calls=3)
    with view:
        view(EvalProgress(done=1, total=2, result=one))
        view(EvalProgress(done=2, total=2, result=three))
    lines = out.getvalue().splitlines()
    assert "[1/2] t1 / single: passed (1 answer, 1 call, 0.0 s)" in lines
    assert "[2/2] t2 / loop: failed (3 answers, 3 calls, 0.0 s)" in lines


@pytest.mark.slow  # a real eval process, with the retry's wait
def test_a_server_error_inside_a_pair_is_reported_and_every_request_counted(tmp_path):
    # the command's client does not retry by itself: before, ChatOpenAI retried a 500
    # silently, so the failure was never reported and model_calls left the request out
    answered = 0

    def one_failure(body):
        nonlocal answered
        answered += 1
        if answered == 2:  # the loop's second call
            return httpx.Response(500, json={"error": {"message": "the model crashed"}})
        return feedback_helps(body)

    scripted = ReactiveOpenAI(one_failure)
    out = tmp_path / "results.json"
    with scripted.serve() as base_url:
        done = run_eval(
            tmp_path, base_url, out, "--arms", "loop", "--limit", "1", "--concurrency", "1"
        )
    assert done.returncode == 0, done.stderr
    assert "try 1" in done.stderr
    assert "the model crashed" in done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["arms"]["loop"]["passed"] == 1
    # try 1: a request answered, then the 500; try 2: the loop's two answers
    assert len(scripted.requests) == 4
    assert data["results"][0]["model_calls"] == 2


def test_a_finished_eval_run_again_with_another_token_cap_is_refused(tmp_path):
    scripted = ReactiveOpenAI(feedback_helps)
    out = tmp_path / "results.json"
    with scripted.serve() as base_url:
        first = run_eval(tmp_path, base_url, out, "--arms", "single,loop", "--limit", "2",
                         "--max-tokens", "64", "--arm-temperature", "loop=0.5",
                         "--model", "local-model")  # fmt: skip
        assert first.returncode == 0, first.stderr
        asked = len(scripted.requests)
        assert {b["max_completion_tokens"] for b in scripted.requests} == {64}
        assert {b["temperature"] for b in scripted.requests} == {1.0, 0.5}
        again = run_eval(tmp_path, base_url, out, "--arms", "single,loop", "--limit", "2",
                         "--max-tokens", "128", "--arm-temperature", "loop=0.5",
                         "--model", "local-model")  # fmt: skip
        assert again.returncode == 2
        assert "max_tokens 64 there, 128 now" in again.stderr
        assert len(scripted.requests) == asked  # nothing ran again
        same = run_eval(tmp_path, base_url, out, "--arms", "single,loop", "--limit", "2",
                        "--max-tokens", "64", "--arm-temperature", "loop=0.5",
                        "--model", "local-model")  # fmt: skip
        # OpenAI's reasoning models sample at their default only: the report says so
        reasoning = run_eval(tmp_path, base_url, tmp_path / "gpt5.json", "--arms", "single",
                             "--limit", "1", "--temperature", "0.5")  # fmt: skip
    assert same.returncode == 0, same.stderr
    assert "4 done before (resumed)" in same.stderr
    assert len(scripted.requests) == asked + 1  # the reasoning model's one answer
    data = json.loads(out.read_text())
    assert data["settings"]["max_tokens"] == 64
    assert {a: s["temperature"] for a, s in data["arms"].items()} == {"single": 1.0, "loop": 0.5}
    assert reasoning.returncode == 0, reasoning.stderr
    assert "temperature" not in scripted.requests[-1]
    assert "Eval: K=3, T=default, max tokens none" in reasoning.stdout
    gpt5 = json.loads((tmp_path / "gpt5.json").read_text())
    assert gpt5["arms"]["single"]["temperature"] is None
    assert gpt5["settings"]["judge_temperature"] is None


def _local_endpoint(scripted: ReactiveOpenAI, weights: Path, asked: list[dict] | None = None):
    """A `resolve_endpoint` whose endpoint is the bundled server on ``weights`` without
    starting llama.cpp: the scripted server answers. ``asked`` collects its options."""
    from loop_agents_cli.models.endpoints import EndpointSpec

    class LocalEndpoint:
        spec = EndpointSpec("local", "model", gguf=str(weights))

        def __init__(self, seed: int | None) -> None:
            self.seed = seed

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def describe(self):
            return f"the bundled llama.cpp server on model.gguf (seed {self.seed})"

        def chat_model(self, **options):
            return scripted.chat_model()  # already without retries

        def server_failure(self):
            return None  # the scripted server does not die

    def resolve(**options):
        if asked is not None:
            asked.append(options)
        return LocalEndpoint(options.get("seed"))

    return resolve


def test_a_gguf_model_is_known_by_its_sha256_in_the_journal(tmp_path, monkeypatch, capsys):
    """Two GGUF files of the same name are two models: the journal tells them apart."""
    import hashlib

    from loop_agents_cli.models import endpoints

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    scripted = ReactiveOpenAI(feedback_helps)
    weights = tmp_path / "model.gguf"

    monkeypatch.setattr(endpoints, "resolve_endpoint", _local_endpoint(scripted, weights))
    out = tmp_path / "r.json"
    args = [str(task_file(tmp_path)), "--arms", "single", "--limit", "1", "--out", str(out)]
    weights.write_bytes(b"weights one")
    assert main([*args, "--gguf", str(weights)]) == 0
    data = json.loads(out.read_text())
    assert data["settings"]["model_sha256"] == hashlib.sha256(b"weights one").hexdigest()
    weights.write_bytes(b"weights two")  # the same name, other weights
    os.utime(weights, ns=(1, 1))
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main([*args, "--gguf", str(weights)])
    assert caught.value.code == 2
    expected = hashlib.sha256(b"weights two").hexdigest()
    assert f"model_sha256 '{hashlib.sha256(b'weights one').hexdigest()}' there, '{expected}'" in (
        capsys.readouterr().err
    )
    assert len(scripted.requests) == 1


def test_each_eval_on_the_bundled_server_samples_from_a_seed_of_its_own(
    tmp_path, monkeypatch, capsys
):
    """A fresh llama.cpp server repeats its seed's sequence: without --seed every eval
    starts the server with a new one, so two runs are independent samples; --seed repeats
    one. The seed is in the report; an eval resumed with another seed goes on."""
    from loop_agents_cli.models import endpoints
    from loop_agents_cli.models.local_model import MAX_SEED

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    scripted = ReactiveOpenAI(feedback_helps)
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"weights")
    asked: list[dict] = []
    monkeypatch.setattr(endpoints, "resolve_endpoint", _local_endpoint(scripted, weights, asked))
    tasks = str(task_file(tmp_path))

    def seed_of(out: Path) -> int:
        return json.loads(out.read_text())["settings"]["seed"]

    args = ["--arms", "single", "--gguf", str(weights)]
    assert main([tasks, *args, "--limit", "1", "--out", str(tmp_path / "a.json")]) == 0
    assert main([tasks, *args, "--limit", "1", "--out", str(tmp_path / "b.json")]) == 0
    a, b = seed_of(tmp_path / "a.json"), seed_of(tmp_path / "b.json")
    assert [options["seed"] for options in asked] == [None, None]  # none given
    assert a != b
    assert 0 <= a <= MAX_SEED
    titles = " ".join(capsys.readouterr().out.split())
    assert f"seed {a}" in titles  # the table's title says it
    assert f"seed {b}" in titles
    # given: the server starts with it; resuming with another seed is the same eval
    out = tmp_path / "c.json"
    assert main([tasks, *args, "--limit", "1", "--out", str(out), "--seed", "7"]) == 0
    assert asked[-1]["seed"] == 7
    assert seed_of(out) == 7
    capsys.readouterr()
    assert main([tasks, *args, "--limit", "2", "--out", str(out), "--seed", "8"]) == 0
    shown = capsys.readouterr()
    assert "1 done before (resumed)" in shown.err
    # each result keeps the seed of the run that made it: the report names both
    settings = json.loads(out.read_text())["settings"]
    assert "seed" not in settings
    assert settings["seeds"] == [7, 8]
    assert "seeds 7, 8" in " ".join(shown.out.split())
    journal = [json.loads(line) for line in journal_path(out).read_text().splitlines()]
    assert [r["seed"] for r in journal if "task_digest" in r] == [7, 8]
    assert len(scripted.requests) == 4
    # the same seed again: one seed, said once
    capsys.readouterr()
    assert main([tasks, *args, "--limit", "1", "--out", str(out), "--seed", "7"]) == 0
    assert seed_of(out) == 7


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "-1"], "--seed must be a whole number from 0 to 2147483647; got -1"),
        (["--seed", "2147483648"], "--seed must be a whole number from 0 to 2147483647"),
        (["--seed", "7", "--server", "http://127.0.0.1:9"], "with --server the LangGraph"),
        (["--seed", "7", "--base-url", "http://127.0.0.1:9/v1"], "--seed sets the random seed"),
    ],
)
def test_a_seed_the_eval_cannot_use_is_refused_before_any_model_call(
    tmp_path, capsys, extra, message
):
    with pytest.raises(SystemExit) as caught:
        main([str(task_file(tmp_path)), "--arms", "single", *extra])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "seed", "role", "how"),
    [
        ("crash-on-chat", "5", "agent", "killed by signal 11 (SIGSEGV, a crash)"),
        ("killed-on-chat", "6", "judge", "killed by signal 9 (SIGKILL"),
    ],
)
def test_a_bundled_server_that_dies_stops_the_eval_naming_it_not_retrying(
    fake_llama, tmp_path, mode, seed, role, how
):
    env = env_without_model_settings(
        LOOP_AGENTS_OLLAMA_URL="off",
        FAKE_LLAMA_MODE=mode,
        FAKE_LLAMA_ONLY_SEED=seed,  # the agent's process has the seed, the judge's seed + 1
        PYTHONPATH=os.pathsep.join([os.environ["PYTHONPATH"], str(ROOT)]),  # the fake, this tree
    )
    out = tmp_path / "eval.json"
    done = subprocess.run(
        command(
            "instructions", "--limit", "3", "--arms", "judge-loop", "--concurrency", "1",
            "--out", str(out), "--gguf", str(fake_llama), "--seed", "5",
        ),
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "retrying" not in done.stderr  # no try after the server's death: it cannot succeed
    assert "Connection error" not in done.stderr
    assert "the eval stopped: the model's server died, so no pair can finish" in done.stderr
    error = done.stderr[done.stderr.index("loop-agents: error: ") :]
    assert error.startswith(f"loop-agents: error: the {role}'s bundled llama.cpp server at ")
    assert f"stopped: {how}" in error
    assert "Its log ends with:\n    " in error
    assert len(journal_path(out).read_text().splitlines()) == 1  # the settings; no result
    assert not out.exists()


def test_code_tasks_on_a_machine_that_cannot_sandbox_are_refused_once_before_any_call(
    tmp_path, capsys, monkeypatch
):
    """As root without bubblewrap, with a Python under /root: no isolation can run code."""
    from loop_agents_checks.sandbox import isolation

    asked: list[str] = []

    def cannot(kind, limits):
        asked.append(kind)
        return f"{kind} cannot run {limits.python} here (simulated)"

    monkeypatch.setattr(isolation, "_choose", cannot)
    scripted = ReactiveOpenAI(feedback_helps)
    with scripted.serve() as base_url, pytest.raises(SystemExit) as caught:
        main(["code", "--limit", "3", "--arms", "single", "--base-url", base_url])
    assert caught.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the code tasks' answers run in the sandbox, which cannot run here:" in err
    assert "isolation='auto' is not available on this machine: bwrap: bwrap cannot run" in err
    assert asked == ["bwrap", "unshare", "process"]  # probed once, not per task
    assert scripted.requests == []
    # an instructions eval needs no sandbox
    with scripted.serve() as base_url:
        assert (
            main(["instructions", "--limit", "1", "--arms", "single", "--base-url", base_url]) == 0
        )


async def test_from_python_code_tasks_without_a_sandbox_raise_before_any_call(monkeypatch):
    from loop_agents_checks.sandbox import IsolationUnavailable, isolation
    from loop_agents_evals import arun_eval

    monkeypatch.setattr(isolation, "_choose", lambda kind, limits: f"no {kind} here")
    model = FakeChat.of("def add(a, b): return a + b")
    with pytest.raises(IsolationUnavailable, match="bwrap: no bwrap here"):
        await arun_eval("code", model, arms=["single"], limit=2)
    assert model.calls == []


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["nosuchset"], "nosuchset: is neither a file nor a bundled task set"),
        (["instructions", "--arm", "x=nosuchmod:f"], "cannot import the module 'nosuchmod'"),
        (["instructions", "--limit", "0"], "--limit must be >= 1"),
        (["instructions", "--arms", "single,bogus"], "--arms 'single,bogus': give a comma"),
        (["instructions", "--arm", "x=lop"], "(did you mean 'loop'?)"),
        (["instructions", "--pair-timeout", "0"], "--pair-timeout must be a finite number"),
        (["instructions", "--pair-timeout", "inf"], "--pair-timeout must be a finite number"),
        (["instructions", "--pair-timeout", "1e309"], "seconds > 0; got inf"),
        (["instructions", "--temperature", "3"], "--temperature must be from 0 to 2"),
    ],
)
def test_argument_errors_are_found_before_any_model_library_is_imported(tmp_path, args, phrase):
    script = (
        "import sys\n"
        "from loop_agents_cli import main\n"
        "try:\n"
        f"    main(['eval', *{args!r}])\n"
        "except SystemExit as exit:\n"
        "    print('EXIT', exit.code, file=sys.stderr)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langchain', 'langchain_core',"
        " 'langchain_openai', 'langgraph', 'openai'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_without_model_settings(),
        timeout=HANG,
    )
    assert "EXIT 2" in done.stderr, done.stderr
    assert phrase in " ".join(done.stderr.split())
    assert "HEAVY []" in done.stderr


@pytest.mark.parametrize(
    ("line", "phrase"),
    [
        (
            '{"id": "t1", "kind": "instructions", "prompt": "Say \\ud800 hi.", '
            '"checks": [{"check": "word_count", "max": 3}]}',
            "line 2, field 'prompt': holds the lone surrogate '\\ud800' (task 't1')",
        ),
        ("[" * 100_000 + "]" * 100_000, "line 2: is nested too deeply to read"),
    ],
)
def test_a_task_file_that_json_reads_but_no_eval_can_use_exits_2_naming_the_line(
    tmp_path, capsys, line, phrase
):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps(TASKS[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as caught:
        main([str(path), "--base-url", "http://127.0.0.1:9/v1"])
    assert caught.value.code == 2
    assert phrase in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--arms", "single,resampel"], "'resampel' (did you mean 'resample'?): not a built-in arm"),
        (["--arm", "mine=loop,histroy=full"], "KEY one of history, candidates, feedback, patience, select, restart, first, stagnation, adaptive (did you mean 'history'?)"),
        (["--arm", "mine=lop"], "'lop' is neither a loop nor module:factory (did you mean 'loop'?)"),
        (["--arm", "mine=loop,select=bset"], "select='bset': give one of last, best (did you mean 'best'?)"),
        (["--arm", "mine=json:dumsp"], "has no attribute 'dumsp' (did you mean 'dump'?)"),
        (["--arm-temperature", "resampel=0.5"], "(did you mean 'resample'?)"),
    ],
)  # fmt: skip
def test_a_mistyped_arm_or_key_is_answered_with_the_closest_name(tmp_path, capsys, args, phrase):
    with pytest.raises(SystemExit) as caught:
        main([str(task_file(tmp_path)), *args, "--base-url", "http://127.0.0.1:9/v1"])
    assert caught.value.code == 2
    assert phrase in " ".join(capsys.readouterr().err.split())
