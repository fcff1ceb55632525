"""One loop run as a self-contained HTML page (``loop-agents show RUN_ID --report``).

Drawn from the run's result as ``run --json`` prints it: the score per iteration, a table
of the iterations, each answer and its feedback, the final answer and the settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loop_agents.runtime.numbers import finite_float
from loop_agents_cli.console.html_page import (
    Html,
    definition_list,
    folded,
    heading,
    join,
    number_text,
    page,
    preformatted,
    table,
    tag,
)
from loop_agents_cli.console.svg_charts import PALETTE, Series, line_chart


def _records(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    records = result.get("records")
    return [r for r in records if isinstance(r, Mapping)] if isinstance(records, list) else []


def _scores(records: Sequence[Mapping[str, Any]], threshold: float | None) -> Html:
    scores = [finite_float(r.get("score")) for r in records]
    if not any(s is not None for s in scores):
        return tag(
            "p",
            "No scores: the evaluator gave none (a check command, or a rule, accepts or "
            "refuses without a score).",
        )
    known = [s for s in scores if s is not None] + ([threshold] if threshold is not None else [])
    scale = (0.0, 100.0) if min(known) >= 0 and max(known) <= 100 else None
    chart = line_chart(
        [Series("score", PALETTE[0], scores)],
        title="Score per iteration",
        x_label="iteration",
        y_label="score",
        y_range=scale,
        reference=(threshold, f"threshold {threshold:g}") if threshold is not None else None,
    )
    return tag("figure", chart + tag("figcaption", "The evaluator's score of each answer."))


def _verdict(record: Mapping[str, Any], made: object) -> str:
    """What became of an answer: accepted, its feedback sent, or not accepted.

    Feedback was sent when another attempt followed; when none did (the cap, a stop rule,
    a failure) the answer was not accepted, as the console says it. ``made`` is how many
    attempts the loop made (its ``iteration``).
    """
    if record.get("stop") is True:
        return "accepted"
    iteration = record.get("iteration")
    later = isinstance(iteration, int) and isinstance(made, int) and iteration < made
    return "feedback sent" if later else "not accepted"


def _table(records: Sequence[Mapping[str, Any]], selected: object, made: object) -> Html:
    rows = []
    for record in records:
        iteration = record.get("iteration")
        verdict = _verdict(record, made)
        if iteration == selected:
            verdict += " · the answer"
        rows.append(
            [
                tag(
                    "a",
                    number_text(iteration, None),
                    href=f"#iteration-{number_text(iteration, None)}",
                ),
                number_text(record.get("score"), None),
                verdict,
                record.get("evaluator", "—"),
                number_text(record.get("agent_seconds")),
                number_text(record.get("evaluation_seconds")),
                number_text(record.get("input_tokens"), None),
                number_text(record.get("output_tokens"), None),
                number_text(record.get("evaluator_input_tokens"), None),
                number_text(record.get("evaluator_output_tokens"), None),
            ]
        )
    headers = ["iteration", "score", "verdict", "evaluator", "agent s", "judge s"]
    headers += ["tok in", "tok out", "judge tok in", "judge tok out"]
    return table(headers, rows, numeric=[0, 1, 4, 5, 6, 7, 8, 9])


def _iterations(records: Sequence[Mapping[str, Any]], selected: object, made: object) -> Html:
    blocks = []
    for record in records:
        iteration = number_text(record.get("iteration"), None)
        score = finite_float(record.get("score"))
        summary = f"Iteration {iteration}"
        if score is not None:
            summary += f" · score {score:g}"
        summary += f" · {_verdict(record, made)}"
        if record.get("iteration") == selected:
            summary += " · the answer"
        parts = [preformatted(record.get("answer") or "")]
        feedback = record.get("feedback")
        if isinstance(feedback, str) and feedback.strip():
            parts.append(tag("div", "Feedback:", class_="note"))
            parts.append(preformatted(feedback, class_="feedback"))
        blocks.append(
            folded(
                summary,
                join(parts),
                id=f"iteration-{iteration}",
                open=record.get("iteration") == selected,
            )
        )
    return join(blocks)


def run_page(
    result: Mapping[str, Any],
    *,
    title: str,
    facts: Mapping[str, object] | None = None,
    task: str | None = None,
    rubric: str | None = None,
    threshold: float | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The HTML page of one run (``result``: as `result_json` makes it).

    ``facts`` make the line under the ``title``; ``threshold`` is drawn on the score chart.

    Example:
        ```python
        Path("run.html").write_text(run_page(result, title="Run 3f9a2c1b"), encoding="utf-8")
        ```
    """
    records = _records(result)
    selected = result.get("selected_iteration")
    lead = " · ".join(f"{k}: {v}" for k, v in (facts or {}).items() if v not in (None, ""))
    body: list[object] = [tag("h1", title), tag("p", lead, class_="lead")]
    summary = {
        "stop reason": result.get("stop_reason") or "—",
        "iterations": number_text(result.get("iterations"), None),
        "the answer": f"iteration {selected}" if selected is not None else "—",
        "its score": number_text(result.get("selected_score"), None),
    }
    body.append(definition_list(summary))
    if isinstance(result.get("error"), str):
        body += [heading("Error"), preformatted(result["error"], class_="feedback")]
    if task is not None:
        body += [heading("Task"), preformatted(task)]
    if rubric:
        body += [heading("Rubric"), preformatted(rubric)]
    body += [
        heading("Score per iteration"),
        _scores(records, threshold),
        _table(records, selected, result.get("iterations")),
        heading("Iterations"),
        _iterations(records, selected, result.get("iterations"))
        if records
        else tag("p", "No iteration was recorded."),
        heading("Answer"),
        preformatted(result.get("answer") or "(none)"),
    ]
    if settings:
        body += [heading("Settings"), definition_list(settings)]
    return page(title, join(body))
