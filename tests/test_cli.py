"""The loop-agents command: run, demo, --json, --help and exit codes, in a subprocess.

The command talks to a scripted OpenAI-compatible server on loopback (real HTTP, real
``ChatOpenAI``), found through ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loop_agents import cli
from loop_agents.console import section_header
from tests.conftest import env_without_model_settings
from tests.fakes import review
from tests.scripted_openai import ScriptedOpenAI, Structured

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT_1 = "Roses are red,\nviolets are blue."
DRAFT_2 = "A graph with a loop\nwent round in a hoop\nit judged every try\nand asked itself why\nthen shipped the best scoop."
VERDICT_1 = {"score": 55, "feedback": "Not a limerick: it needs five lines."}
VERDICT_2 = {"score": 86, "feedback": "Five lines, AABBA, light."}
SCRIPT = [DRAFT_1, Structured(VERDICT_1), DRAFT_2, Structured(VERDICT_2)]
SCRIPT_BIN = Path(sys.executable).parent / "loop-agents"


def clean_env() -> dict[str, str]:
    return env_without_model_settings()


def loop_agents(
    *args: str, env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loop_agents.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_run_json(tmp_path):
    server = ScriptedOpenAI(SCRIPT)
    with server.serve() as base_url:
        env = clean_env() | {"OPENAI_BASE_URL": base_url, "LOOP_AGENTS_MODEL": "scripted"}
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout is the JSON document and nothing else
    assert result["answer"] == DRAFT_2
    assert result["stop_reason"] == "accepted"
    assert result["iterations"] == 2
    assert (result["selected_iteration"], result["selected_score"]) == (2, 86.0)
    records = result["records"]
    assert [
        (r["iteration"], r["answer"], r["score"], r["stop"], r["feedback"], r["evaluator"])
        for r in records
    ] == [
        (
            1,
            DRAFT_1,
            55.0,
            False,
            f"{VERDICT_1['feedback']}\n\nScore: 55/100 (needed: 80)",
            "judge",
        ),
        (2, DRAFT_2, 86.0, True, f"{VERDICT_2['feedback']}\n\nScore: 86/100 (needed: 80)", "judge"),
    ]
    for record in records:
        assert (record["input_tokens"], record["output_tokens"]) == (11, 7)  # the server's usage
        assert record["agent_seconds"] >= 0
        assert record["evaluation_seconds"] >= 0

    # composer, judge, composer, judge; the judge sees the rubric, the task and the draft
    composer_1, judge_1, composer_2, judge_2 = server.requests
    assert {r["model"] for r in server.requests} == {"scripted"}
    assert [m["role"] for m in composer_1["messages"]] == ["system", "user"]
    assert composer_1["messages"][1]["content"] == TASK
    assert [m["content"] for m in composer_2["messages"][1:]] == [
        TASK,
        DRAFT_1,
        review(f"{VERDICT_1['feedback']}\n\nScore: 55/100 (needed: 80)", 1),
    ]
    for request, draft in ((judge_1, DRAFT_1), (judge_2, DRAFT_2)):
        system, user, answer = request["messages"]
        assert RUBRIC in system["content"]
        assert (user["content"], answer["content"]) == (TASK, draft)
        assert request["response_format"]["type"] == "json_schema"


@pytest.mark.slow
def test_run_streams_to_the_console_from_files(tmp_path):
    (tmp_path / "rubric.md").write_text(RUBRIC, encoding="utf-8")
    (tmp_path / ".env").write_text("LOOP_AGENTS_STRUCTURED_OUTPUT=function_calling\n")
    server = ScriptedOpenAI(SCRIPT)
    with server.serve() as base_url:
        env = clean_env() | {"OPENAI_BASE_URL": base_url}
        proc = loop_agents(
            "run",
            "--task-file",
            "-",
            "--rubric-file",
            "rubric.md",
            "--threshold",
            "85",
            env=env,
            cwd=tmp_path,
            stdin=TASK + "\n",
        )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out  # a pipe: plain lines
    positions = [
        out.index(text)
        for text in (
            "iteration 1 of 3 · ",
            f"{section_header('Agent')}\n{DRAFT_1}\n",
            f"{section_header('Evaluator')}\n{VERDICT_1['feedback']}\n",
            "score 55 · another try (judge)",
            "iteration 2 of 3 · ",
            f"{section_header('Agent')}\n{DRAFT_2}\n",
            "score 86 · accepted (judge)",
            section_header("Summary"),
            "stopped: accepted after 2 of 3 iterations · best score 86 (iteration 2)",
            f"{section_header('Answer')}\n{DRAFT_2}\n",
        )
    ]
    assert positions == sorted(positions)
    assert server.requests[1]["tools"][0]["function"]["name"] == "Verdict"  # from .env
    assert server.requests[0]["messages"][1]["content"] == TASK  # stdin, stripped


@pytest.mark.slow
def test_demo_song_lyrics(tmp_path):
    server = ScriptedOpenAI(
        [
            "【相见欢】\n当年初见斜阳，过横塘。",
            Structured({"score": 70, "feedback": "格律功夫明显欠缺。"}),
            "【相见欢】\n当年一笑相逢。过淇东。",
            Structured({"score": 81, "feedback": "情绪线索尚明。"}),
        ]
    )
    with server.serve() as base_url:
        env = clean_env() | {"OPENAI_BASE_URL": base_url}
        proc = loop_agents("demo", "song-lyrics", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(section_header("Agent")) == 2
    assert f"{section_header('Evaluator')}\n格律功夫明显欠缺。\n\n综合得分：70\n" in proc.stdout
    assert "scores: #1: 70, #2: 81" in proc.stdout
    assert len(server.requests) == 4


@pytest.mark.slow
def test_judge_out_of_range_exits_1(tmp_path):
    # the judge is asked again twice, then the run fails: a broken judge never passes
    server = ScriptedOpenAI([DRAFT_1, *[Structured({"score": 160, "feedback": "Superb!"})] * 3])
    with server.serve() as base_url:
        env = clean_env() | {"OPENAI_BASE_URL": base_url}
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("loop-agents run: error: JudgeError: ")
    assert "no usable verdict at iteration 1 after 3 attempts" in proc.stderr
    assert "the score 160 is outside the scale 0-100" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(server.requests) == 4


def test_bad_arguments_exit_2_in_a_subprocess(tmp_path):
    env = clean_env() | {"OPENAI_API_KEY": "sk-test"}
    proc = loop_agents("run", TASK, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: loop-agents run")
    assert (
        "loop-agents run: error: no rubric given: pass it as text or with --rubric-file FILE"
        in (proc.stderr)
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--rubric", "x"], "no task given: pass it as text or with --task-file FILE"),
        (
            ["run", "t", "--task-file", "t.md", "--rubric", "x"],
            "as text or with --task-file, not both",
        ),
        (["run", "t", "--rubric-file", "missing.md"], "cannot read the rubric from 'missing.md'"),
        (["run", "t", "--rubric", "  "], "the rubric is empty"),
        (
            ["run", "t", "--rubric", "x", "--threshold", "101"],
            "--threshold must be from 0 to 100; got 101",
        ),
        (
            ["run", "t", "--rubric", "x", "--max-iterations", "0"],
            "--max-iterations must be >= 1; got 0",
        ),
        (["run", "t", "--rubric", "x", "--max-iterations", "two"], "invalid int value: 'two'"),
        (["run", "t", "--rubric", "x", "--max-tokens", "0"], "--max-tokens must be >= 1; got 0"),
        (
            ["run", "t", "--rubric", "x", "--env-file", "nope.env"],
            "--env-file 'nope.env' is not a file",
        ),
        (["run", "t", "--rubric", "x", "--structured-output", "xml"], "invalid choice: 'xml'"),
        (["demo", "haiku"], "invalid choice: 'haiku'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_say_what_is_wrong(args, message, tmp_path, monkeypatch, capsys):
    for key in list(os.environ):
        if key.startswith(("OPENAI_", "LOOP_AGENTS_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_no_endpoint_configured(tmp_path, monkeypatch, capsys):
    from loop_agents import local_model

    for key in list(os.environ):
        if key.startswith(("OPENAI_", "LOOP_AGENTS_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    # the demo falls back to the bundled offline model; here it is not installed
    monkeypatch.setattr(local_model, "is_installed", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "song-lyrics"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no model endpoint is configured and the offline local model is not installed" in err
    assert "OPENAI_API_KEY" in err
    assert "OPENAI_BASE_URL" in err
    assert local_model.install_command() in err

    # `run` has no offline fallback: it says what to set
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "a task", "--rubric", "a rubric"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no model endpoint is configured: set OPENAI_API_KEY" in err


def test_bad_setting_in_env(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("LOOP_AGENTS_MAX_TOKENS", "lots")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "t", "--rubric", "x"])
    assert exit_info.value.code == 2
    assert "LOOP_AGENTS_MAX_TOKENS='lots'" in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--task-file",
        "--rubric",
        "--rubric-file",
        "--threshold",
        "--max-iterations",
        "--system",
        "--json",
        "--env-file",
        "--model",
        "--base-url",
        "--structured-output",
        "--max-tokens",
        "OPENAI_API_KEY",
        '"stop_reason"',
    ):
        assert option in out, option


def test_console_script_is_installed(tmp_path):
    assert SCRIPT_BIN.exists(), "install the package (pip install -e .) to get loop-agents"
    proc = subprocess.run(
        [str(SCRIPT_BIN), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0
    assert "demo" in proc.stdout
    assert "run" in proc.stdout
