"""The eval's HTML page (`loop_agents_evals.html_report`) and ``eval --report`` / ``--from``:
what the page shows for a result with per-attempt data and for an older one without,
that its charts are drawn from the numbers, that every link has its target, and that no
text from a task, a model or the file can become markup."""

from __future__ import annotations

import copy
import json
import math

import pytest

from loop_agents_cli import main
from loop_agents_cli.console.svg_charts import SCALE_LIMIT, nice_ticks
from loop_agents_evals.html_report import EvalFileError, eval_page, read_eval_json
from loop_agents_evals.tasks import load_tasks
from tests.conftest import ROOT
from tests.eval_models import ReactiveOpenAI, after_feedback
from tests.html_pages import Page, charts, marks, title

EXAMPLE = ROOT / "docs" / "images" / "eval-example.json"
HOSTILE = {
    "task": "</script><script>alert('task')</script>",
    "answer": "<img src=x onerror=alert('answer')>",
    "feedback": "\"><svg onload=alert('feedback')>",
    "model": "<style>body{display:none}</style>",
    "arm": "loop<b onmouseover=alert(1)>",
}


@pytest.fixture(scope="module")
def example() -> dict:
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def older(data: dict) -> dict:
    """The same result as the first version of ``--out`` wrote it (no per-attempt data)."""
    old = copy.deepcopy(data)
    for key in ("format", "by_attempt", "parts"):
        old.pop(key)
    for summary in old["arms"].values():
        for key in ("answers", "cut_off", "cut_off_rate", "temperature", "max_tokens", "budget"):
            summary.pop(key)
    for result in old["results"]:
        for key in ("part", "cut_off", "by_attempt", "transcript"):
            result.pop(key)
    old["settings"] = {k: old["settings"][k] for k in ("iterations", "temperature", "model")}
    return old


def test_the_page_shows_every_section_of_the_verdict(example):
    text = eval_page(example, tasks=load_tasks("instructions"))
    page = Page(text)
    for heading in (
        "Pass rate per arm",
        "Cost frontier",
        "Pass rate after each attempt",
        "Paired comparisons",
        "Task by task",
        "Errors",
        "Answers",
        "Settings",
    ):
        assert heading in page.text
    assert "Eval: an illustrative model (example data)" in page.text
    assert "10/12 · 83% (55%–95%)" in page.text  # loop: passed/tasks, rate, interval
    assert "loop vs resample" in page.text
    assert "APIError: Error code: 500 - the model crashed" in page.text
    # the prompts come from the tasks; the settings from the file
    assert "Write a haiku about a lighthouse" in page.text
    assert "judge_threshold" in page.text
    assert page.text.count("not recorded") == 1  # the table's note: "—: not recorded"
    # no script, nothing fetched: the style is inline, the charts are SVG
    assert "script" not in page.tags()
    assert not any(attrs.get("src") for _, attrs in page.elements)
    policy = [a["content"] for n, a in page.elements if a.get("http-equiv")]
    assert policy == ["default-src 'none'; style-src 'unsafe-inline'; img-src data:"]


def test_the_charts_are_drawn_from_the_numbers(example):
    drawn = {title(chart): chart for chart in charts(eval_page(example))}
    assert set(drawn) == {
        "Pass rate per arm, with its 95% interval",
        "Pass rate against model calls",
        "Pass rate against tokens",
        "Pass rate after each attempt",
    }
    bars = marks(drawn["Pass rate per arm, with its 95% interval"], "bar")
    widths = [float(bar.get("width")) for bar in bars]
    rates = [arm["pass_rate"] for arm in example["arms"].values()]
    assert len(widths) == 4
    assert all(w > 0 for w in widths)
    for width, rate in zip(widths, rates, strict=True):
        assert width / widths[0] == pytest.approx(rate / rates[0], rel=0.01)
    assert len(marks(drawn["Pass rate per arm, with its 95% interval"], "interval")) == 4
    for cost in ("Pass rate against model calls", "Pass rate against tokens"):
        assert len(marks(drawn[cost], "point")) == 4
        assert len(marks(drawn[cost], "frontier")) == 1  # single -> loop: nothing beats them
    curves = drawn["Pass rate after each attempt"]
    assert len(marks(curves, "line")) == 4  # loop, resample, judge-loop; single's level
    assert len(marks(curves, "level")) == 1
    assert len(marks(curves, "marker")) == 1 + 3 + 3 + 3
    # a higher rate is drawn higher (a smaller y)
    loop_markers = [float(m.get("cy")) for m in marks(curves, "marker")[1:4]]
    assert loop_markers == sorted(loop_markers, reverse=True)


def test_every_cell_of_the_grid_links_to_the_pairs_answers(example):
    page = Page(eval_page(example))
    links = [href for href in page.links() if href.startswith("#pair-")]
    assert len(links) == 12 * 4
    assert {href[1:] for href in page.links() if href.startswith("#")} <= page.ids()
    text = page.text
    # every attempt of a pair, with the feedback it got
    loop = next(r for r in example["results"] if r["arm"] == "loop" and r["iterations"] > 1)
    for step in loop["transcript"]:
        assert step["answer"] in text
    assert loop["transcript"][0]["feedback"] in text
    assert "cut off at the token cap" in text
    assert "score " not in text  # the example's attempts have no score
    judged = copy.deepcopy(example)
    judged["results"][0]["transcript"][0]["score"] = 62.5  # a judge's, as a later shape has
    assert "score 62.5" in Page(eval_page(judged)).text


def test_an_older_result_says_what_it_did_not_record(example):
    text = eval_page(older(example))
    page = Page(text)
    assert "Pass rate after each attempt: not recorded" in page.text
    assert "The attempts: not recorded; the graded answer:" in page.text
    assert "The prompt: not recorded (give TASKS to show it)." in page.text
    assert {title(c) for c in charts(text)} == {
        "Pass rate per arm, with its 95% interval",
        "Pass rate against model calls",
        "Pass rate against tokens",
    }
    # the graded answers are still there, and the grid still links to them
    assert all(r["answer"] in page.text for r in example["results"])
    assert {href[1:] for href in page.links() if href.startswith("#")} <= page.ids()


def test_text_from_the_tasks_the_model_and_the_file_stays_text(example, tmp_path):
    data = copy.deepcopy(example)
    data["settings"]["model"] = HOSTILE["model"]
    data["arms"][HOSTILE["arm"]] = data["arms"].pop("loop")
    data["by_attempt"][HOSTILE["arm"]] = data["by_attempt"].pop("loop")
    for result in data["results"]:
        if result["task_id"] == "lighthouse-haiku":
            result["task_id"] = HOSTILE["task"]
        if result["arm"] == "loop":
            result["arm"] = HOSTILE["arm"]
        result["answer"] = HOSTILE["answer"]
        for step in result["transcript"]:
            step["answer"], step["feedback"] = HOSTILE["answer"], HOSTILE["feedback"]
    data["errors"][0]["error"] = HOSTILE["answer"]
    tasks = tmp_path / "tasks.jsonl"
    task = {"id": HOSTILE["task"], "kind": "instructions", "prompt": HOSTILE["answer"]}
    tasks.write_text(json.dumps(task | {"checks": [{"check": "no_commas"}]}) + "\n")
    text = eval_page(data, tasks=load_tasks(str(tasks)))
    page = Page(text)
    assert page.tags() <= {
        "html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p",
        "div", "span", "a", "table", "thead", "tbody", "tr", "th", "td", "details",
        "summary", "pre", "figure", "figcaption", "dl", "dt", "dd", "svg", "text", "rect",
        "line", "g", "circle", "polyline",
    }  # fmt: skip
    assert not [
        (name, key) for name, attrs in page.elements for key in attrs if key.startswith("on")
    ]
    assert page.text.count("</style>") == 0 or HOSTILE["model"] in page.text
    for hostile in HOSTILE.values():
        assert hostile in page.text  # shown, as the text it is
    assert "<img" not in text
    assert "<script" not in text
    for chart in charts(text):  # still well-formed XML, the arm's name escaped inside
        assert chart.tag.endswith("svg")


def test_read_eval_json_refuses_what_is_not_an_eval_result(tmp_path):
    with pytest.raises(EvalFileError, match=r"cannot read .*missing\.json"):
        read_eval_json(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(EvalFileError, match=r"broken\.json' is not JSON"):
        read_eval_json(broken)
    other = tmp_path / "other.json"
    other.write_text('{"answer": "x", "records": []}', encoding="utf-8")
    with pytest.raises(EvalFileError, match=r"not the JSON of `loop-agents eval --out`"):
        read_eval_json(other)


# -- the command -----------------------------------------------------------------------------


def test_eval_from_draws_a_finished_evals_page_and_runs_nothing(tmp_path, capsys):
    page = tmp_path / "pages" / "eval.html"
    assert main(["eval", "instructions", "--from", str(EXAMPLE), "--report", str(page)]) == 0
    assert capsys.readouterr().out == f"Report: {page}\n"
    drawn = Page(page.read_text(encoding="utf-8"))
    assert "Write a haiku about a lighthouse" in drawn.text  # TASKS gave the prompts
    assert main(["eval", "--from", str(EXAMPLE), "--report", str(page)]) == 0
    assert "The prompt: not recorded" in Page(page.read_text(encoding="utf-8")).text


def test_eval_from_without_a_page_prints_the_tables_again(capsys):
    assert main(["eval", "--from", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "Pass rate by attempt" in out
    assert "After the first answer" in out  # computed anew from the results
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--from", str(EXAMPLE), "--limit", "2"])
    assert exited.value.code == 2
    assert "runs nothing: drop --limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "E", "--report", "p.html", "--limit", "2", "--base-url", "http://x"],
         "runs nothing: drop --limit, --base-url"),
        (["--from", "E", "--report", "p.json"], "give a file name ending in .html"),
        (["--from", "E", "--report", "E"], "give a file name ending in .html"),
        (["--from", "missing.json", "--report", "p.html"], "cannot read 'missing.json'"),
        (["no-such-tasks.jsonl", "--from", "E", "--report", "p.html"], "no-such-tasks.jsonl"),
        ([], "give TASKS (a task file, or a bundled set: code, instructions), or --from"),
        (["instructions", "--out", "r.html", "--report", "r.html"],
         "--report and --out name the same file"),
        (["instructions", "--report", "r.txt"], "give a file name ending in .html"),
    ],
)  # fmt: skip
def test_report_arguments_are_checked_before_anything_runs(
    args, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    args = [str(EXAMPLE) if a == "E" else a for a in args]
    with pytest.raises(SystemExit) as exited:
        main(["eval", *args])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_eval_report_writes_the_page_of_the_eval_it_ran(tmp_path, capsys, monkeypatch):
    """``eval TASKS --out --report`` on a scripted server: the page of what was run, with
    the tasks' prompts; a second run (resumed, no model call) draws it again."""
    tasks = tmp_path / "tasks.jsonl"
    lines = [
        {"id": f"t{i}", "kind": "instructions", "prompt": f"Task t{i}: reply OK in capitals.",
         "checks": [{"check": "case", "case": "upper"}]}
        for i in range(3)
    ]  # fmt: skip
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    server = ReactiveOpenAI(lambda body: "OK" if after_feedback(body) else "ok")
    for name in ("OPENAI_API_KEY", "LOOP_AGENTS_MODEL", "LOOP_AGENTS_GGUF", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    args = ["eval", str(tasks), "--arms", "single,loop", "--iterations", "2", "--out", str(out)]
    with server.serve() as url:
        assert main([*args, "--report", str(page), "--base-url", url]) == 0
        assert f"Report: {page}" in capsys.readouterr().out
        calls = len(server.requests)
        drawn = Page(page.read_text(encoding="utf-8"))
        assert "Task t1: reply OK in capitals." in drawn.text
        assert "2/3" not in drawn.text
        assert "0/3 · 0%" in drawn.text
        assert "3/3 · 100%" in drawn.text
        assert drawn.text.count("✓ 2") == 3
        assert drawn.text.count("✗ 1") == 3
        # the curves of what ran: single one level, loop 0% then 100%
        curves = {title(chart): chart for chart in charts(page.read_text(encoding="utf-8"))}
        curve = curves["Pass rate after each attempt"]
        assert len(marks(curve, "level")) == 1
        assert len(marks(curve, "line")) == 2
        loop_markers = [float(m.get("cy")) for m in marks(curve, "marker")[1:]]
        assert len(loop_markers) == 2
        assert loop_markers[1] < loop_markers[0]
        settings = json.loads(out.read_text(encoding="utf-8"))["settings"]
        assert settings["temperatures"]["loop"] == 1.0
        assert "max_tokens" in settings
        page.unlink()
        assert main([*args, "--report", str(page), "--base-url", url]) == 0
        capsys.readouterr()
        assert len(server.requests) == calls  # everything was in the journal
        # --json: stdout is the JSON alone, the page's path goes to stderr
        assert main([*args, "--json", "--report", str(page), "--base-url", url]) == 0
        printed = capsys.readouterr()
        assert json.loads(printed.out)["arms"]["loop"]["passed"] == 3
        assert f"Report: {page}" in printed.err
        # a page that cannot be written: exit 1, the results kept, how to draw it again
        blocked = out / "r.html"  # under a file
        assert main([*args, "--report", str(blocked), "--base-url", url]) == 1
        assert f"draw it again with --from {out}" in capsys.readouterr().err
        assert len(server.requests) == calls  # everything was in the journal
    assert Page(page.read_text(encoding="utf-8")).text == drawn.text


def test_the_seeds_of_an_eval_run_in_several_runs_are_each_named(example):
    data = copy.deepcopy(example)
    data["settings"]["seed"] = 7
    assert "· seed 7" in Page(eval_page(data)).text
    data["settings"].pop("seed")
    data["settings"]["seeds"] = [7, None, 8]  # a result recorded without its seed
    assert "seeds 7, unrecorded, 8" in Page(eval_page(data)).text
    data["settings"]["seeds"] = ["<b>x</b>", 1e400, True]  # not seeds: never shown as text
    page = Page(eval_page(data))
    assert "seeds unrecorded, unrecorded, unrecorded" in page.text
    assert "b" not in page.tags()


def test_a_model_default_temperature_reads_default(example):
    data = copy.deepcopy(example)
    data["arms"]["loop"]["temperature"] = None
    shown = Page(eval_page(data)).text.count("default")
    assert shown == Page(eval_page(example)).text.count("default") + 1  # loop's T cell


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d["arms"]["loop"].update(pass_rate=float("nan"), ci95=[None, "x"]),
        lambda d: d["arms"]["loop"].update(model_calls=float("inf"), input_tokens=-5),
        lambda d: d["arms"].update(loop="not a summary"),
        lambda d: d.update(by_attempt={"loop": "1,2,3", "single": [None, 1e400]}),
        lambda d: d["results"].extend([None, 3, {"task_id": 7, "arm": None}]),
        lambda d: d["results"][0].update(transcript=[None, {"answer": 5, "iteration": "two"}]),
        lambda d: d.update(settings=[1, 2], comparisons={"a": 1}, errors=None, parts=[]),
    ],
)
def test_a_damaged_file_still_gives_a_page(example, damage):
    data = copy.deepcopy(example)
    damage(data)
    page = Page(eval_page(data))
    assert "Pass rate per arm" in page.text
    assert {href[1:] for href in page.links() if href.startswith("#")} <= page.ids()


EXTREMES = [1e308, -1e308, 1.7976931348623157e308, 5e-324, 10**400, -(10**400), 10**30, 1e15]


def every_number(data: object, value: object) -> object:
    """``data`` with every number (not a bool) in it replaced by ``value``."""
    if isinstance(data, dict):
        return {k: every_number(v, value) for k, v in data.items()}
    if isinstance(data, list):
        return [every_number(v, value) for v in data]
    if isinstance(data, int | float) and not isinstance(data, bool):
        return value
    return data


@pytest.mark.parametrize(
    "damage",
    [
        # the file: token counts near 1e308 (their sum overflows to inf)
        pytest.param(
            lambda d: [
                s.update(input_tokens=1e308, output_tokens=1e308) for s in d["arms"].values()
            ],
            id="tokens-1e308",
        ),
        pytest.param(
            lambda d: [s.update(model_calls=1.7976931348623157e308) for s in d["arms"].values()],
            id="calls-max-float",
        ),
        pytest.param(
            lambda d: [
                s.update(model_calls=5e-324, input_tokens=5e-324) for s in d["arms"].values()
            ],
            id="calls-5e-324",
        ),
        pytest.param(
            lambda d: d.update(by_attempt={arm: [1e308, -1e308, 5e-324] for arm in d["arms"]}),
            id="by-attempt",
        ),
        *(
            pytest.param(
                lambda d, v=value: d.update(every_number(d, v)),
                id=f"all-{value:.3g}" if isinstance(value, float) else f"all-int-{len(str(value))}",
            )
            for value in EXTREMES
        ),
    ],
)
def test_eval_from_draws_a_page_whatever_figures_the_file_holds(example, tmp_path, damage):
    data = copy.deepcopy(example)
    damage(data)
    source, page = tmp_path / "extreme.json", tmp_path / "extreme.html"
    source.write_text(json.dumps(data), encoding="utf-8")
    assert main(["eval", "--from", str(source), "--report", str(page)]) == 0
    drawn = page.read_text(encoding="utf-8")
    assert "Pass rate per arm" in Page(drawn).text
    drawn_charts = charts(drawn)
    assert len(drawn_charts) >= 2
    for chart in drawn_charts:  # every coordinate of every mark is a finite number
        for element in chart.iter():
            for name in ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height"):
                if element.get(name) is not None:
                    assert math.isfinite(float(element.get(name))), (title(chart), name)
            for pair in (element.get("points") or "").split():
                assert all(math.isfinite(float(n)) for n in pair.split(",")), title(chart)


def test_a_file_with_a_number_json_cannot_hold_is_a_clear_error(tmp_path, capsys):
    source = tmp_path / "digits.json"
    source.write_text('{"arms": {}, "results": [], "x": ' + "9" * 5000 + "}", encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--from", str(source), "--report", str(tmp_path / "p.html")])
    assert exited.value.code == 2
    assert "is not JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 1), (0, 5e-324), (0, 1e308), (-1e308, 1e308), (1e20, 1e20 + 2e4), (5, 5), (-3, 7)],
)
def test_nice_ticks_cover_any_finite_span_with_finite_rising_ticks(low, high):
    ticks = nice_ticks(low, high)
    assert 2 <= len(ticks) <= 24
    assert all(math.isfinite(t) for t in ticks)
    assert ticks[-1] > ticks[0]
    assert ticks[0] <= max(low, -SCALE_LIMIT)
    assert ticks[-1] >= min(high, SCALE_LIMIT) or high <= low
