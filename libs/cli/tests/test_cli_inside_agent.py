"""``loop-agents run --inside-agent``: the loop inside create_agent (LoopMiddleware), saved.

The same scripted server answers a run around the agent and a run inside it: the model
and the judge are asked the same things, and the command prints, saves, shows and
resumes both alike.
"""

from __future__ import annotations

import json

import pytest

import loop_agents_cli as cli
from tests.cli_helpers import CLOSED_PORT_URL, clear_model_settings
from tests.scripted_openai import Fail, ScriptedOpenAI, Structured

DRAFTS = ["first draft", "second draft", "third draft"]
SCORES = [60, 90, 70]


def script() -> list[object]:
    return [
        item
        for draft, score in zip(DRAFTS, SCORES, strict=True)
        for item in (draft, Structured({"feedback": f"scored {score}", "score": score}))
    ]


@pytest.fixture
def settings(tmp_path, monkeypatch):
    clear_model_settings(monkeypatch, tmp_path, ollama=CLOSED_PORT_URL)
    return monkeypatch


def run(settings, capsys, server: ScriptedOpenAI, *extra: str) -> tuple[int, dict]:
    with server.serve() as url:
        settings.setenv("OPENAI_BASE_URL", url)
        status = cli.main(
            ["run", "Write it.", "--rubric", "Good.", "--threshold", "95", "--json", *extra]
        )
    return status, json.loads(capsys.readouterr().out)


def comparable(result: dict) -> dict:
    return {
        "answer": result["answer"],
        "stop_reason": result["stop_reason"],
        "iterations": result["iterations"],
        "selected": (result["selected_iteration"], result["selected_score"]),
        "records": [
            (r["iteration"], r["answer"], r["score"], r["stop"]) for r in result["records"]
        ],
    }


def test_a_run_inside_the_agent_prints_and_saves_what_a_run_around_it_does(settings, capsys):
    around_server, inside_server = ScriptedOpenAI(script()), ScriptedOpenAI(script())
    status, around = run(settings, capsys, around_server)
    assert status == 0
    status, inside = run(settings, capsys, inside_server, "--inside-agent")
    assert status == 0
    assert comparable(inside) == comparable(around)
    assert inside["answer"] == "second draft"  # the best-scored one
    assert [r["messages"] for r in inside_server.requests] == [
        r["messages"] for r in around_server.requests
    ]
    # show reads the saved agent's state back in the loop's form
    assert cli.main(["show", inside["run_id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == inside
    assert cli.main(["show", inside["run_id"]]) == 0
    assert "best score 90 (iteration 2)" in capsys.readouterr().out
    assert cli.main(["runs", "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert (runs[inside["run_id"]]["stop_reason"], runs[inside["run_id"]]["iterations"]) == (
        "max_iterations",
        3,
    )


def test_a_run_inside_the_agent_resumes_after_a_server_error(settings, capsys):
    server = ScriptedOpenAI([*script()[:2], *[Fail(503, "overloaded")] * 3])
    with server.serve() as url:
        settings.setenv("OPENAI_BASE_URL", url)
        command = ["run", "Write it.", "--rubric", "Good.", "--threshold", "95"]
        assert cli.main([*command, "--json", "--inside-agent"]) == 1
        failed = json.loads(capsys.readouterr().out)
        assert failed["stop_reason"] == "error"
        assert [r["answer"] for r in failed["records"]] == ["first draft"]
        server._replies = iter(script()[2:])
        assert cli.main(["resume", failed["run_id"], "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert [r["answer"] for r in resumed["records"]] == DRAFTS
    assert resumed["answer"] == "second draft"
    drafts_asked = [r for r in server.requests if "response_format" not in r]
    assert len(drafts_asked) == 1 + 3 + 2  # the first draft, three failed asks, two more


def test_the_setting_is_saved_and_an_older_run_reads_as_around():
    from loop_agents_cli.models.endpoints import EndpointSpec
    from loop_agents_cli.spec import RunSpec

    spec = RunSpec(
        "t", "r", None, 60.0, 80.0, 3, "s", "/", EndpointSpec("openai", "m"), inside=True
    )
    assert RunSpec.from_dict(spec.to_dict()).inside is True
    saved = spec.to_dict()
    del saved["inside"]
    assert RunSpec.from_dict(saved).inside is False
    with pytest.raises(Exception, match="damaged"):
        RunSpec.from_dict({**spec.to_dict(), "inside": "yes"})


def test_the_console_shows_a_run_inside_the_agent_as_it_streams(settings, capsys):
    server = ScriptedOpenAI(script())
    with server.serve() as url:
        settings.setenv("OPENAI_BASE_URL", url)
        command = ["run", "Write it.", "--rubric", "Good.", "--threshold", "95", "--inside-agent"]
        assert cli.main(command) == 0
    out = capsys.readouterr().out
    for draft in DRAFTS:
        assert draft in out  # each attempt's tokens, as the model streamed them
    assert "iteration 3 of 3" in out
    assert "score 90" in out
    assert "stopped: max_iterations after 3 of 3 iterations" in out
    assert out.rstrip().endswith("second draft")
