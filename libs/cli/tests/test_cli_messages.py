"""What the command says: the reason a saved run failed, a suggestion for a mistyped option."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import loop_agents_cli as cli
from loop_agents_cli.console.output import section_header
from tests.cli_helpers import CLOSED_PORT_URL, clear_model_settings
from tests.scripted_openai import ScriptedOpenAI


@pytest.fixture
def settings(tmp_path, monkeypatch):
    clear_model_settings(monkeypatch, tmp_path)
    return monkeypatch


def test_show_prints_why_a_run_failed_as_show_json_does(settings, capsys):
    status = cli.main(["run", "Hi.", "--rubric", "x", "--base-url", f"{CLOSED_PORT_URL}/v1"])
    assert status == 1
    capsys.readouterr()
    assert cli.main(["runs", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)[0]["run_id"]
    assert cli.main(["show", run_id, "--json"]) == 0
    error = json.loads(capsys.readouterr().out)["error"]
    assert error.startswith(f"cannot reach the model server at {CLOSED_PORT_URL}/v1")
    assert cli.main(["show", run_id]) == 0
    out = capsys.readouterr().out
    assert "failed (error)" in out
    assert f"error: {error}" in " ".join(out.split())


def test_show_of_a_run_interrupted_before_its_first_answer_says_how_to_resume(settings, capsys):
    from loop_agents_cli.store import RunStore, store_home

    store = RunStore(store_home())
    endpoint = {"kind": "server", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    run_id = store.create("Write a limerick.", {"endpoint": endpoint}, 3)
    store.update(run_id, status="interrupted", pid=None)  # Ctrl-C before the first answer
    assert cli.main(["show", run_id]) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[0].startswith(f"run {run_id} · started ")
    assert lines[-2] == "interrupted; 0 of 3 iterations are saved. Resume the run with:"
    assert lines[-1].endswith(f" loop-agents resume {run_id}")  # with LOOP_AGENTS_HOME=...


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--rubic", "--rubric"),
        ("--max-iteratons=2", "--max-iterations"),
        ("--structured-ouput", "--structured-output"),
    ],
)
def test_a_mistyped_option_is_named_with_the_one_meant(typed, meant, settings, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "task", typed, "x"])
    assert exit_info.value.code == 2
    assert f"unrecognized arguments: {typed} x (did you mean {meant}?)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("typed", "meant"), [("runz", "runs"), ("rn", "run"), ("shwo", "show"), ("resme", "resume")]
)
def test_a_mistyped_subcommand_is_named_with_the_one_meant(typed, meant, settings, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([typed])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: '{typed}'" in err
    assert err.rstrip().endswith(f"(did you mean {meant}?)")


def test_a_subcommand_like_nothing_known_gets_no_guess(settings, capsys):
    with pytest.raises(SystemExit):
        cli.main(["frobnicate"])
    assert "did you mean" not in capsys.readouterr().err


def test_run_shows_an_unclosed_code_fence_tidied(settings, capsys):
    answer = "Here it is:\n```python\nprint('hello')"  # the closing fence never came
    server = ScriptedOpenAI([answer])
    with server.serve() as url:
        assert cli.main(["run", "Write it.", "--check", "true", "--base-url", url]) == 0
    shown = capsys.readouterr().out.split(section_header("Answer"))[1]
    assert shown.strip() == "Here it is:\nprint('hello')"
    assert cli.main(["runs", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)[0]["run_id"]
    assert cli.main(["show", run_id, "--json"]) == 0  # what is kept is the answer as written
    assert json.loads(capsys.readouterr().out)["answer"] == answer
    assert cli.main(["show", run_id]) == 0
    replayed = capsys.readouterr().out
    assert "```" not in replayed


def test_tokens_no_server_reported_are_null_not_zero(settings, capsys):
    server = ScriptedOpenAI(["An answer."])
    server._usage = lambda *args: None  # a server that reports no usage at all
    with server.serve() as url:
        assert cli.main(["run", "Write it.", "--check", "true", "--base-url", url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == {"input": None, "output": None, "cached_input": None}
    (record,) = result["records"]
    for key in ("input_tokens", "output_tokens", "evaluator_input_tokens"):
        assert record[key] is None, key
    assert cli.main(["show", result["run_id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == result["records"]
    assert cli.main(["show", result["run_id"]]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "| accepted" in line]
    assert row.split("|")[4].strip() == "-"  # the tokens column: none reported, not 0


def test_reported_tokens_stay_numbers(settings, capsys):
    server = ScriptedOpenAI(["An answer."])
    with server.serve() as url:
        assert cli.main(["run", "Write it.", "--check", "true", "--base-url", url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == {"input": 11, "output": 7, "cached_input": 0}
    (record,) = result["records"]
    assert (record["input_tokens"], record["output_tokens"]) == (11, 7)
    assert record["evaluator_input_tokens"] is None  # the check calls no model


def test_an_option_like_nothing_known_gets_no_guess(settings, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "task", "--bogus"])
    assert capsys.readouterr().err.rstrip().endswith("unrecognized arguments: --bogus")


def test_argument_errors_load_no_model_library(tmp_path):
    """Bad arguments are reported before LangChain, LangGraph or OpenAI is imported."""
    script = (
        "import sys\n"
        "from loop_agents_cli import main\n"
        "for argv in (['run', 'x'], ['run', 'x', '--rubric', 'r', '--threshold', '150'],\n"
        "             ['run', '--rubric', 'r'], ['run', 'x', '--rubric', ' '],\n"
        "             ['run', 'x', '--rubric', 'r', '--max-tokens', '0'],\n"
        "             ['run', 'x', '--check', 'pytset -q'],\n"
        "             ['run', 'x', '--rubric', 'r', '--seed', '-1'],\n"
        "             ['demo', 'song-lyrics', '--seed', '2147483648'],\n"
        "             ['show', 'abcdef12'], ['show', 'nosuchid'], ['resume', 'abcdef12'],\n"
        "             ['runs', '--limit', '0']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 2, (argv, exit.code)\n"
        "    else:\n"
        "        raise AssertionError(argv)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langchain', 'langchain_core',"
        " 'langchain_openai', 'langgraph', 'openai'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )  # httpx (0.1 s) may load: the endpoint is resolved among the checks
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LOOP_"))}
    env |= {"LOOP_AGENTS_HOME": str(tmp_path / "home"), "LOOP_AGENTS_OLLAMA_URL": "off"}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    assert "no rubric or check given" in proc.stderr
    assert "--threshold must be from 0 to 100; got 150" in proc.stderr
    assert "no saved run 'abcdef12'" in proc.stderr
    assert "--check: the check's program 'pytset' is not found on PATH" in proc.stderr
    assert "--seed must be a whole number from 0 to 2147483647; got -1" in proc.stderr
    assert "--seed must be a whole number from 0 to 2147483647; got 2147483648" in proc.stderr


def test_listings_and_setting_errors_load_no_model_library(tmp_path):
    """``runs`` (empty or not) and the errors found among the settings, as fast as --help.

    Each command runs in a fresh interpreter that records what it imported: none of them
    may have loaded a model client, LangChain or LangGraph (seconds on a loaded machine).
    """
    (tmp_path / "not-a-model.gguf").write_text("text")
    home = tmp_path / "home"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from loop_agents_cli import main\n"
        "from loop_agents_cli.store import RunStore\n"
        "argv, expected = sys.argv[1:-1], int(sys.argv[-1])\n"
        "if argv[0] == 'runs' and 'saved' in argv:\n"
        "    argv.remove('saved')\n"
        "    store = RunStore(Path(sys.argv[0]).parent / 'home')\n"
        "    for task in ('Write a limerick.', 'Name a colour.'):\n"
        "        store.update(store.create(task, {}, 3), status='finished', pid=None)\n"
        "try:\n"
        "    status = main(argv)\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        "assert status == expected, (argv, status)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langchain', 'langchain_core',"
        " 'langchain_openai', 'langgraph', 'openai'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    (tmp_path / "probe.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LOOP_"))}
    env |= {"LOOP_AGENTS_HOME": str(home), "LOOP_AGENTS_OLLAMA_URL": "off"}
    env.pop("COLUMNS", None)  # a pipe of its own width
    cases = [
        (["runs"], 0, "no saved runs"),
        (["runs", "--json"], 0, "[]"),
        (["runs", "saved"], 0, "Write a limerick."),
        (["runs", "--json"], 0, '"task": "Name a colour."'),
        (["show", "abcdef12", "--report", "page.txt"], 2, ".html"),
        (["run", "x", "--rubric", "r", "--gguf", "not-a-model.gguf"], 2, "not a GGUF model"),
        (["run", "x", "--rubric", "r", "--base-url", "notaurl"], 2, "not an http(s) URL"),
        (["demo", "song-lyrics", "--gguf", "missing.gguf"], 2, "is not a file"),
        (["demo", "song-lyrics", "--structured-output", "text"], 2, "needs structured output"),
        (["demo", "song-lyrics", "--base-url", "http://x/v1", "--gguf", "m.gguf"], 2, "choose one"),
    ]
    for argv, status, said in cases:
        proc = subprocess.run(
            [sys.executable, str(tmp_path / "probe.py"), *argv, str(status)],
            capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "HEAVY []" in proc.stderr, (argv, proc.stderr)
        assert said in proc.stdout + proc.stderr, (argv, proc.stdout, proc.stderr)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "probe.py"), "demo", "song-lyrics", "2"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env=env | {"LOOP_AGENTS_FORM_CHECK": "maybe"},
    )  # fmt: skip
    assert "HEAVY []" in proc.stderr, proc.stderr
    assert "LOOP_AGENTS_FORM_CHECK='maybe' is not a yes/no value" in proc.stderr


def test_a_copy_of_the_env_example_changes_nothing(tmp_path):
    """`.env.example` copied to `.env` sets no variable: every setting is commented out."""
    from dotenv import dotenv_values

    from tests.conftest import ROOT

    example = ROOT / ".env.example"
    assert dotenv_values(example) == {}
    text = example.read_text(encoding="utf-8")
    # every setting a user may uncomment is there, each with its explanation above it
    for name in (
        "OPENAI_API_KEY", "OPENAI_BASE_URL", "LOOP_AGENTS_GGUF", "LOOP_AGENTS_MODEL",
        "LOOP_AGENTS_STRUCTURED_OUTPUT", "LOOP_AGENTS_MAX_TOKENS", "LOOP_AGENTS_OLLAMA_URL",
        "LOOP_AGENTS_HOME", "LOOP_AGENTS_FORM_CHECK", "LOOP_AGENTS_MAX_ITERATIONS",
        "LOOP_AGENTS_THREADS", "LOOP_AGENTS_SEED",
    ):  # fmt: skip
        line = next(x for x in text.splitlines() if x.startswith(f"# {name}="))
        above = text.splitlines()[text.splitlines().index(line) - 1]
        assert above.startswith("# "), (name, above)  # its explanation
        assert "=" not in above.split()[1], (name, above)  # not another setting
