"""Failures mid-run, in a subprocess: one line naming the server and a fix, the result kept.

Each test runs the real command against a scripted OpenAI-compatible server on loopback
(or a closed port) and checks the exit status, the one-line error (no traceback), what
is kept of the run, and how many calls the server saw.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from loop_agents_cli.console.loop_console import section_header
from tests.cli_helpers import CLOSED_PORT_URL, Running, cli_env, loop_agents
from tests.fakes import CI_1
from tests.scripted_openai import Drop, Hang, Raw, ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT_1 = "Roses are red,\nviolets are blue."
VERDICT_1 = {"score": 55, "feedback": "Not a limerick: it needs five lines."}
UNREACHABLE = f"{CLOSED_PORT_URL}/v1"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


# -- the demo follows run's failure and judge rules -----------------------------------------


def test_the_demo_names_a_server_it_cannot_reach_and_exits_1(tmp_path):
    env = cli_env(tmp_path / "home", OPENAI_BASE_URL=UNREACHABLE, LOOP_AGENTS_OLLAMA_URL="off")
    proc = loop_agents("demo", "song-lyrics", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"loop-agents: error: cannot reach the model server at {UNREACHABLE}: ")
    assert "[Errno 111]" in line  # why: nothing listens there
    # what it has so far: the summary and the verdict, with nothing counted as done
    assert "stopped: error after 0 of 3 iterations" in proc.stdout
    assert "stopped: an error stopped the run" in proc.stdout
    assert section_header("Agent") not in proc.stdout


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(Structured("not json"), id="unparseable"),
        pytest.param(Structured({"score": 2018.73, "feedback": "绝妙！"}), id="off-scale"),
        pytest.param(Structured('{"score": NaN, "feedback": "绝妙！"}'), id="nan"),
    ],
)
def test_the_demo_reviewer_has_runs_judge_policy(review, tmp_path):
    # asked again twice, then the loop stops: judge_invalid, exit 1, the draft kept
    server = ScriptedOpenAI([CI_1, *[review] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("demo", "song-lyrics", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(
        "loop-agents: error: the judge gave no usable verdict at iteration 1 after 3 attempts"
    )
    assert "retries" not in line
    assert "`method`" not in line
    assert "--model" in line
    assert len(server.requests) == 4  # the composer, then the reviewer three times
    assert "Your verdict could not be used" in server.requests[2]["messages"][-1]["content"]
    out = proc.stdout
    assert "stopped: judge_invalid after 1 of 3 iterations" in out
    assert "stopped: the reviewer gave no usable review (score from 0 to 100)" in out
    assert f"{section_header('Answer')}\n{CI_1}\n" in out  # the draft is not lost


def test_ctrl_c_stops_the_demo_at_once(tmp_path):
    server = ScriptedOpenAI([Hang("【相见欢】")])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        running = Running("demo", "song-lyrics", env=env, cwd=tmp_path)
        try:
            assert server.hanging.wait(60), "the composer was never asked"
            running.still_waiting()
            status, _seconds, _out, err = running.interrupt()
        finally:
            running.close()
        # the composer's call never ends: exiting at all means the demo did not wait for it
        assert server.abandoned.wait(10)
    assert status == 130, err
    assert "Traceback" not in err
    assert "loop-agents: interrupted (a demo is not saved: nothing to resume)" in err


SLOW_EXIT = """\
import time


class _SlowExit:
    def __del__(self):  # runs in the interpreter's exit, when no other thread may run
        time.sleep(60)


_slow_exit = _SlowExit()
"""


@pytest.mark.parametrize("command", ["run", "demo"])
def test_ctrl_c_does_not_wait_for_the_interpreters_exit(command, tmp_path):
    # an interpreter's exit can take seconds on a loaded machine (garbage, modules); here a
    # sitecustomize makes it take a minute: after Ctrl-C the command must not wait for it
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW_EXIT)
    server = ScriptedOpenAI([Hang("A graph")])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url, PYTHONPATH=str(tmp_path / "slow"))
        args = [TASK, "--rubric", RUBRIC] if command == "run" else ["song-lyrics"]
        running = Running(command, *args, env=env, cwd=tmp_path)
        try:
            assert server.hanging.wait(60), "the model was never asked"
            running.still_waiting()
            status, seconds, _out, err = running.interrupt(timeout=90)
        finally:
            running.close()
    assert status == 130, err
    assert seconds < 30, f"the command waited {seconds:.1f} s for the interpreter's exit"


@pytest.mark.parametrize("command", ["run", "demo"])
def test_ctrl_c_ends_the_command_even_when_closing_the_endpoint_never_ends(command, tmp_path):
    """The bound of Ctrl-C does not depend on how long the rest takes to wind down.

    Here closing the endpoint (stopping a bundled server, closing the HTTP clients) never
    ends: the command still exits 130, having said so, when its deadline comes.
    """
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import threading\n"
        "from loop_agents_cli.models import endpoints\n"
        "endpoints.Endpoint.close = lambda self: threading.Event().wait()\n"
    )
    server = ScriptedOpenAI([Hang("【相见欢】" if command == "demo" else "Roses")])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
        args = ["demo", "song-lyrics"] if command == "demo" else ["run", TASK, "--rubric", RUBRIC]
        running = Running(*args, env=env, cwd=tmp_path)
        try:
            assert server.hanging.wait(60), "the model was never asked"
            running.still_waiting()
            status, _seconds, _out, err = running.interrupt(timeout=60)
        finally:
            running.close()
    assert status == 130, err
    assert "interrupted" in err
    assert "Traceback" not in err


# -- run: verdicts that are never valid -----------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "problem", "fix"),
    [
        ('{"score": NaN, "feedback": "x"}', "'score' is nan, not a finite number", "--model"),
        ('{"score": 1e400, "feedback": "x"}', "'score' is inf, not a finite number", "--model"),
        ('{"score": "Infinity", "feedback": "x"}', "not a finite number", "--model"),
        ("not json", "the reply did not parse", "--structured-output function_calling"),
    ],
    ids=["nan", "1e400", "Infinity", "unparseable"],
)
def test_a_verdict_that_is_never_valid_stops_the_run(verdict, problem, fix, tmp_path):
    server = ScriptedOpenAI([DRAFT_1, *[Structured(verdict)] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["stop_reason"], result["answer"], result["records"]) == (
        "judge_invalid",
        DRAFT_1,  # iteration 1's answer is kept
        [],
    )
    error = result["error"]
    assert error.startswith("the judge gave no usable verdict at iteration 1 after 3 attempts")
    assert problem in error
    # what the command offers, not the library's parameters, and short
    assert fix in error
    assert "retries" not in error
    assert "`method`" not in error
    assert len(error) < 350, error
    assert error_lines(proc.stderr) == [f"loop-agents: error: {error}"]
    assert "Traceback" not in proc.stderr
    assert len(server.requests) == 4  # re-asked twice


def test_the_console_counts_the_answered_iterations(tmp_path):
    # the judge never gives a valid verdict: one answer came, the console says so
    server = ScriptedOpenAI([DRAFT_1, *[Structured({"score": 2018.73, "feedback": "!"})] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert "stopped: judge_invalid after 1 of 3 iterations" in proc.stdout
        # a server that cannot be reached: no iteration was done, as --json says
        json_proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--base-url", UNREACHABLE, "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--base-url", UNREACHABLE, env=env, cwd=tmp_path
        )
    assert json.loads(json_proc.stdout)["iterations"] == 0
    assert proc.returncode == 1
    assert "stopped: error after 0 of 3 iterations" in proc.stdout


# -- run: servers that answer badly or go away ----------------------------------------------


def test_a_server_without_json_schema_is_judged_with_function_calling(tmp_path):
    # llama.cpp refuses response_format json_schema (HTTP 500): the judge moves on, once
    verdict = {"score": 90, "feedback": "Five lines, AABBA."}
    server = ScriptedOpenAI([DRAFT_1, Structured(verdict)], llama_cpp=True)
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stop_reason"] == "accepted"
    assert proc.stderr.count("the judge now uses function_calling: pass --structured-output") == 1
    assert "UserWarning" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "tools" in server.requests[-1]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"", "application/json"), (b"<html>Not here</html>", "text/html")],
    ids=["empty", "html"],
)
def test_a_reply_that_is_not_json_names_the_server(body, content_type, tmp_path):
    server = ScriptedOpenAI([Raw(body, content_type)])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error.startswith(f"the model server at {url} sent a reply that is not valid JSON")
    assert "JSONDecodeError" not in error
    assert error_lines(proc.stderr) == [f"loop-agents: error: {error}"]
    assert "Traceback" not in proc.stderr


def test_an_empty_stream_names_the_server(tmp_path):
    server = ScriptedOpenAI([Raw(b"", "text/event-stream")])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"loop-agents: error: the model server at {url} sent an empty reply")
    assert "Traceback" not in proc.stderr


def test_a_connection_lost_mid_run_keeps_the_completed_records(tmp_path):
    # iteration 2's answer: the server closes the connection before answering (the
    # client tries three times)
    server = ScriptedOpenAI([DRAFT_1, Structured(VERDICT_1), *[Drop()] * 3])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["stop_reason"], result["answer"]) == ("error", DRAFT_1)
    assert [(r["iteration"], r["answer"], r["score"]) for r in result["records"]] == [
        (1, DRAFT_1, 55.0)
    ]
    assert result["error"].startswith(f"the connection to the model server at {url} was lost")
    assert error_lines(proc.stderr) == [f"loop-agents: error: {result['error']}"]
    assert "Traceback" not in proc.stderr
    assert len(server.requests) == 5


def test_a_connection_lost_mid_stream_keeps_the_completed_records(tmp_path):
    server = ScriptedOpenAI([DRAFT_1, Structured(VERDICT_1), Drop("A graph with a loop")])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        (line,) = error_lines(proc.stderr)
        assert line.startswith(
            f"loop-agents: error: the connection to the model server at {url} was lost: "
            "peer closed connection without sending complete message body"
        )
        assert "Traceback" not in proc.stderr
        assert "stopped: error after 1 of 3 iterations" in proc.stdout
        assert f"{section_header('Answer')}\n{DRAFT_1}\n" in proc.stdout
        run_id = proc.stdout.split("run ", 1)[1].split(" ", 1)[0]
        shown = json.loads(loop_agents("show", run_id, "--json", env=env, cwd=tmp_path).stdout)
    assert [r["answer"] for r in shown["records"]] == [DRAFT_1]
    assert shown["error"] == line.removeprefix("loop-agents: error: ")
    assert len(server.requests) == 3  # a stream cut off is not asked again


def test_sigint_during_a_call_that_is_not_streamed(tmp_path):
    # --json: the call is not streamed; the server answers nothing, Ctrl-C ends the wait
    server = ScriptedOpenAI([Hang()])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        running = Running("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        try:
            assert server.hanging.wait(60)
            running.still_waiting()
            status, _seconds, out, err = running.interrupt(signal.SIGINT)
        finally:
            running.close()
        # the call never ends: exiting at all means the command did not wait for it
        assert server.abandoned.wait(10)
    assert status == 130, err
    assert out == ""
    assert "interrupted; 0 of 3 iterations are saved" in err
