"""The eval's verdict as one self-contained HTML page (``loop-agents eval --report``).

Drawn from the JSON that ``--out`` writes, so a finished eval is drawn again with
``--from`` (docs/eval.md, "The verdict as a page", lists its sections). Keys an older
file lacks read "not recorded"; every text from the tasks, the model or the file is
escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loop_agents.runtime.numbers import finite_float
from loop_agents_checks.sandbox.text_files import utf8_text
from loop_agents_cli.console.html_page import (
    Html,
    definition_list,
    escape,
    folded,
    heading,
    join,
    number_text,
    page,
    preformatted,
    table,
    tag,
)
from loop_agents_cli.console.svg_charts import (
    PALETTE,
    Bar,
    Point,
    Series,
    interval_bars,
    line_chart,
    percent,
    scatter,
)
from loop_agents_evals.report import EvalReport, seed_text
from loop_agents_evals.stats import RETRY_KINDS_NOTE, retry_kinds
from loop_agents_evals.tasks import Task

__all__ = ["EvalFileError", "eval_page", "read_eval_json", "write_eval_page"]

NOT_RECORDED = "not recorded"

ARM_COLORS = {
    "single": "#7f7f7f",
    "loop": "#d55e00",
    "resample": "#0072b2",
    "judge-loop": "#cc79a7",
    "loop-candidates": "#009e73",
}
"""Each arm's colour in every chart of the page; other arms take the rest of `PALETTE`."""


class EvalFileError(ValueError):
    """The file is not the JSON that ``loop-agents eval --out`` writes."""


def read_eval_json(path: Path) -> dict[str, Any]:
    """Read an eval's ``--out`` JSON, checking it is one.

    Raises:
        EvalFileError: unreadable, not JSON, or without ``arms`` and ``results``.

    Example:
        ```python
        data = read_eval_json(Path("results.json"))
        ```
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvalFileError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EvalFileError(f"{str(path)!r} is not JSON ({exc})") from exc
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("arms"), dict)
        or not isinstance(data.get("results"), list)
    ):
        raise EvalFileError(
            f"{str(path)!r} is not the JSON of `loop-agents eval --out` (it has no 'arms' "
            f"object and 'results' list)"
        )
    return data


def write_eval_page(
    path: Path, data: Mapping[str, Any], *, tasks: Sequence[Task] | None = None
) -> None:
    """Write `eval_page` to ``path`` (UTF-8), whole or not at all.

    Example:
        ```python
        write_eval_page(Path("results.html"), report.to_json())
        ```
    """
    text = eval_page(data, tasks=tasks)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(utf8_text(text), encoding="utf-8")
    temporary.replace(path)


# -- reading the JSON, whatever its version ---------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _rates(value: object) -> list[float | None] | None:
    return [finite_float(v) for v in value] if isinstance(value, list) else None


def _colors(arms: Sequence[str]) -> dict[str, str]:
    spare = [c for c in PALETTE if c not in ARM_COLORS.values()] + list(PALETTE)
    colors: dict[str, str] = {}
    for arm in arms:
        colors[arm] = ARM_COLORS.get(arm) or spare[len(colors) % len(spare)]
    return colors


def _count(value: object, noun: str) -> str:
    """``1 answer``, ``3 answers``."""
    shown = number_text(value, 0)
    return f"{shown} {noun}" if shown == "1" else f"{shown} {noun}s"


def _passed(summary: Mapping[str, Any]) -> str:
    """``10/12``: tasks passed of those with a result."""
    return f"{number_text(summary.get('passed'), 0)}/{number_text(summary.get('tasks'), 0)}"


def _interval_text(low: float | None, high: float | None) -> str:
    return f"{percent(low)}–{percent(high)}" if low is not None and high is not None else "—"


def _interval(summary: Mapping[str, Any]) -> tuple[float | None, float | None]:
    ci = _list(summary.get("ci95"))
    return (finite_float(ci[0]), finite_float(ci[1])) if len(ci) == 2 else (None, None)


# -- the sections ------------------------------------------------------------------------


def _swatch(color: str) -> Html:
    return tag("span", "", class_="swatch", style=f"background:{color}")


def _arm_table(arms: Mapping[str, Mapping[str, Any]], colors: Mapping[str, str]) -> Html:
    rows = []
    for arm, summary in arms.items():
        low, high = _interval(summary)
        ci = _interval_text(low, high)
        rate = finite_float(summary.get("pass_rate"))
        rows.append(
            [
                _swatch(colors[arm]) + arm,
                _passed(summary),
                percent(rate) if rate is not None else "—",
                ci,
                number_text(summary.get("model_calls")),
                number_text(summary.get("input_tokens"), 0),
                number_text(summary.get("cached_input_tokens"), 0),
                number_text(summary.get("output_tokens"), 0),
                number_text(summary.get("seconds")),
                number_text(summary.get("answers")),
                number_text(summary.get("cut_off"), 0),
                _setting(summary, "temperature", "default", 2),
                _setting(summary, "max_tokens", "none", 0),
                number_text(summary.get("budget"), 0),
                number_text(summary.get("errors"), 0),
            ]
        )
    headers = ["arm", "passed", "rate", "95% CI", "calls", "tok in", "cached", "tok out", "s"]
    headers += ["answers", "cut off", "T", "max tokens", "budget", "err"]
    return table(headers, rows, numeric=range(1, len(headers)))


def _setting(summary: Mapping[str, Any], key: str, null: str, digits: int) -> str:
    """An arm's temperature or token cap: a number, ``null``'s word, or "—" (not recorded)."""
    if key not in summary:
        return "—"
    return null if summary[key] is None else number_text(summary[key], digits)


def _pass_rates(arms: Mapping[str, Mapping[str, Any]], colors: Mapping[str, str]) -> Html:
    bars = []
    for arm, summary in arms.items():
        low, high = _interval(summary)
        rate = finite_float(summary.get("pass_rate")) or 0.0
        note = f"{_passed(summary)} · {percent(rate)}"
        if low is not None and high is not None:
            note += f" ({percent(low)}–{percent(high)})"
        bars.append(Bar(arm, rate, low, high, colors[arm], note))
    return interval_bars(bars, title="Pass rate per arm, with its 95% interval")


def _frontier(arms: Mapping[str, Mapping[str, Any]], colors: Mapping[str, str]) -> Html:
    figures = []
    for key, label, caption in (
        ("model_calls", "model calls per task (mean)", "Pass rate against model calls"),
        ("tokens", "tokens per task (mean, in + out)", "Pass rate against tokens"),
    ):
        points = []
        for arm, summary in arms.items():
            if key == "tokens":
                tokens_in = finite_float(summary.get("input_tokens"))
                tokens_out = finite_float(summary.get("output_tokens"))
                # two finite counts can still add up to inf (1e308 + 1e308)
                cost = None if tokens_in is None or tokens_out is None else tokens_in + tokens_out
                cost = finite_float(cost)
            else:
                cost = finite_float(summary.get(key))
            rate = finite_float(summary.get("pass_rate"))
            if cost is None or rate is None:
                continue
            low, high = _interval(summary)
            points.append(Point(arm, cost, rate, colors[arm], low, high))
        if not points:
            figures.append(tag("p", f"{caption}: {NOT_RECORDED}."))
            continue
        chart = scatter(points, title=caption, x_label=label, width=500)
        figures.append(tag("figure", chart + tag("figcaption", caption)))
    return tag("div", join(figures), class_="charts")


def _by_attempt(data: Mapping[str, Any], arms: Sequence[str], colors: Mapping[str, str]) -> Html:
    curves = _mapping(data.get("by_attempt"))
    series = [
        Series(arm, colors[arm], rates)
        for arm in arms
        if (rates := _rates(curves.get(arm))) is not None and rates
    ]
    if not series:
        return tag(
            "p",
            f"Pass rate after each attempt: {NOT_RECORDED} (this file has no 'by_attempt'; "
            f"it was written by an eval that did not grade each attempt).",
        )
    chart = line_chart(
        series,
        title="Pass rate after each attempt",
        x_label="answers written (the arm stopped here)",
        y_label="pass rate",
        y_range=(0.0, 1.0),
        y_format=percent,
    )
    caption = (
        "The share of tasks whose answer passes had the arm stopped after 1, 2, ... answers; "
        "the last point is the arm's pass rate. An arm of one answer is a dotted level."
    )
    summaries = _mapping(data.get("arms"))
    opaque = [arm for arm in arms if _mapping(summaries.get(arm)).get("opaque") is True]
    if opaque:
        caption += (
            f" {', '.join(opaque)}: the agent's attempts cannot be read (it is not a loop), "
            f"so its curve is its final answer only."
        )
    return tag("figure", chart + tag("figcaption", caption))


def _comparisons(data: Mapping[str, Any]) -> Html:
    rows = [
        [
            f"{c.get('arm')} vs {c.get('baseline')}",
            number_text(c.get("won"), 0),
            number_text(c.get("lost"), 0),
            number_text(c.get("tied"), 0),
            number_text(c.get("p_value"), 3),
        ]
        for c in map(_mapping, _list(data.get("comparisons")))
    ]
    if not rows:
        return tag("p", "No paired comparison (the arms compared were not both run).")
    note = tag(
        "p",
        "Won: the first arm passed and the second failed, task by task; p: the exact "
        "two-sided sign test on won against lost.",
    )
    return note + table(
        ["comparison", "won", "lost", "tied", "sign test p"], rows, numeric=[1, 2, 3, 4]
    )


def _retry_kinds(results: Sequence[Mapping[str, Any]]) -> Html:
    """Per arm that chose its retries' kinds: the kinds by quarter of the tasks, how each did."""
    found = retry_kinds((str(r.get("arm")), r.get("transcript")) for r in results)
    if not found:
        return Html("")
    blocks = [
        heading("Retry kinds chosen"),
        tag("p", RETRY_KINDS_NOTE),
    ]
    for arm, kinds in found.items():
        rows = kinds.rows()
        blocks.append(heading(arm, level=3))
        blocks.append(table(["", *kinds.kinds], rows, numeric=range(1, len(kinds.kinds) + 1)))
    return join(blocks)


def _parts(data: Mapping[str, Any]) -> Html:
    """The pass rate of each arm on each part of the set (``by_part``), when named."""
    parts = _mapping(data.get("by_part"))
    blocks = [heading("By part")] if parts else []
    for name, arms in parts.items():
        rows = []
        for arm, summary in _mapping(arms).items():
            summary = _mapping(summary)
            rate = finite_float(summary.get("pass_rate"))
            shown = percent(rate) if rate is not None else "—"
            rows.append([arm, _passed(summary), shown, _interval_text(*_interval(summary))])
        blocks += [heading(str(name), level=3)]
        blocks += [table(["arm", "passed", "rate", "95% CI"], rows, numeric=[1, 2, 3])]
    return join(blocks)


def _recommendation(data: Mapping[str, Any]) -> Html:
    """What to use (`EvalReport.recommendation`), computed again from the file's results."""
    try:
        found = EvalReport.from_json(data).recommendation
    except (KeyError, TypeError, ValueError, ArithmeticError):  # a damaged file
        found = None
    if found is None:
        return tag("p", f"The recommendation: {NOT_RECORDED} (no readable result).")
    head = tag("p", f"{found.arm} ({found.confidence}):")
    return head + preformatted(found.code) + tag("p", found.text)


def _task_order(data: Mapping[str, Any], tasks: Sequence[Task] | None) -> list[str]:
    """The tasks with a result or an error: in the task set's order, when it is known."""
    seen: dict[str, None] = {}
    for entry in [*_list(data.get("results")), *_list(data.get("errors"))]:
        task_id = _mapping(entry).get("task_id")
        if isinstance(task_id, str):
            seen.setdefault(task_id, None)
    known = [task.id for task in tasks or () if task.id in seen]
    return known + [task_id for task_id in seen if task_id not in set(known)]


def _anchor(task_index: int, arm_index: int) -> str:
    return f"pair-{task_index}-{arm_index}"


def _outcome(result: Mapping[str, Any] | None, error: Mapping[str, Any] | None) -> tuple[str, str]:
    """The grid cell's class and text."""
    if result is not None:
        answers = number_text(result.get("iterations"), 0)
        return (
            ("pass", f"✓ {answers}") if result.get("passed") is True else ("fail", f"✗ {answers}")
        )
    if error is not None:
        return "none", "error"
    return "none", "—"


def _grid(
    order: Sequence[str],
    arms: Sequence[str],
    found: Mapping[tuple[str, str], Mapping[str, Any]],
    failed: Mapping[tuple[str, str], Mapping[str, Any]],
    colors: Mapping[str, str],
) -> Html:
    rows = []
    for t, task_id in enumerate(order):
        cells: list[object] = [tag("a", task_id, href=f"#task-{t}")]
        for a, arm in enumerate(arms):
            result, error = found.get((task_id, arm)), failed.get((task_id, arm))
            cls, text = _outcome(result, error)
            if result is None and error is None:  # not run: nothing to link to
                cells.append(tag("span", text, class_=f"outcome {cls}"))
            else:
                cells.append(tag("a", text, href=f"#{_anchor(t, a)}", class_=f"outcome {cls}"))
        rows.append(cells)
    headers = ["task", *(_swatch(colors[arm]) + arm for arm in arms)]
    note = tag(
        "p",
        "✓ passed, ✗ failed (hidden tests, or every check), with the number of answers "
        "written; error: failed every try, no result. Each cell links to the pair's answers.",
    )
    return note + table(headers, rows, class_="grid-table")


_SENT = {
    "first": "sent the task",
    "repair": "a repair: sent its earlier answers and their feedback",
    "fresh": "a fresh sample: sent the task again, without its earlier answers",
    "informed": "an informed fresh sample: sent the task and what must hold",
}
"""How the page names a transcript entry's ``sent``."""


def _attempt(step: Mapping[str, Any], candidates: bool, position: int) -> Html:
    number = step.get("iteration") if "iteration" in step else position
    head = f"Answer {number_text(number, 0)}"
    if candidates:
        head += f", candidate {number_text(step.get('candidate'), 0)}"
    sent = step.get("sent")
    if isinstance(sent, str) and sent in _SENT:
        head += f" ({_SENT[sent]})"
    badges: list[Html] = []
    for key, yes, no in (
        ("visible", "passes the visible tests/checks", "fails the visible tests/checks"),
        ("ok", "accepted by the arm's evaluator", "not accepted by the arm's evaluator"),
        ("passed", "passes the hidden grading", "fails the hidden grading"),
    ):
        if isinstance(step.get(key), bool):
            badges.append(
                tag("span", yes if step[key] else no, class_="badge " + (
                    "pass" if step[key] else "fail"))
            )  # fmt: skip
    score = finite_float(step.get("score"))
    if score is not None:
        badges.append(tag("span", f"score {score:g}", class_="badge"))
    if step.get("cut_off") is True:
        badges.append(tag("span", "cut off at the token cap", class_="badge fail"))
    parts = [tag("div", escape(head) + join(badges), class_="attempt-head")]
    answer = step.get("answer")
    if answer is None and "answer" in step:
        parts.append(tag("p", "No answer: the agent's call failed."))
    else:
        parts.append(preformatted(answer if answer is not None else ""))
    feedback = step.get("feedback")
    if isinstance(feedback, str) and feedback.strip():
        parts.append(tag("div", "Feedback sent back:", class_="note"))
        parts.append(preformatted(feedback, class_="feedback"))
    return tag("div", join(parts), class_="attempt")


def _pair(
    arm: str,
    anchor: str,
    result: Mapping[str, Any] | None,
    error: Mapping[str, Any] | None,
) -> Html:
    if result is None:
        text = f"{arm}: error ({error.get('error')})" if error is not None else f"{arm}: no result"
        return folded(text, tag("p", "No answer was recorded for this pair."), id=anchor)
    verdict = "passed" if result.get("passed") is True else "failed"
    tokens = (finite_float(result.get("input_tokens")) or 0) + (
        finite_float(result.get("output_tokens")) or 0
    )
    summary = (
        f"{arm}: {verdict} · {_count(result.get('iterations'), 'answer')} · "
        f"{_count(result.get('model_calls'), 'call')} · {tokens:,.0f} tokens · "
        f"{number_text(result.get('seconds'))} s"
    )
    transcript = [_mapping(step) for step in _list(result.get("transcript"))]
    if transcript:
        candidates = any((finite_float(s.get("candidate")) or 1) > 1 for s in transcript)
        body = join(_attempt(step, candidates, n) for n, step in enumerate(transcript, 1))
        if result.get("opaque") is True:
            body = (
                tag(
                    "p",
                    "The agent's attempts cannot be read (not a loop): its final answer only.",
                )
                + body
            )
    else:
        body = tag("p", f"The attempts: {NOT_RECORDED}; the graded answer:") + preformatted(
            result.get("answer", "")
        )
    return folded(summary, body, id=anchor)


def _answers(
    order: Sequence[str],
    arms: Sequence[str],
    found: Mapping[tuple[str, str], Mapping[str, Any]],
    failed: Mapping[tuple[str, str], Mapping[str, Any]],
    prompts: Mapping[str, str],
) -> Html:
    blocks: list[Html] = []
    for t, task_id in enumerate(order):
        blocks.append(heading(task_id, level=3, id=f"task-{t}"))
        prompt = prompts.get(task_id)
        if prompt is None:
            blocks.append(tag("p", f"The prompt: {NOT_RECORDED} (give TASKS to show it)."))
        else:
            blocks.append(preformatted(prompt))
        for a, arm in enumerate(arms):
            key = (task_id, arm)
            if key in found or key in failed:
                blocks.append(_pair(arm, _anchor(t, a), found.get(key), failed.get(key)))
    return join(blocks)


def eval_page(data: Mapping[str, Any], *, tasks: Sequence[Task] | None = None) -> str:
    """The HTML page of an eval's ``--out`` JSON (see the module docstring).

    Args:
        data: What `EvalReport.to_json` returned (or ``--out`` wrote).
        tasks: The tasks, to show each one's prompt (the JSON does not hold them).

    Example:
        ```python
        Path("results.html").write_text(eval_page(report.to_json()), encoding="utf-8")
        ```
    """
    arms_data = {str(k): _mapping(v) for k, v in _mapping(data.get("arms")).items()}
    arms = list(arms_data)
    colors = _colors(arms)
    settings = _mapping(data.get("settings"))
    results = [_mapping(r) for r in _list(data.get("results"))]
    errors = [_mapping(e) for e in _list(data.get("errors"))]
    found = {(str(r.get("task_id")), str(r.get("arm"))): r for r in results}
    failed = {(str(e.get("task_id")), str(e.get("arm"))): e for e in errors}
    order = _task_order(data, tasks)
    prompts = {task.id: task.prompt for task in tasks or ()}
    model = settings.get("model") or "a model"
    title = f"Eval: {model}"
    lead = (
        f"K = {settings.get('iterations', '?')} answers per arm · {len(order)} tasks · "
        f"{len(arms)} arms · {len(results)} results"
        + (f" · {_count(len(errors), 'pair')} without a result" if errors else "")
        + (f" · {seeds}" if (seeds := seed_text(settings)) else "")
    )
    body = [
        tag("h1", title),
        tag("p", lead, class_="lead"),
        heading("Recommendation"),
        _recommendation(data),
        heading("Pass rate per arm"),
        _pass_rates(arms_data, colors),
        _arm_table(arms_data, colors),
        tag(
            "p",
            "calls, tok in/out, cached (prompt tokens read from the server's cache) and s: "
            "means per task; answers: answers written per task; "
            "cut off: answers that ended at the token cap; T: the arm's temperature "
            "(default: the model's own); "
            "err: pairs that failed every try; —: not recorded in this file.",
        ),
        heading("Cost frontier"),
        tag(
            "p",
            "Each arm's pass rate (with its 95% interval) against what it spent; the dashed "
            "line joins the arms that no cheaper arm beats.",
        ),
        _frontier(arms_data, colors),
        heading("Pass rate after each attempt"),
        _by_attempt(data, arms, colors),
        heading("Paired comparisons"),
        _comparisons(data),
        _retry_kinds(results),
        _parts(data),
        heading("Task by task"),
        _grid(order, arms, found, failed, colors),
    ]
    if errors:
        body.append(heading("Errors"))
        body.append(
            table(
                ["task", "arm", "tries", "error"],
                [
                    [e.get("task_id"), e.get("arm"), e.get("attempts"), e.get("error")]
                    for e in errors
                ],
            )
        )
    body += [
        heading("Answers"),
        _answers(order, arms, found, failed, prompts),
        heading("Settings"),
        definition_list(settings) if settings else tag("p", NOT_RECORDED),
    ]
    if "format" in data:
        body.append(tag("p", f"JSON format {data['format']}."))
    return page(title, join(body))
