"""``loop-agents run`` answers with the best-scored attempt, the one its summary calls best."""

from __future__ import annotations

import json

import pytest

import loop_agents_cli as cli
from tests.cli_helpers import CLOSED_PORT_URL, clear_model_settings
from tests.scripted_openai import ScriptedOpenAI, Structured

DRAFTS = ["first draft", "second draft", "third draft"]
SCORES = [5, 0, 3.45]  # the first is the best, the last is not


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


def run(settings, capsys, *extra: str) -> tuple[dict, str]:
    server = ScriptedOpenAI(script())
    with server.serve() as url:
        settings.setenv("OPENAI_BASE_URL", url)
        status = cli.main(["run", "Write it.", "--rubric", "Good.", "--json", *extra])
    assert status == 0
    return json.loads(capsys.readouterr().out), url


def test_a_judged_run_answers_with_its_best_scored_attempt(settings, capsys):
    result, _ = run(settings, capsys)
    assert result["stop_reason"] == "max_iterations"
    assert [r["score"] for r in result["records"]] == SCORES
    assert (result["answer"], result["selected_iteration"], result["selected_score"]) == (
        "first draft",
        1,
        5.0,
    )
    # `show --json` and `show` say the same
    assert cli.main(["show", result["run_id"], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["answer"], shown["selected_iteration"]) == ("first draft", 1)
    assert cli.main(["show", result["run_id"]]) == 0
    out = capsys.readouterr().out
    assert "best score 5 (iteration 1)" in out
    assert out.rstrip().endswith("first draft")


def test_select_last_answers_with_the_last_attempt(settings, capsys):
    result, _ = run(settings, capsys, "--select", "last")
    assert (result["answer"], result["selected_iteration"]) == ("third draft", 3)


def test_select_is_documented_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--select {best,last}" in text
    assert "The run's answer is the best-scored one" in text


def test_a_run_saved_before_the_setting_resumes_as_it_ran():
    from loop_agents_cli.models.endpoints import EndpointSpec
    from loop_agents_cli.spec import RunSpec

    spec = RunSpec("t", "r", None, 60.0, 80.0, 3, "s", "/", EndpointSpec("openai", "m"))
    assert RunSpec.from_dict(spec.to_dict()).select == "best"
    saved = spec.to_dict()
    del saved["select"]
    assert RunSpec.from_dict(saved).select == "last"
