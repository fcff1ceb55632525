"""The result of an eval: results, per-arm summaries, comparisons, the tables (see docs/eval.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from loop_agents_cli.console.output import command_console
from loop_agents_evals.recommend import Recommendation, recommend
from loop_agents_evals.settings import ARMS, BASELINES
from loop_agents_evals.stats import (
    RETRY_KINDS_NOTE,
    Paired,
    Rescues,
    RetryKinds,
    paired_comparison,
    rescues_of,
    retry_kinds,
    wilson_interval,
)

__all__ = [
    "COMPARISONS",
    "ArmSummary",
    "EvalReport",
    "TaskError",
    "TaskResult",
    "build_report",
    "comparisons_of",
    "render_report",
]

COMPARISONS = (
    ("loop", "resample"),
    ("loop", "single"),
    ("judge-loop", "single"),
    ("restart", "resample"),
    ("diverse-first", "resample"),
    ("adaptive", "resample"),
    ("adaptive", "loop"),
)
"""The built-in arms' paired comparisons (when both ran); yours are compared with `BASELINES`."""


def comparisons_of(arms: Sequence[str]) -> list[tuple[str, str]]:
    """The (arm, baseline) pairs reported for ``arms``.

    Example:
        ```python
        comparisons_of(["single", "resample", "mine"])
        # [('mine', 'resample'), ('mine', 'single')]
        ```
    """
    pairs = [(a, b) for a, b in COMPARISONS if a in arms and b in arms]
    pairs += [(a, b) for a in arms if a not in ARMS for b in BASELINES if b in arms]
    return pairs


@dataclass(frozen=True)
class TaskResult:
    """One arm's result on one task (the keys of ``results`` in docs/eval.md).

    Attributes:
        task_id: The task.
        arm: The arm.
        passed: Whether its answer passed (hidden tests, or every check).
        iterations: Answers written.
        model_calls: Chat-model calls made (the judge's included).
        input_tokens: Prompt tokens over those calls (0 when the model reports none).
        output_tokens: Completion tokens over those calls.
        seconds: Wall-clock seconds, grading included.
        answer: The answer that was graded.
        attempts: Tries it took (more than 1 after a failed try was retried).
        judge_failures: Evaluations where the judge gave no usable verdict.
        cached_input_tokens: Of the prompt tokens, those read from a prompt cache.
        cut_off: Answers that ended at the token cap.
        by_attempt: Whether the answer after step 1, 2, ... passes (the final answer
            stands after the arm stopped); empty when not recorded.
        part: The part of its set the task belongs to, or ``None``.
        transcript: Every answer written, in order (see `loop_agents_evals.grading`).
        opaque: Whether its attempts could not be read (an agent that is not a loop).
        learned: Store items an ``adaptive`` arm added on this task (written when some).
    """

    task_id: str
    arm: str
    passed: bool
    iterations: int
    model_calls: int
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    answer: str = ""
    attempts: int = 1
    judge_failures: int = 0
    cached_input_tokens: int = 0
    cut_off: int = 0
    by_attempt: tuple[bool, ...] = ()
    part: str | None = None
    transcript: tuple[dict[str, Any], ...] = ()
    opaque: bool = False
    learned: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The result as one entry of ``results`` in the JSON output."""
        data = asdict(self)
        data["by_attempt"] = list(self.by_attempt)
        data["transcript"] = [dict(entry) for entry in self.transcript]
        if self.learned:
            data["learned"] = [dict(item) for item in self.learned]
        else:
            del data["learned"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskResult:
        """Read a result written by `to_json` (unknown keys are ignored).

        Raises:
            KeyError, TypeError, ValueError: a required key is missing or malformed.
        """
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        for key, kind in (("by_attempt", bool), ("transcript", dict), ("learned", dict)):
            items = known.get(key, ())
            if not isinstance(items, list | tuple) or not all(isinstance(i, kind) for i in items):
                raise ValueError(f"malformed {key} {items!r:.80}")
            known[key] = tuple(items)
        result = cls(**known)
        if (
            not isinstance(result.passed, bool)
            or not isinstance(result.task_id, str)
            or not isinstance(result.part, str | None)
            or not isinstance(result.opaque, bool)
        ):
            raise ValueError(f"malformed result {dict(data)!r:.80}")
        return result


@dataclass(frozen=True)
class TaskError:
    """A task and arm that failed every try: not counted; a resumed eval tries it again.

    Attributes:
        task_id: The task.
        arm: The arm.
        error: The last error, as ``"TypeName: message"``.
        attempts: The tries made.
    """

    task_id: str
    arm: str
    error: str
    attempts: int


@dataclass(frozen=True)
class ArmSummary:
    """One arm over the tasks it has a result for (``arms`` in docs/eval.md).

    Attributes:
        arm: The arm.
        passed: Tasks passed.
        tasks: Tasks with a result (errors excluded).
        pass_rate: ``passed / tasks`` (0 with no task).
        ci95: The 95% Wilson interval of the pass rate.
        model_calls: Mean model calls per task.
        input_tokens: Mean prompt tokens per task.
        output_tokens: Mean completion tokens per task.
        seconds: Mean wall-clock seconds per task.
        errors: Tasks that failed every try (no result).
        cached_input_tokens: Mean prompt tokens per task read from a prompt cache.
        answers: Mean answers written per task.
        cut_off: Answers that ended at the token cap, over all tasks.
        cut_off_rate: ``cut_off`` over all answers written (0 with none).
        temperature: The arm's sampling temperature (``None``: the model's default).
        max_tokens: The token cap per answer (``None``: none, or not known).
        budget: The most answers the arm could write per task.
        opaque: Whether some of its results are of an agent that is not a loop.
    """

    arm: str
    passed: int
    tasks: int
    pass_rate: float
    ci95: tuple[float, float]
    model_calls: float
    input_tokens: float
    output_tokens: float
    seconds: float
    errors: int = 0
    cached_input_tokens: float = 0.0
    answers: float = 0.0
    cut_off: int = 0
    cut_off_rate: float = 0.0
    temperature: float | None = None
    max_tokens: int | None = None
    budget: int | None = None
    opaque: bool = False

    def to_json(self) -> dict[str, Any]:
        """The summary as one entry of ``arms`` in the JSON output."""
        data = asdict(self)
        data.pop("arm")
        data["ci95"] = list(self.ci95)
        return data


@dataclass(frozen=True)
class EvalReport:
    """Everything an eval found.

    Attributes:
        arms: Arm name -> `ArmSummary`, in the order the arms were given.
        results: One `TaskResult` per task and arm that finished.
        comparisons: The paired comparisons (`comparisons_of`) whose arms both ran.
        errors: Task and arm pairs that failed every try.
        settings: What produced the results (K, temperatures, token cap, model, ...).
        by_attempt: Arm name -> its pass rate had it stopped after step 1, 2, ...
        by_part: Part -> arm name -> `ArmSummary` over that part's tasks (when named).
        rescues: Arm name -> its `Rescues`, for arms of more than one step.
        retry_kinds: Arm name -> its `RetryKinds`, for arms that choose them (``adaptive``).
    """

    arms: dict[str, ArmSummary]
    results: list[TaskResult]
    comparisons: list[Paired] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    by_attempt: dict[str, list[float]] = field(default_factory=dict)
    by_part: dict[str, dict[str, ArmSummary]] = field(default_factory=dict)
    rescues: dict[str, Rescues] = field(default_factory=dict)
    retry_kinds: dict[str, RetryKinds] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every task and arm has a result (no errors)."""
        return not self.errors

    @property
    def recommendation(self) -> Recommendation | None:
        """The arm to use, its code and evidence (`recommend`); ``None`` with no result."""
        return recommend(self)

    def to_json(self) -> dict[str, Any]:
        """The JSON that ``--out`` writes (its keys are in docs/eval.md, "The output").

        Example:
            ```python
            Path("results.json").write_text(json.dumps(report.to_json(), indent=2))
            ```
        """
        data: dict[str, Any] = {
            "arms": {name: summary.to_json() for name, summary in self.arms.items()},
            "by_attempt": {name: list(rates) for name, rates in self.by_attempt.items()},
            "by_part": {
                part: {name: summary.to_json() for name, summary in arms.items()}
                for part, arms in self.by_part.items()
            },
            "rescues": {name: asdict(found) for name, found in self.rescues.items()},
            "results": [r.to_json() for r in self.results],
            "comparisons": [asdict(c) for c in self.comparisons],
            "errors": [asdict(e) for e in self.errors],
            "settings": dict(self.settings),
        }
        if self.retry_kinds:
            data["retry_kinds"] = {name: k.to_json() for name, k in self.retry_kinds.items()}
        found = self.recommendation
        data["recommendation"] = found.to_json() if found is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalReport:
        """The report of an ``--out`` JSON, computed again (an older file gains what it lacks).

        Raises:
            KeyError, TypeError, ValueError: a result or an error is malformed.
        """
        settings = data.get("settings")
        return build_report(
            list(data["arms"]),
            [TaskResult.from_json(r) for r in data["results"]],
            [TaskError(**e) for e in data.get("errors") or []],
            settings=settings if isinstance(settings, dict) else {},
        )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(
    arm: str,
    results: Sequence[TaskResult],
    errors: int = 0,
    *,
    settings: Mapping[str, Any] | None = None,
) -> ArmSummary:
    """The `ArmSummary` of one arm's results (its temperature, cap, budget from ``settings``).

    Example:
        ```python
        summary = summarize("loop", [r for r in results if r.arm == "loop"])
        ```
    """
    passed = sum(1 for r in results if r.passed)
    tasks = len(results)
    settings = settings or {}
    temperatures = settings.get("temperatures")
    temperature = temperatures.get(arm) if isinstance(temperatures, Mapping) else None
    iterations = settings.get("iterations")
    budget = (1 if arm == "single" else iterations) if isinstance(iterations, int) else None
    answers = sum(r.iterations for r in results)
    cut_off = sum(r.cut_off for r in results)
    return ArmSummary(
        arm=arm,
        passed=passed,
        tasks=tasks,
        pass_rate=passed / tasks if tasks else 0.0,
        ci95=wilson_interval(passed, tasks),
        model_calls=_mean([r.model_calls for r in results]),
        input_tokens=_mean([r.input_tokens for r in results]),
        output_tokens=_mean([r.output_tokens for r in results]),
        seconds=_mean([r.seconds for r in results]),
        errors=errors,
        cached_input_tokens=_mean([r.cached_input_tokens for r in results]),
        answers=answers / tasks if tasks else 0.0,
        cut_off=cut_off,
        cut_off_rate=cut_off / answers if answers else 0.0,
        temperature=temperature,
        max_tokens=settings.get("max_tokens"),
        budget=budget,
        opaque=any(r.opaque for r in results),
    )


def pass_rate_by_attempt(results: Sequence[TaskResult]) -> list[float]:
    """The share of ``results`` passing after step 1, 2, ... (a stopped arm keeps its answer).

    Example:
        ```python
        rates = pass_rate_by_attempt([r for r in report.results if r.arm == "loop"])
        ```
    """
    curves = [r.by_attempt or (r.passed,) for r in results]
    steps = max((len(c) for c in curves), default=0)
    return [sum(c[min(i, len(c) - 1)] for c in curves) / len(curves) for i in range(steps)]


def build_report(
    arms: Sequence[str],
    results: Iterable[TaskResult],
    errors: Sequence[TaskError] = (),
    *,
    settings: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Summarize results into an `EvalReport` (arms in the given order).

    Example:
        ```python
        report = build_report(["single", "loop"], results)
        ```
    """
    results = list(results)
    by_arm = {arm: [r for r in results if r.arm == arm] for arm in arms}
    parts = sorted({r.part for r in results if r.part is not None})
    by_part = {
        part: {
            arm: summarize(arm, [r for r in by_arm[arm] if r.part == part], settings=settings)
            for arm in arms
            if any(r.part == part for r in by_arm[arm])
        }
        for part in parts
    }
    failed = {arm: sum(1 for e in errors if e.arm == arm) for arm in arms}
    summaries = {arm: summarize(arm, by_arm[arm], failed[arm], settings=settings) for arm in arms}
    verdicts = {arm: {r.task_id: r.passed for r in rs} for arm, rs in by_arm.items()}
    comparisons = [
        paired_comparison(verdicts[a], verdicts[b], names=(a, b))
        for a, b in comparisons_of(list(verdicts))
    ]
    return EvalReport(
        arms=summaries,
        results=results,
        comparisons=comparisons,
        errors=list(errors),
        settings=dict(settings or {}),
        by_attempt={arm: pass_rate_by_attempt(by_arm[arm]) for arm in arms if by_arm[arm]},
        by_part=by_part,
        rescues={arm: found for arm, found in rescues_of(results).items() if arm in by_arm},
        retry_kinds={
            arm: found
            for arm, found in retry_kinds((r.arm, r.transcript) for r in results).items()
            if arm in by_arm
        },
    )


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _temperature(value: float | None) -> str:
    """An arm's temperature as shown: ``0.7``, or ``default`` (the model's own)."""
    return "default" if value is None else f"{value:g}"


def _table(title: str, headers: Sequence[str], longest: int = 0, **options: Any) -> Table:
    """A table whose first column is on the left (``longest`` wide at least), others right."""
    style: dict[str, Any] = {
        "title_justify": "left",
        "min_width": len(title),
        "box": box.SIMPLE_HEAD,
    }
    table = Table(title=title, **(style | {"pad_edge": False} | options))
    for number, header in enumerate(headers):
        table.add_column(
            header,
            justify="right" if number else "left",
            no_wrap=True,
            min_width=None if number else longest or None,
        )
    return table


def _render_by_attempt(report: EvalReport, console: Console) -> None:
    """The "Pass rate by attempt" table: one row per arm, one column per step."""
    curves = {arm: rates for arm, rates in report.by_attempt.items() if rates}
    if not curves:
        return
    steps = max(len(rates) for rates in curves.values())
    table = _table("Pass rate by attempt", ["arm", *map(str, range(1, steps + 1))])
    for arm, rates in curves.items():
        table.add_row(arm, *(_percent(r) for r in rates), *([""] * (steps - len(rates))))
    console.print(table)
    note = "The pass rate had the arm stopped after attempt 1, 2, ..."
    if "loop-candidates" in curves:
        note += "; for loop-candidates an attempt is an iteration of 2 answers."
    console.print(note, style="dim")
    opaque = [arm for arm, summary in report.arms.items() if summary.opaque]
    if opaque:
        console.print(
            f"{', '.join(opaque)}: attempts not readable (the agent is not a loop), so "
            f"the curve is the final answer only.",
            style="dim",
            markup=False,
        )


def _render_rescues(report: EvalReport, console: Console) -> None:
    """The "After the first answer" table: rescued and broken first answers per arm."""
    if not report.rescues:
        return
    headers = ["arm", "first failed", "rescued", "first passed", "broken"]
    table = _table("After the first answer", headers)
    for arm, found in report.rescues.items():
        rescued = f"{found.rescued} ({_percent(found.rescue_rate)})" if found.failed_first else "0"
        table.add_row(
            arm, str(found.failed_first), rescued, str(found.passed_first), str(found.broken)
        )
    console.print(table)
    console.print(
        "rescued: tasks whose first answer failed and whose final answer passes; broken: "
        "tasks whose first answer passed and whose final answer fails.",
        style="dim",
    )


def _render_retry_kinds(report: EvalReport, console: Console) -> None:
    """Per arm that chose its retries' kinds: the kinds by quarter of the tasks, how each did."""
    for arm, found in report.retry_kinds.items():
        table = _table(f"Retry kinds of {arm}", ["tasks", *found.kinds])
        for number, row in enumerate(found.rows()):
            table.add_row(*row, end_section=number == len(found.quarters))
        console.print(table)
    if report.retry_kinds:
        console.print(RETRY_KINDS_NOTE, style="dim")


def _render_by_part(report: EvalReport, console: Console) -> None:
    """The "Pass rate by part" table: one row per arm, one column per part of the set."""
    if not report.by_part:
        return
    table = _table("Pass rate by part", ["arm", *report.by_part])
    for arm in report.arms:
        found = [summaries.get(arm) for summaries in report.by_part.values()]
        table.add_row(
            arm, *(f"{s.passed}/{s.tasks} ({_percent(s.pass_rate)})" if s else "" for s in found)
        )
    console.print(table)


def _summary_cells(summary: ArmSummary) -> dict[str, str]:
    """An arm's cells in the per-arm table, by column header."""
    low, high = summary.ci95
    return {
        "arm": summary.arm,
        "T": _temperature(summary.temperature),
        "passed": f"{summary.passed}/{summary.tasks}",
        "rate": _percent(summary.pass_rate),
        "95% CI": f"{_percent(low)}-{_percent(high)}",
        "calls": f"{summary.model_calls:.1f}",
        "tok in": f"{summary.input_tokens:.0f}",
        "cached": f"{summary.cached_input_tokens:.0f}",
        "tok out": f"{summary.output_tokens:.0f}",
        "cut": f"[yellow]{summary.cut_off}[/yellow]" if summary.cut_off else "0",
        "s": f"{summary.seconds:.1f}",
        "err": f"[red]{summary.errors}[/red]" if summary.errors else "0",
    }


def _arm_table(title: str, headers: list[str], rows: list[dict[str, str]], longest: int) -> Table:
    """A table of the arms with the given columns (an arm's name is never cut)."""
    table = _table(title, headers, longest, collapse_padding=True)
    for row in rows:
        table.add_row(*(row[header] for header in headers))
    return table


def seed_text(settings: Mapping[str, Any]) -> str | None:
    """The model seeds of a report's settings in words (one per run), or ``None``.

    Example:
        ```python
        assert seed_text({"seed": 7}) == "seed 7"
        assert seed_text({"seeds": [7, 8]}) == "seeds 7, 8"
        ```
    """
    seeds = settings.get("seeds")
    if isinstance(seeds, list) and seeds:
        return "seeds " + ", ".join(_seed(s) or "unrecorded" for s in seeds)
    seed = _seed(settings.get("seed"))
    return f"seed {seed}" if seed else None


def _seed(value: object) -> str | None:
    """A seed as read from a file: a whole number, or ``None`` for anything else."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else None


def render_report(report: EvalReport, console: Console | None = None) -> None:
    """Print the tables, the paired comparisons, any errors and, last, the recommendation.

    Example:
        ```python
        render_report(report, Console(stderr=True))
        ```
    """
    console = console or command_console()
    settings = report.settings
    temperatures = {s.temperature for s in report.arms.values()}
    one_temperature = len(temperatures) == 1 and bool(settings)
    title = "Eval"
    if settings:
        title += f": K={settings.get('iterations')}"
        if one_temperature:  # the same for every arm: said once, no column
            title += f", T={_temperature(next(iter(temperatures)))}"
        if "max_tokens" in settings:
            cap = settings["max_tokens"]
            title += f", max tokens {'none' if cap is None else cap}"
        if "judge_temperature" in settings:
            judge_t = settings["judge_temperature"]
            title += f", judge T={'default' if judge_t is None else format(judge_t, 'g')}"
        if settings.get("model"):
            title += f", {settings['model']}"
        seeds = seed_text(settings)
        if seeds:
            title += f", {seeds}"
    headers = ["arm", "T", "passed", "rate", "95% CI"]
    headers += ["calls", "tok in", "cached", "tok out", "cut", "s", "err"]  # the costs
    if one_temperature:
        headers.remove("T")
    rows = [_summary_cells(summary) for summary in report.arms.values()]
    longest = max((len(arm) for arm in report.arms), default=3)
    table = _arm_table(title, headers, rows, longest)
    unbounded = console.options.update_width(1_000_000)  # the table's natural width
    if console.measure(table, options=unbounded).maximum <= console.width:
        console.print(table)
    else:  # too wide for this terminal: results, then costs, nothing cut
        split = headers.index("calls")
        console.print(_arm_table(title, headers[:split], rows, longest))
        costs = ["arm", *headers[split:]]
        console.print(_arm_table("Cost (means per task)", costs, rows, longest))
    console.print(
        "T: the arm's sampling temperature (default: the model's own); calls, tok in/out "
        "(tokens), cached (prompt tokens read from the server's cache) and s (seconds): "
        "means per task; cut: answers cut off at the token cap (all tasks); err: pairs "
        "without a result (failed every try).",
        style="dim",
    )
    own = report.settings.get("own_first_answer")
    if report.settings.get("same_first_answer") and isinstance(own, Mapping) and own:
        console.print(
            "Same first answer: every arm starts from one first answer per task, except "
            + "; ".join(f"{arm} ({why})" for arm, why in own.items())
            + ": they sample their own, so their comparisons also count their first answers.",
            style="dim",
            markup=False,
        )
    _render_by_part(report, console)
    _render_by_attempt(report, console)
    _render_rescues(report, console)
    _render_retry_kinds(report, console)
    if report.comparisons:
        headers = ["comparison", "won", "lost", "tied", "sign test p"]
        paired = _table("Paired, task by task", headers, pad_edge=True, min_width=None)
        for c in report.comparisons:
            paired.add_row(
                f"{c.arm} vs {c.baseline}", str(c.won), str(c.lost), str(c.tied), f"{c.p_value:.3f}"
            )
        console.print(paired)
    if report.errors:
        console.print(
            f"[red]{len(report.errors)} task/arm pairs failed every try and have no result "
            f"(not counted); run the same command again to retry them:[/red]"
        )
        for error in report.errors:
            console.print(f"  {error.task_id} / {error.arm}: {error.error}", markup=False)
    found = report.recommendation
    if found is not None:
        console.print(f"\nRecommendation ({found.confidence})", style="bold", markup=False)
        console.print(f"  {found.code}", style="bold", markup=False, soft_wrap=True)
        console.print(found.text, markup=False)
