"""A closed stdout (``loop-agents show ID | head -1``) ends the command quietly, status 141.

Real shell pipelines: the reader goes away while the command still writes (an output
larger than a pipe's buffer, or a reader that reads nothing). The command must end as a
command killed by SIGPIPE does (128 + 13), with nothing on stderr: no traceback, no
"Exception ignored" at the interpreter's exit, and not 1 ("the run failed").
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from loop_agents_cli import main
from tests.cli_helpers import COMMAND, clear_model_settings, cli_env
from tests.conftest import ROOT
from tests.scripted_openai import ScriptedOpenAI, Structured

LONG_ANSWER = "\n".join(f"line {i}: a limerick that goes on and on" for i in range(4000))
"""An answer larger than a pipe's buffer (64 KiB): `show` is still writing when `head` exits."""


def pipeline(
    arguments: list[str], reader: str, home: Path, cwd: Path, *, buffered: bool = False
) -> tuple[int, str]:
    """``loop-agents ARGUMENTS | READER`` in bash: the command's exit status and stderr."""
    command = shlex.join([*COMMAND, *arguments])
    script = f'{command} | {reader}; exit "${{PIPESTATUS[0]}}"'
    env = cli_env(home, PYTHONUNBUFFERED="" if buffered else "1")
    done = subprocess.run(
        ["bash", "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return done.returncode, done.stderr


@pytest.fixture
def saved_run(tmp_path, monkeypatch) -> str:
    """The id of a saved run whose answer is larger than a pipe's buffer."""
    clear_model_settings(monkeypatch, tmp_path)
    server = ScriptedOpenAI([LONG_ANSWER, Structured({"score": 90, "feedback": "Long."})])
    with server.serve() as url:
        status = main(["run", "Write.", "--rubric", "Any.", "--base-url", url, "--json"])
    assert status == 0
    from loop_agents_cli.store import saved_runs

    return saved_runs().list()[0].run_id


@pytest.mark.parametrize(
    ("arguments", "reader"),
    [
        (["show", "{run}"], "head -1"),
        (["show", "{run}", "--json"], "head -1"),
        (["runs"], "true"),
        (["runs", "--json"], "true"),
        (["--help"], "true"),
        (["run", "--help"], "true"),
    ],
    ids=["show", "show --json", "runs", "runs --json", "--help", "run --help"],
)
def test_a_closed_stdout_ends_the_command_quietly_with_status_141(
    arguments, reader, saved_run, tmp_path
):
    arguments = [word.format(run=saved_run) for word in arguments]
    status, stderr = pipeline(arguments, reader, tmp_path / "home", tmp_path)
    assert status == 141, stderr
    assert stderr == ""


@pytest.mark.parametrize("arguments", [["--help"], ["runs"]])
def test_a_buffered_stdout_that_is_closed_ends_quietly_too(arguments, tmp_path):
    # the output waits in Python's buffer until the end: the last flush meets the closed pipe
    status, stderr = pipeline(arguments, "true", tmp_path / "home", tmp_path, buffered=True)
    assert status == 141, stderr
    assert stderr == ""


def test_eval_from_a_results_file_ends_quietly_too(tmp_path):
    pytest.importorskip("loop_agents_evals")
    example = ROOT / "docs" / "images" / "eval-example.json"
    status, stderr = pipeline(["eval", "--from", str(example)], "true", tmp_path, tmp_path)
    assert status == 141, stderr
    assert stderr == ""
