"""Saved runs: Ctrl-C then resume, failures that keep the result, ``runs`` and ``show``.

Each test runs the real command in a subprocess against a scripted OpenAI-compatible
server on loopback, and counts the server's calls.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loop_agents_cli.console.loop_console import section_header
from tests.cli_helpers import Running, cli_env, loop_agents
from tests.fakes import review
from tests.scripted_openai import Fail, Hang, ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT_1 = "Roses are red,\nviolets are blue."
DRAFT_2 = "A graph with a loop\nwent round in a hoop\nit judged every try\nand asked itself why\nthen shipped the best scoop."
VERDICT_1 = {"score": 55, "feedback": "Not a limerick: it needs five lines."}
VERDICT_2 = {"score": 86, "feedback": "Five lines, AABBA, light."}
SCRIPT = [DRAFT_1, Structured(VERDICT_1), DRAFT_2, Structured(VERDICT_2)]


def run_id_of(text: str) -> str:
    found = re.search(r"^run ([0-9a-f]{8}) · saved in ", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def first_requests(server: ScriptedOpenAI) -> list[dict]:
    """The agent's requests of iteration 1: the system message and the task only."""
    return [r for r in server.requests if [m["role"] for m in r["messages"]] == ["system", "user"]]


def test_ctrl_c_while_streaming_then_resume_asks_nothing_twice(tmp_path):
    server = ScriptedOpenAI(
        [DRAFT_1, Structured(VERDICT_1), Hang("A graph with"), DRAFT_2, Structured(VERDICT_2)],
        usage_when_asked=True,
    )
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url, LOOP_AGENTS_MODEL="scripted")
        running = Running("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        try:
            run_id = run_id_of(running.wait_for_line(" · saved in "))
            running.wait_for_line("iteration 2 of 3")
            assert server.hanging.wait(60), "the second answer was never requested"
            running.still_waiting()  # the second answer's call is in flight
            status, _seconds, _out, err = running.interrupt()
        finally:
            running.close()
        assert status == 130, err
        # the answer's call never ends: exiting at all means the command did not wait for it
        assert server.abandoned.wait(10), "the call was not in flight when Ctrl-C came"
        assert "Traceback" not in err
        assert "interrupted; 1 of 3 iterations are saved" in err
        home = shlex.quote(str(tmp_path / "home"))
        assert f"  LOOP_AGENTS_HOME={home} loop-agents resume {run_id}\n" in err
        assert len(server.requests) == 3  # agent 1, judge 1, agent 2 (cut off)

        done = loop_agents("resume", run_id, "--json", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["run_id"] == run_id
        assert (result["stop_reason"], result["iterations"], result["answer"]) == (
            "accepted",
            2,
            DRAFT_2,
        )
        assert [(r["iteration"], r["answer"], r["score"]) for r in result["records"]] == [
            (1, DRAFT_1, 55.0),
            (2, DRAFT_2, 86.0),
        ]
        # iteration 1 was not asked of the model again: one request for it in all
        assert len(first_requests(server)) == 1
        assert len(server.requests) == 5  # + agent 2 again, judge 2
        resumed_agent = server.requests[3]
        assert [m["content"] for m in resumed_agent["messages"][1:]] == [
            TASK,
            DRAFT_1,
            review(f"{VERDICT_1['feedback']}\n\nScore: 55/100 (needed: 80)", 1),
        ]
        assert "resuming run" in done.stderr


def test_sigterm_too_saves_and_says_how_to_resume(tmp_path):
    server = ScriptedOpenAI([Hang("A graph"), DRAFT_2, Structured(VERDICT_2)])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        running = Running("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        try:
            assert server.hanging.wait(60), "the first answer was never requested"
            running.still_waiting()  # --json: the call is not streamed, and still in flight
            status, _seconds, out, err = running.interrupt(signal.SIGTERM)
        finally:
            running.close()
        assert status == 128 + signal.SIGTERM, err
        # the answer's call never ends: exiting at all means the command did not wait for it
        assert server.abandoned.wait(10), "the call was not in flight when SIGTERM came"
        assert out == ""  # --json: stdout stays empty
        run_id = run_id_of(err.replace("loop-agents: run ", "run "))
        home = shlex.quote(str(tmp_path / "home"))
        assert f"  LOOP_AGENTS_HOME={home} loop-agents resume {run_id} --json\n" in err
        done = loop_agents("resume", run_id, "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == DRAFT_2
    assert len(server.requests) == 3


def test_every_run_is_saved_by_default_and_no_save_opts_out(tmp_path):
    server = ScriptedOpenAI([DRAFT_1, Structured(VERDICT_2)] * 3)
    with server.serve() as url:
        # LOOP_AGENTS_HOME unset: $XDG_STATE_HOME/loop-agents
        env = cli_env(
            tmp_path / "unused", OPENAI_BASE_URL=url, XDG_STATE_HOME=str(tmp_path / "xdg")
        )
        del env["LOOP_AGENTS_HOME"]
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        run_id = json.loads(proc.stdout)["run_id"]
        assert re.fullmatch(r"[0-9a-f]{8}", run_id)
        database = tmp_path / "xdg" / "loop-agents" / "runs.sqlite"
        assert database.is_file()
        assert database.parent.stat().st_mode & 0o777 == 0o700  # private
        assert database.stat().st_mode & 0o077 == 0
        listed = json.loads(loop_agents("runs", "--json", env=env, cwd=tmp_path).stdout)
        assert [r["run_id"] for r in listed] == [run_id]

        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--json", "--no-save", env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["run_id"] is None
        assert "run not saved (--no-save)" in proc.stderr
        listed = json.loads(loop_agents("runs", "--json", env=env, cwd=tmp_path).stdout)
        assert [r["run_id"] for r in listed] == [run_id]


def test_an_off_scale_judge_is_re_asked_then_the_run_stops_keeping_the_answer(tmp_path):
    # the small model's 2018.73: asked again twice, then a clear stop; the answer is kept
    server = ScriptedOpenAI([DRAFT_1, *[Structured({"score": 2018.73, "feedback": "Superb!"})] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "judge_invalid"
    assert result["answer"] == DRAFT_1  # iteration 1's answer is not lost
    assert result["records"] == []
    assert "gave no usable verdict at iteration 1 after 3 attempts" in result["error"]
    assert "the score 2018.73 is outside the scale 0-100" in result["error"]
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert errors == [f"loop-agents: error: {result['error']}"]
    assert "Traceback" not in proc.stderr
    assert f"loop-agents resume {result['run_id']} --json" in proc.stderr
    assert len(server.requests) == 4
    # the re-asks say what was wrong
    assert "outside the scale" in server.requests[2]["messages"][-1]["content"]


def test_a_server_error_mid_run_keeps_the_records_and_the_run_resumes(tmp_path):
    server = ScriptedOpenAI(
        # the client asks twice more after a 503 before it gives up
        [DRAFT_1, Structured(VERDICT_1), *[Fail(503, "overloaded")] * 3]
    )
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 1
        result = json.loads(proc.stdout)
        assert result["stop_reason"] == "error"
        assert result["answer"] == DRAFT_1
        assert (result["selected_iteration"], result["selected_score"]) == (1, 55.0)
        assert [r["answer"] for r in result["records"]] == [DRAFT_1]
        assert f"the model server at {url} answered HTTP 503" in result["error"]
        assert "Traceback" not in proc.stderr
        assert len(server.requests) == 5

        runs = json.loads(loop_agents("runs", "--json", env=env, cwd=tmp_path).stdout)
        assert [(r["run_id"], r["status"], r["stop_reason"], r["iterations"]) for r in runs] == [
            (result["run_id"], "failed", "error", 1)
        ]
        shown = loop_agents("show", result["run_id"], "--json", env=env, cwd=tmp_path)
        assert json.loads(shown.stdout) == result  # show prints what run --json printed

        server._replies = iter([DRAFT_2, Structured(VERDICT_2)])
        done = loop_agents("resume", result["run_id"][:5], "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout)
    assert (resumed["stop_reason"], resumed["answer"]) == ("accepted", DRAFT_2)
    assert "error" not in resumed
    assert [r["answer"] for r in resumed["records"]] == [DRAFT_1, DRAFT_2]
    assert len(server.requests) == 5 + 2
    assert len(first_requests(server)) == 1


def test_an_unreachable_server_is_named_and_exits_1(tmp_path):
    env = cli_env(tmp_path / "home")
    proc = loop_agents(
        "run", TASK, "--rubric", RUBRIC, "--base-url", "http://127.0.0.1:9/v1", "--json",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert (result["answer"], result["records"], result["stop_reason"]) == (None, [], "error")
    assert result["error"].startswith("cannot reach the model server at http://127.0.0.1:9/v1")
    assert "Traceback" not in proc.stderr
    # in the console form too: one line on stderr
    proc = loop_agents(
        "run", TASK, "--rubric", RUBRIC, "--base-url", "http://127.0.0.1:9/v1",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "loop-agents: error: cannot reach the model server at http://127.0.0.1:9/v1" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert section_header("Agent") not in proc.stdout  # no empty section


def test_runs_lists_and_show_replays_the_saved_runs(tmp_path):
    server = ScriptedOpenAI([*SCRIPT, "Blue.", Structured({"score": 90, "feedback": "Yes."})])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        first = loop_agents(
            "run", f"{TASK}\nMore details.", "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path
        )
        second = loop_agents(
            "run", "Name a colour.", "--rubric", "One word.", env=env, cwd=tmp_path
        )
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    first_result = json.loads(first.stdout)
    second_id = run_id_of(second.stdout)

    listed = json.loads(loop_agents("runs", "--json", env=env, cwd=tmp_path).stdout)
    assert [
        (r["run_id"], r["task"], r["iterations"], r["stop_reason"], r["best_score"], r["status"])
        for r in listed
    ] == [
        (second_id, "Name a colour.", 1, "accepted", 90.0, "finished"),
        (first_result["run_id"], TASK, 2, "accepted", 86.0, "finished"),  # the first line
    ]
    assert all(r["started_at"] for r in listed)

    # on an 80-column screen the ids stay whole (they are what `show` takes): the task gives way
    table = loop_agents("runs", env=env | {"COLUMNS": "80"}, cwd=tmp_path).stdout
    lines = table.splitlines()
    assert any(
        second_id in line and "Name a colour." in line and "1/3" in line for line in lines
    ), table
    assert any(
        first_result["run_id"] in line and "accepted" in line and "86" in line for line in lines
    )

    shown = loop_agents("show", first_result["run_id"], "--json", env=env, cwd=tmp_path)
    assert json.loads(shown.stdout) == first_result

    replay = loop_agents("show", first_result["run_id"], env=env, cwd=tmp_path).stdout
    positions = [
        replay.index(text)
        for text in (
            f"run {first_result['run_id']} · started ",
            f"{section_header('Agent')}\n{DRAFT_1}\n",
            "score 55 · another try (judge)",
            f"{section_header('Agent')}\n{DRAFT_2}\n",
            "score 86 · accepted (judge)",
            "stopped: accepted after 2 of 3 iterations",
            f"{section_header('Answer')}\n{DRAFT_2}\n",
        )
    ]
    assert positions == sorted(positions)

    # resuming a finished run asks nothing: it says so and prints the result
    before = len(server.requests)
    again = loop_agents("resume", second_id, "--json", env=env, cwd=tmp_path)
    assert again.returncode == 0
    assert "has finished (accepted); nothing to resume" in again.stderr
    assert json.loads(again.stdout)["answer"] == "Blue."
    assert len(server.requests) == before


def test_no_saved_runs(tmp_path):
    proc = loop_agents("runs", env=cli_env(tmp_path / "home"), cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("no saved runs")
    assert (
        json.loads(
            loop_agents("runs", "--json", env=cli_env(tmp_path / "home"), cwd=tmp_path).stdout
        )
        == []
    )


def test_the_printed_resume_command_works_when_copied_into_a_shell(tmp_path):
    # a home that is not the default one, with characters the shell would split or expand
    home = tmp_path / "my runs $HOME"
    server = ScriptedOpenAI([DRAFT_1, Structured(VERDICT_1), *[Fail(503, "overloaded")] * 3])
    with server.serve() as url:
        env = cli_env(home, OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        run_id = json.loads(proc.stdout)["run_id"]
        said = "loop-agents: the run is saved; resume it with: "
        (line,) = [line for line in proc.stderr.splitlines() if line.startswith(said)]
        command = line.removeprefix(said)
        assert command == (
            f"LOOP_AGENTS_HOME={shlex.quote(str(home))} loop-agents resume {run_id} --json"
        )

        # pasted into a shell that has no LOOP_AGENTS_HOME, in another folder
        server._replies = iter([DRAFT_2, Structured(VERDICT_2)])
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        shell_env = {k: v for k, v in env.items() if k != "LOOP_AGENTS_HOME"}
        shell_env["PATH"] = f"{Path(sys.executable).parent}:{shell_env.get('PATH', '')}"
        shell_env["HOME"] = str(tmp_path / "someone")
        pasted = subprocess.run(
            ["bash", "-c", command],
            env=shell_env,
            cwd=elsewhere,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert pasted.returncode == 0, pasted.stderr
    resumed = json.loads(pasted.stdout)
    assert (resumed["run_id"], resumed["stop_reason"], resumed["answer"]) == (
        run_id,
        "accepted",
        DRAFT_2,
    )
    assert len(first_requests(server)) == 1  # iteration 1 was not asked again


def test_the_resume_command_has_no_home_when_runs_are_in_the_default_one(tmp_path):
    server = ScriptedOpenAI([DRAFT_1, *[Fail(503, "overloaded")] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "unused", OPENAI_BASE_URL=url, XDG_STATE_HOME=str(tmp_path))
        del env["LOOP_AGENTS_HOME"]  # the default: $XDG_STATE_HOME/loop-agents
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    run_id = run_id_of(proc.stdout)
    assert proc.stderr.splitlines()[-1] == (
        f"loop-agents: the run is saved; resume it with: loop-agents resume {run_id}"
    )


def test_a_resume_that_judges_a_saved_answer_shows_it_first(tmp_path):
    # the judge fails after the first answer: the resume goes on with the evaluation of
    # the saved answer, and shows that answer (with its status line) before the verdict
    server = ScriptedOpenAI([DRAFT_1, *[Fail(503, "overloaded")] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        run_id = run_id_of(proc.stdout)
        server._replies = iter([Structured(VERDICT_2)])
        done = loop_agents("resume", run_id, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"resuming run {run_id}: 0 of 3 iterations were done; the answer of iteration 1 " in (
        out
    )
    positions = [
        out.index(text)
        for text in (
            "iteration 1 of 3 · ",
            "resumed: the saved answer",
            f"{section_header('Agent')}\n{DRAFT_1}\n",
            f"{section_header('Evaluator')}\n{VERDICT_2['feedback']}",
            "stopped: accepted after 1 of 3 iterations",
        )
    ]
    assert positions == sorted(positions), out
    assert len(server.requests) == 1 + 3 + 1  # the answer was not asked for again


def _summary(out: str) -> str:
    """The summary table and the closing line of a run's console output."""
    start = out.index(section_header("Summary"))
    end = out.index("\n", out.index("stopped: ", start))
    return out[start:end]


def test_a_resumed_run_and_its_show_print_the_same_figures(tmp_path):
    """One run, one set of figures: the resumed iteration counts its saved answer's
    seconds and tokens, and the time in all is the table's, as `show` replays it."""
    server = ScriptedOpenAI([DRAFT_1, *[Fail(503, "overloaded")] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        run_id = run_id_of(proc.stdout)
        server._replies = iter([Structured(VERDICT_1), DRAFT_2, Structured(VERDICT_2)])
        done = loop_agents("resume", run_id, env=env, cwd=tmp_path)
        shown = loop_agents("show", run_id, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert shown.returncode == 0, shown.stderr
    live, replayed = _summary(done.stdout), _summary(shown.stdout)
    assert live == replayed
    rows = [line.split("|") for line in live.splitlines() if re.match(r"^\|\s+\d", line)]
    tokens = [int(row[4]) for row in rows]
    # iteration 1: its saved answer (USAGE) and its verdict, as its record says
    record = json.loads(loop_agents("show", run_id, "--json", env=env, cwd=tmp_path).stdout)
    first = record["records"][0]
    assert tokens[0] == sum(
        first[key]
        for key in ("input_tokens", "output_tokens", "evaluator_input_tokens",
                    "evaluator_output_tokens")
    )  # fmt: skip
    assert first["input_tokens"] > 0
