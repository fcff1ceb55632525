"""A run's HTML page (`loop_agents_cli.console.run_page`) and ``loop-agents show RUN_ID --report``:
the score per iteration, each iteration's answer and feedback, escaping."""

from __future__ import annotations

import json

import pytest

from loop_agents_cli import main
from loop_agents_cli.console.run_page import run_page
from tests.html_pages import Page, charts, marks, title
from tests.scripted_openai import ScriptedOpenAI, Structured

HOSTILE = "<img src=x onerror=alert(1)></pre><script>alert(2)</script>"


def result(*records: dict, selected: int | None = 2) -> dict:
    return {
        "run_id": "3f9a2c1b",
        "answer": records[-1]["answer"] if records else None,
        "stop_reason": "accepted",
        "iterations": len(records),
        "selected_iteration": selected,
        "selected_score": records[-1].get("score") if records else None,
        "records": list(records),
    }


def record(iteration: int, answer: str, score: float | None, feedback: str, stop: bool) -> dict:
    return {
        "iteration": iteration,
        "answer": answer,
        "score": score,
        "feedback": feedback,
        "stop": stop,
        "evaluator": "judge",
        "agent_seconds": 1.25,
        "evaluation_seconds": 0.5,
        "input_tokens": 11,
        "output_tokens": 7,
    }


def test_the_page_shows_the_scores_and_every_iterations_answer_and_feedback():
    text = run_page(
        result(
            record(1, "Roses are red.", 55, "Not a limerick: it needs five lines.", False),
            record(2, "A graph with a loop ...", 86, "Five lines, AABBA.", True),
        ),
        title="Run 3f9a2c1b",
        facts={"status": "finished (accepted)", "model": "scripted"},
        task="Write a limerick about LangGraph.",
        rubric="Five lines, rhymed AABBA.",
        threshold=80,
        settings={"max_iterations": 3, "endpoint": {"model": "scripted", "base_url": None}},
    )
    page = Page(text)
    for shown in (
        "Run 3f9a2c1b",
        "status: finished (accepted) · model: scripted",
        "Write a limerick about LangGraph.",
        "Five lines, rhymed AABBA.",
        "Roses are red.",
        "Not a limerick: it needs five lines.",
        "Iteration 2 · score 86 · accepted · the answer",
        "max_iterations",
    ):
        assert shown in page.text
    (chart,) = charts(text)
    assert title(chart) == "Score per iteration"
    heights = [float(m.get("cy")) for m in marks(chart, "marker")]
    assert len(heights) == 2
    assert heights[1] < heights[0]
    (threshold,) = marks(chart, "reference")
    assert heights[1] < float(threshold.get("y1")) < heights[0]  # 80: between them
    opened = [a for name, a in page.elements if name == "details" and "open" in a]
    assert [a["id"] for a in opened] == ["iteration-2"]
    assert {h[1:] for h in page.links() if h.startswith("#")} <= page.ids()


def test_a_run_without_scores_says_so_and_escapes_what_the_model_wrote():
    text = run_page(
        result(record(1, HOSTILE, None, HOSTILE, False), selected=None),
        title="Run <b>",
        task=HOSTILE,
    )
    page = Page(text)
    assert "No scores: the evaluator gave none" in page.text
    assert page.text.count(HOSTILE) == 4  # task, answer, feedback, final answer
    assert "script" not in page.tags()
    assert "img" not in page.tags()
    assert not charts(text)


@pytest.mark.slow
def test_show_report_writes_a_saved_runs_page(tmp_path, monkeypatch, capsys):
    """The real command: a run saved, then ``show --report`` (and with ``--json``)."""
    server = ScriptedOpenAI(
        [
            "Roses are red.",
            Structured({"score": 55, "feedback": "Not a limerick."}),
            "A graph with a loop",
            Structured({"score": 86, "feedback": "Good."}),
        ]
    )
    for name in ("OPENAI_API_KEY", "LOOP_AGENTS_MODEL", "LOOP_AGENTS_GGUF"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOOP_AGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with server.serve() as url:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        assert main(["run", "Write a limerick.", "--rubric", "Five lines.", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    page_path = tmp_path / "run.html"
    assert main(["show", run_id[:4], "--report", str(page_path)]) == 0
    assert capsys.readouterr().out == f"Report: {page_path}\n"
    page = Page(page_path.read_text(encoding="utf-8"))
    assert f"Run {run_id}" in page.text
    assert "Not a limerick." in page.text
    assert "Iteration 2 · score 86 · accepted · the answer" in page.text
    assert "threshold 80" in page.text
    assert main(["show", run_id, "--json", "--report", str(page_path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["run_id"] == run_id
    assert err == f"Report: {page_path}\n"
    with pytest.raises(SystemExit):
        main(["show", run_id, "--report", str(tmp_path / "run.json")])
    assert "give a file name ending in .html" in capsys.readouterr().err


def test_an_answer_the_cap_stopped_reads_not_accepted_as_the_console_says():
    """Feedback is sent only when another attempt follows: the last answer of a loop
    stopped by its cap (or a failure) was not accepted, and its feedback went nowhere."""
    capped = result(
        record(1, "Roses are red.", 55, "Not a limerick.", False),
        record(2, "Roses are blue.", 60, "Still not one.", False),
        selected=2,
    ) | {"stop_reason": "max_iterations"}
    page = Page(run_page(capped, title="Run 3f9a2c1b"))
    assert "Iteration 1 · score 55 · feedback sent" in page.text
    assert "Iteration 2 · score 60 · not accepted · the answer" in page.text
    assert "Iteration 2 · score 60 · feedback sent" not in page.text
    assert "not accepted · the answer" in page.text  # the table's verdict column too
    # a run that failed in the next attempt had sent the feedback: it made 3 attempts
    failed = capped | {"stop_reason": "error", "iterations": 3}
    assert "Iteration 2 · score 60 · feedback sent" in Page(run_page(failed, title="x")).text
