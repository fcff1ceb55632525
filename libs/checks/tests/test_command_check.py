"""`command_check`: a shell command judges each answer, in a loop and from the command line."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import all_of, create_loop_agent
from loop_agents.loop.state import LoopContext
from loop_agents_checks import command_check
from loop_agents_checks.command import answer_for_check, command_problem, without_secrets
from tests.cli_helpers import cli_env, loop_agents
from tests.fakes import FakeChat, review
from tests.scripted_openai import ScriptedOpenAI, Structured


def context(text: str, iteration: int = 1) -> LoopContext:
    return {
        "iteration": iteration,
        "init_messages": [HumanMessage("task")],
        "last_response": AIMessage(text),
        "feedback": [],
        "messages": [HumanMessage("task"), AIMessage(text)],
    }


def fenced(language: str, body: str) -> str:
    return f"Here it is:\n```{language}\n{body}```\nHope it helps."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (fenced("python", "print(42)\n"), ("print(42)\n", ".py")),
        (fenced("", "echo hi\n"), ("echo hi\n", ".txt")),
        (fenced("Bash", "echo hi\n"), ("echo hi\n", ".sh")),
        ("~~~js\nx()\n~~~\n", ("x()\n", ".js")),
        ("````python\n```inner```\n````\n", ("```inner```\n", ".py")),
        ("```python\nprint(1)\n", ("print(1)\n", ".py")),  # cut off: runs to the end
        ("no code at all", ("no code at all", ".txt")),
        (
            fenced("py", "a\n") + fenced("py", "b\n"),
            (fenced("py", "a\n") + fenced("py", "b\n"), ".txt"),
        ),
    ],
)
def test_the_answer_the_check_sees(text, expected):
    assert answer_for_check(text) == expected


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_exit_status_zero_accepts_and_the_file_is_named_both_ways(mode, tmp_path):
    check = command_check(
        'test "$(cat {answer_file})" = 42 && test "$LOOP_AGENTS_ANSWER" = {answer_file}',
        cwd=tmp_path,
    )
    call = check.invoke if mode == "sync" else (lambda c: asyncio.run(check.ainvoke(c)))
    assert call(context(fenced("", "42\n")))["stop"] is True
    verdict = call(context("41"))
    assert verdict["stop"] is False
    assert "failed with exit status 1" in verdict["feedback"]
    assert "It printed nothing." in verdict["feedback"]


def test_the_output_is_the_feedback_and_its_tail_is_capped(tmp_path):
    check = command_check(
        'python3 -c \'import sys; print("x" * 5000); sys.exit("boom: 41 != 42")\' ',
        max_feedback_chars=100,
    )
    feedback = check.invoke(context("whatever"))["feedback"]
    assert "failed with exit status 1" in feedback
    assert feedback.endswith("boom: 41 != 42")
    assert "earlier characters cut" in feedback
    assert len(feedback) < 300


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_command_past_its_time_is_killed_with_its_whole_group(mode, tmp_path):
    marker = tmp_path / "pid"
    # a child in the background that would outlive the shell, holding its output open
    check = command_check(f"sleep 300 & echo $! > {marker}; wait", timeout=0.5)
    started = time.monotonic()
    if mode == "sync":
        verdict = check.invoke(context("x"))
    else:
        verdict = asyncio.run(check.ainvoke(context("x")))
    assert time.monotonic() - started < 10
    assert verdict["stop"] is False
    assert "did not finish within 0.5 s and was stopped" in verdict["feedback"]
    assert _gone(int(marker.read_text())), "the background child survived the check"


def test_children_left_behind_by_a_passing_check_are_killed(tmp_path):
    marker = tmp_path / "pid"
    check = command_check(f"sleep 300 > /dev/null 2>&1 & echo $! > {marker}")
    started = time.monotonic()
    assert check.invoke(context("x"))["stop"] is True
    assert time.monotonic() - started < 10
    assert _gone(int(marker.read_text()))


def _gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (waiting up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_signal_death_is_reported(tmp_path):
    verdict = command_check("kill -SEGV $$").invoke(context("x"))
    assert "was killed by SIGSEGV" in verdict["feedback"]


def test_secrets_are_not_passed_to_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    out = tmp_path / "env.json"
    check = command_check(
        f"python3 -c 'import json, os; print(json.dumps(dict(os.environ)))' > {out}"
    )
    assert check.invoke(context("x"))["stop"] is True
    seen = json.loads(out.read_text())
    assert "OPENAI_API_KEY" not in seen
    assert "GITHUB_TOKEN" not in seen
    assert seen["TOKENIZERS_PARALLELISM"] == "false"
    assert seen["LOOP_AGENTS_ANSWER"].endswith("answer.txt")
    assert without_secrets({"AWS_SECRET_ACCESS_KEY": "x", "PATH": "/bin"}) == {"PATH": "/bin"}
    # an explicit environment is used as given
    check = command_check(f"env > {out}", env={"PATH": os.environ["PATH"], "GITHUB_TOKEN": "t"})
    check.invoke(context("x"))
    assert "GITHUB_TOKEN=t" in out.read_text()


def test_hostile_answers_are_only_data(tmp_path):
    marker = tmp_path / "pwned"
    text = f"$(touch {marker}) `touch {marker}` ; touch {marker}"
    check = command_check("cat {answer_file} > /dev/null")
    assert check.invoke(context(text))["stop"] is True
    assert not marker.exists()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "the check command is empty"),
        ("   ", "the check command is empty"),
        ("pytset -q", "'pytset' is not found on PATH"),
        ("./nope.sh", "is not an executable file"),
        ("echo 'open", "does not parse as shell words"),
    ],
)
def test_unusable_commands_are_refused_at_once(command, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        command_check(command, cwd=tmp_path)


@pytest.mark.parametrize(
    "command",
    ["python3 -V", "FOO=1 true", "cd /tmp && ls", "{answer_file}", "(true)", "$SHELL -c true"],
)
def test_usable_commands_pass(command):
    assert command_problem(command) is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"timeout": 0}, ValueError),
        ({"timeout": float("inf")}, ValueError),
        ({"timeout": True}, ValueError),
        ({"timeout": 10**400}, ValueError),  # not an OverflowError
        ({"max_feedback_chars": 0}, ValueError),
        ({"max_feedback_chars": "10"}, TypeError),
        ({"cwd": "/nonexistent/folder"}, ValueError),
        ({"name": ""}, TypeError),
    ],
)
def test_bad_options(options, error):
    with pytest.raises(error) as raised:
        command_check("true", **options)
    assert len(str(raised.value)) < 300, "the error repeats a huge value in full"


def test_in_a_loop_with_a_judge_the_judge_sees_only_passing_answers(tmp_path):
    coder = FakeChat.of(fenced("python", "print(41)\n"), fenced("python", "print(42)\n"))
    calls: list[int] = []

    def judge(context_: LoopContext):
        calls.append(context_["iteration"])
        return {"stop": True, "score": 90.0, "feedback": "Fine."}

    tests = command_check("python3 {answer_file} | grep -qx 42", cwd=tmp_path)
    loop = create_loop_agent(coder, all_of(tests, judge), 3)
    result = loop.invoke({"messages": [HumanMessage("Print 42.")]})
    assert result["stop_reason"] == "accepted"
    assert result["iteration"] == 2
    assert calls == [2]
    assert "failed with exit status 1" in result["records"][0]["feedback"]


# -- from the command line --------------------------------------------------------------------

PYTHON_41 = fenced("python", "print(41)\n")
PYTHON_42 = fenced("python", "print(42)\n")


@pytest.mark.slow
def test_check_until_the_tests_pass(tmp_path):
    server = ScriptedOpenAI([PYTHON_41, PYTHON_42])
    (tmp_path / "expect.txt").write_text("42\n")
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "Write a Python program that prints the answer.",
            "--check", 'python3 "$LOOP_AGENTS_ANSWER" | diff - expect.txt', "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["stop_reason"], result["iterations"], result["answer"]) == (
        "accepted",
        2,
        PYTHON_42,
    )
    first = result["records"][0]
    assert first["evaluator"] == "check"
    assert first["stop"] is False
    assert "failed with exit status 1" in first["feedback"]
    assert "< 41" in first["feedback"]  # diff's output
    assert "> 42" in first["feedback"]
    # the model read the check's output as its feedback
    assert server.requests[1]["messages"][-1]["content"] == review(first["feedback"], 1)
    assert len(server.requests) == 2  # no judge


@pytest.mark.slow
def test_check_then_rubric_the_judge_sees_only_answers_that_pass(tmp_path):
    server = ScriptedOpenAI(
        [PYTHON_41, PYTHON_42, Structured({"score": 88, "feedback": "Clear and correct."})]
    )
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "Print the answer in Python.", "--rubric", "Short and correct.",
            "--check", "python3 {answer_file} | grep -qx 42", "--check-timeout", "20", "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "accepted"
    assert [r["decided_by"] for r in result["records"]] == [["check"], ["check", "judge"]]
    assert result["selected_score"] == 88.0
    assert len(server.requests) == 3  # coder, coder, judge: answer 1 never reached the judge
    assert server.requests[2]["messages"][-1]["content"] == PYTHON_42


@pytest.mark.slow
def test_check_timeout_is_feedback(tmp_path):
    server = ScriptedOpenAI(["slow answer"])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "t", "--check", "sleep 30", "--check-timeout", "0.5", "--max-iterations", "1",
            "--json", env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "max_iterations"
    assert "did not finish within 0.5 s" in result["records"][0]["feedback"]


def test_the_placeholder_works_bare_and_in_double_quotes(tmp_path):
    check = command_check('test -f {answer_file} && test -f "{answer_file}"')
    assert check.invoke(context("x"))["stop"] is True


def test_a_folder_with_spaces_is_quoted(tmp_path, monkeypatch):
    spaced = tmp_path / "a folder; rm -rf x"
    spaced.mkdir()
    monkeypatch.setenv("TMPDIR", str(spaced))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    check = command_check("test -f {answer_file}")
    assert check.invoke(context("x"))["stop"] is True


# -- issue "Hardening, round 3", items 6-8 ------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("ends", ["passes", "times out"])
def test_a_child_in_a_new_session_does_not_outlive_the_check(mode, ends, tmp_path):
    """Item 6: ``setsid`` took a child out of the check's process group, and it lived on
    (docs/cli.md promises that no process of a check outlives it)."""
    marker = tmp_path / "pid"
    command = f"setsid sh -c 'echo $$ > {marker}; exec sleep 300' > /dev/null 2>&1 &"
    command += " sleep 0.3" if ends == "passes" else " sleep 30"
    check = command_check(command, timeout=60 if ends == "passes" else 1)
    verdict = (
        check.invoke(context("x")) if mode == "sync" else asyncio.run(check.ainvoke(context("x")))
    )
    assert verdict["stop"] is (ends == "passes")
    assert _gone(int(marker.read_text())), "the child in a new session survived the check"


def test_cancelling_an_async_check_kills_what_it_started(tmp_path):
    marker = tmp_path / "pid"
    check = command_check(f"setsid sh -c 'echo $$ > {marker}; exec sleep 300' & sleep 300")

    async def cancel_it() -> None:
        task = asyncio.ensure_future(check.ainvoke(context("x")))
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    assert _gone(int(marker.read_text()))


GROWTH = """\
import json, resource, sys, tempfile
from langchain_core.messages import AIMessage, HumanMessage
from loop_agents_checks import command_check

check = command_check("head -c 200000000 /dev/zero | tr '\\\\0' x; echo; echo THE END; exit 1")
context = {"iteration": 1, "init_messages": [HumanMessage("t")], "last_response":
    AIMessage("x"), "feedback": [], "messages": [HumanMessage("t"), AIMessage("x")]}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
verdict = check.invoke(context)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "feedback": verdict["feedback"]}))
"""


def test_a_check_that_prints_hundreds_of_megabytes_keeps_only_its_tail(tmp_path):
    """Item 7: the output went to a file in /tmp and was then read whole (a 300 MB print
    grew the caller by 558 MiB, and took as much again on disk)."""
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", GROWTH], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["grew_kib"] < 64 * 1024, report["grew_kib"]  # not the 200 MB printed
    assert report["feedback"].endswith("THE END")
    assert "earlier output cut" in report["feedback"]
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing left


@pytest.mark.parametrize(
    "command",
    [
        'grep -qx 42 "{answer_file}"',
        "grep -qx 42 {answer_file}",
        "grep -qx 42 '{answer_file}'",
        'sh -c "grep -qx 42 \\"\\$LOOP_AGENTS_ANSWER\\"" && cat "{answer_file}" > /dev/null',
    ],
    ids=["double quotes", "bare", "single quotes", "after escaped quotes"],
)
@pytest.mark.parametrize("folder", ["a folder", 'it\'s $HOME `x` "q" \\ b'])
def test_the_placeholder_works_quoted_and_unquoted_in_any_temporary_folder(
    command, folder, tmp_path, monkeypatch
):
    """Item 8: ``"{answer_file}"`` in the user's own double quotes broke when the path
    needed quoting (a space in TMPDIR): every answer failed."""
    import tempfile

    spaced = tmp_path / folder
    spaced.mkdir()
    monkeypatch.setenv("TMPDIR", str(spaced))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    verdict = command_check(command).invoke(context("42"))
    assert verdict["stop"] is True, verdict["feedback"]
    assert command_check(command).invoke(context("41"))["stop"] is False
