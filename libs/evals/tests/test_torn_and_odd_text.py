"""An eval journal cut anywhere by a kill, and model text that UTF-8 cannot hold.

- A last journal line cut short (even inside a multi-byte character) is dropped and its
  pair runs again; the lines before it are kept.
- A lone surrogate in an answer (``"smile \\ud83d"``: half an emoji, as a server can send
  it) is kept and graded: by ``eval`` (journal, results, page), by ``run --check``
  (the answer file), by a files check, and printed by the command.
"""

from __future__ import annotations

import json
import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents_checks.agent_files import files_check
from loop_agents_checks.command import command_check
from loop_agents_checks.sandbox.text_files import json_text, utf8_text, write_utf8
from loop_agents_cli import main
from loop_agents_evals import arun_eval
from loop_agents_evals.journal import journal_path
from loop_agents_evals.tasks import parse_task
from tests.cli_helpers import cli_env, loop_agents
from tests.eval_models import ReactiveOpenAI, user_text
from tests.scripted_openai import ScriptedOpenAI

HALF_EMOJI = "smile \ud83d"


def context(answer: str, **extra: object) -> dict:
    """What an evaluator is given after ``answer``."""
    return {
        "iteration": 1,
        "init_messages": [HumanMessage("task")],
        "last_response": AIMessage(answer),
        "feedback": [],
        "messages": [HumanMessage("task"), AIMessage(answer)],
        "agent_state": {},
    } | extra


def tasks(count: int) -> list:
    return [
        parse_task(
            {
                "id": f"t{i}",
                "kind": "instructions",
                "prompt": f"Task t{i}: answer in lower case.",
                "checks": [{"check": "case", "case": "lower"}],
            }
        )
        for i in range(count)
    ]


# -- a torn journal ---------------------------------------------------------------------


async def test_a_last_line_cut_inside_a_character_is_dropped_and_its_pair_runs_again(tmp_path):
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(lambda body: f"好的 {user_text(body)[:7].lower()}")
    await arun_eval(tasks(3), server.chat_model(), arms=["single"], out=out)
    path = journal_path(out)
    whole = path.read_bytes()
    lines = whole.split(b"\n")[:-1]
    assert len(lines) == 4  # the settings, then one line per task
    last = lines[-1]
    cut = last.index("好".encode()) + 1  # inside the three bytes of 好
    torn_task = json.loads(last)["task_id"]
    path.write_bytes(whole[: len(whole) - len(last) - 1] + last[:cut])

    server.requests.clear()
    report = await arun_eval(tasks(3), server.chat_model(), arms=["single"], out=out)

    assert [user_text(b) for b in server.requests] == [f"Task {torn_task}: answer in lower case."]
    assert len(report.results) == 3
    assert all(r.passed for r in report.results)
    kept = path.read_bytes().decode("utf-8").splitlines()  # readable again, whole lines only
    assert len(kept) == 4
    assert sorted(json.loads(line)["task_id"] for line in kept[1:]) == ["t0", "t1", "t2"]
    # a third run finds every pair and calls nothing
    server.requests.clear()
    await arun_eval(tasks(3), server.chat_model(), arms=["single"], out=out)
    assert server.requests == []


@pytest.mark.parametrize("keep", [1, 10, 40])
async def test_a_torn_first_line_starts_the_journal_again(tmp_path, keep):
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(lambda body: "ok")
    await arun_eval(tasks(1), server.chat_model(), arms=["single"], out=out)
    path = journal_path(out)
    path.write_bytes(path.read_bytes()[:keep])  # killed while writing the settings line
    server.requests.clear()
    report = await arun_eval(tasks(1), server.chat_model(), arms=["single"], out=out)
    assert len(server.requests) == 1
    assert report.results[0].passed
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2


async def test_a_file_without_a_newline_that_is_no_journal_is_left_alone(tmp_path):
    out = tmp_path / "r.json"
    path = journal_path(out)
    path.write_text("my notes", encoding="utf-8")
    with pytest.raises(ValueError, match="is not an eval journal"):
        await arun_eval(tasks(1), ReactiveOpenAI(lambda b: "ok").chat_model(), out=out)
    assert path.read_text(encoding="utf-8") == "my notes"


# -- a lone surrogate in an answer -----------------------------------------------------------


def test_the_helpers_keep_json_exact_and_files_writable(tmp_path):
    assert utf8_text(HALF_EMOJI) == "smile \ufffd"
    assert utf8_text("相见欢 🙂") == "相见欢 🙂"
    line = json_text({"answer": f"{HALF_EMOJI} 相见欢"})
    assert "相见欢" in line  # other characters as they are
    assert json.loads(line.encode("utf-8")) == {"answer": f"{HALF_EMOJI} 相见欢"}
    write_utf8(tmp_path / "a.txt", HALF_EMOJI)
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "smile \ufffd"


async def test_an_eval_keeps_and_grades_an_answer_with_a_lone_surrogate(tmp_path):
    out = tmp_path / "r.json"
    server = ReactiveOpenAI(lambda body: HALF_EMOJI)
    report = await arun_eval(tasks(2), server.chat_model(), arms=["single", "loop"], out=out)
    assert report.errors == []
    assert len(report.results) == 4
    assert all(r.passed for r in report.results)  # graded: lower case
    assert {r.answer for r in report.results} == {HALF_EMOJI}
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert {r["answer"] for r in saved["results"]} == {HALF_EMOJI}
    # the journal reads back exactly: a resumed run makes no call and has the same answers
    server.requests.clear()
    again = await arun_eval(tasks(2), server.chat_model(), arms=["single", "loop"], out=out)
    assert server.requests == []
    assert {r.answer for r in again.results} == {HALF_EMOJI}


def test_eval_from_the_command_line_writes_the_results_and_the_page(tmp_path, capsys, monkeypatch):
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json_text(t.to_json()) + "\n" for t in tasks(2)), encoding="utf-8")
    for name in ("OPENAI_API_KEY", "LOOP_AGENTS_MODEL", "LOOP_AGENTS_GGUF", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    server = ReactiveOpenAI(lambda body: HALF_EMOJI)
    with server.serve() as url:
        status = main(
            ["eval", str(task_file), "--arms", "single,loop", "--iterations", "2",
             "--out", str(out), "--report", str(page), "--base-url", url]
        )  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert json.loads(out.read_text(encoding="utf-8"))["arms"]["loop"]["passed"] == 2
    assert "smile \ufffd" in page.read_text(encoding="utf-8")


def test_a_command_check_grades_an_answer_with_a_lone_surrogate(tmp_path):
    check = command_check("grep -q '^smile' {answer_file}")
    verdict = check.invoke(context(HALF_EMOJI))
    assert verdict["stop"] is True, verdict


def test_a_files_check_tests_files_with_a_lone_surrogate():
    check = files_check(
        "from pathlib import Path\n"
        "def test_it():\n"
        "    assert Path('notes.md').read_text(encoding='utf-8') == 'smile \\ufffd'\n"
    )
    verdict = check.invoke(context("done", agent_state={"files": {"/notes.md": HALF_EMOJI}}))
    assert verdict["stop"] is True, verdict["feedback"]


@pytest.mark.parametrize("as_json", [True, False])
def test_run_with_a_check_keeps_and_grades_it_and_prints_it(tmp_path, as_json):
    server = ScriptedOpenAI([HALF_EMOJI])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "Smile.", "--check", "grep -q '^smile' {answer_file}",
            "--max-iterations", "1", *(["--json"] if as_json else []), env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    if as_json:
        result = json.loads(proc.stdout)
        assert result["stop_reason"] == "accepted"
        assert result["answer"].startswith("smile ")
    else:
        assert "stopped: accepted" in proc.stdout
        # the streamed answer, with the half character shown as U+FFFD
        assert re.search(r"smile \ufffd", proc.stdout), proc.stdout


@pytest.mark.parametrize("inside", [False, True])
def test_the_next_request_after_an_answer_with_a_lone_surrogate_is_sent(tmp_path, inside):
    """The answer is rejected, so the next request quotes it: the text sent is encodable
    (the half character replaced) and the run goes on to its cap; the answer is kept."""
    server = ScriptedOpenAI([HALF_EMOJI, "smile again"])
    with server.serve() as url:
        env = cli_env(tmp_path / "home", OPENAI_BASE_URL=url)
        proc = loop_agents(
            "run", "Smile.", "--check", "false", "--max-iterations", "2", "--json",
            *(["--inside-agent"] if inside else []), env=env, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "max_iterations"
    assert len(server.requests) == 2
    sent = json.dumps(server.requests[1], ensure_ascii=False)
    assert "smile \ufffd" in sent  # what the model was sent: encodable


def test_what_the_loop_stores_keeps_the_answer_as_it_was():
    from loop_agents import create_loop_agent

    seen: list[str] = []

    def agent(messages):
        for message in messages:
            message.text.encode("utf-8")  # an HTTP client's encoder: fails on a surrogate
        seen.append(messages[-1].text)
        return HALF_EMOJI

    def reject(context):
        return {"stop": False, "feedback": "again"}

    result = create_loop_agent(agent, reject, 2).invoke({"messages": [HumanMessage("Smile.")]})
    assert result["iteration"] == 2
    assert [m.text for m in result["messages"] if m.type == "ai"] == [HALF_EMOJI, HALF_EMOJI]
