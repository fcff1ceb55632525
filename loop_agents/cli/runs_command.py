"""``loop-agents runs`` (the saved runs) and ``loop-agents show RUN_ID`` (one of them)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from loop_agents.cli.errors import UsageError
from loop_agents.cli.loop import reading_loop
from loop_agents.cli.results import record_answer, result_json
from loop_agents.cli.store import RunStore, SavedRun, store_home
from loop_agents.console.loop_console import LoopConsole, format_score, section_header
from loop_agents.hosts.middleware import loop_output
from loop_agents.loop.events import (
    AgentFinished,
    EvaluationFinished,
    IterationStarted,
    LoopFinished,
)
from loop_agents.models.settings import Environment, SettingsError

TITLE_WIDTH = 50


def _store() -> RunStore:
    try:
        env = Environment.read()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return RunStore(store_home(env.values))


def _started(run: SavedRun) -> str:
    return datetime.fromtimestamp(run.created_at).strftime("%Y-%m-%d %H:%M")


def _outcome(run: SavedRun) -> str:
    return run.stop_reason or run.state


def runs(args: argparse.Namespace) -> int:
    """``loop-agents runs``: the saved runs, latest first."""
    if args.limit < 1:
        raise UsageError(f"--limit must be >= 1; got {args.limit}")
    store = _store()
    saved = store.list(limit=args.limit)
    if args.json:
        listing = [
            {
                "run_id": run.run_id,
                "started_at": datetime.fromtimestamp(run.created_at).astimezone().isoformat(),
                "task": run.title,
                "iterations": run.iterations,
                "max_iterations": run.max_iterations,
                "status": run.state,
                "stop_reason": run.stop_reason,
                "best_score": run.best_score,
                "model": (run.settings.get("endpoint") or {}).get("model"),
            }
            for run in saved
        ]
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    if not saved:
        print(f"no saved runs (in {store.path})")
        return 0
    console = Console()
    plain = not console.is_terminal
    if plain:  # a pipe: one line per run, never wrapped
        console = Console(width=40 + TITLE_WIDTH + 60)
    table = Table(box=box.ASCII if plain else box.SIMPLE_HEAD)
    table.add_column("id", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("task", no_wrap=True, overflow="ellipsis")
    table.add_column("iterations", justify="right", no_wrap=True)
    table.add_column("stop reason", no_wrap=True)
    table.add_column("best score", justify="right", no_wrap=True)
    for run in saved:
        title = run.title
        if len(title) > TITLE_WIDTH:
            title = title[: TITLE_WIDTH - 1] + "…"
        table.add_row(
            run.run_id,
            _started(run),
            title,
            f"{run.iterations}/{run.max_iterations}",
            _outcome(run),
            format_score(run.best_score),
        )
    console.print(table)
    return 0


async def _values(store: RunStore, run: SavedRun) -> dict[str, Any]:
    async with store.checkpointer() as saver:
        inside = run.settings.get("inside") is True  # run --inside-agent
        loop = reading_loop(max(run.max_iterations, 1), checkpointer=saver, inside=inside)
        snapshot = await loop.aget_state({"configurable": {"thread_id": run.run_id}})
        return loop_output(snapshot.values)


def show(args: argparse.Namespace) -> int:
    """``loop-agents show RUN_ID``: a saved run, as the console showed it or as JSON."""
    if args.report is not None:
        from loop_agents.cli.run_report_command import check_page_path

        check_page_path(args.report)
    store = _store()
    return print_run(store, store.find(args.run_id), as_json=args.json, report=args.report)


def print_run(store: RunStore, run: SavedRun, *, as_json: bool, report: Path | None = None) -> int:
    """Print a saved run: as ``run --json`` did, or replayed as the console showed it.

    With ``report``, the run's HTML page is written there instead of the replay (the
    JSON is still printed with ``as_json``).
    """
    values = asyncio.run(_values(store, run))
    failure = run.stop_reason if run.state == "failed" else None
    result = result_json(values, run_id=run.run_id, error=run.error, failure=failure)
    if report is not None:
        from loop_agents.cli.run_report_command import write_run_report

        write_run_report(run, result, report)
        print(f"Report: {report}", file=sys.stderr if as_json else sys.stdout)
        if not as_json:
            return 0
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    endpoint = run.settings.get("endpoint") or {}
    console = Console()
    lines = [
        f"run {run.run_id} · started {_started(run)} · {run.state}"
        + (f" ({run.stop_reason})" if run.stop_reason else ""),
        f"model: {endpoint.get('model')} · server: "
        f"{endpoint.get('base_url') or endpoint.get('kind')}",
        f"task: {run.title}",
    ]
    for line in lines:
        console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
    if run.error:  # why it failed, as `show --json` says in "error"
        console.print(
            f"error: {run.error}", style="red", markup=False, highlight=False, soft_wrap=True
        )
    _replay(console, values, run, result)
    if result["answer"]:
        console.print()
        console.print(section_header("Answer"), markup=False, highlight=False)
        console.print(result["answer"], markup=False, highlight=False, soft_wrap=True)
    return 0


def _replay(
    console: Console, values: dict[str, Any], run: SavedRun, result: dict[str, Any]
) -> None:
    """Feed the saved records to a `LoopConsole`, as if the loop were streaming again."""
    elapsed = [0.0]
    view = LoopConsole(console, clock=lambda: elapsed[0])
    loop = "loop-agents run"
    for record in values.get("records") or []:
        iteration = int(record["iteration"])
        started: IterationStarted = {
            "type": "iteration_started",
            "loop": loop,
            "iteration": iteration,
            "max_iterations": run.max_iterations,
        }
        view.handle("custom", started)
        elapsed[0] += float(record.get("agent_seconds", 0.0))
        answered: AgentFinished = {
            "type": "agent_finished",
            "loop": loop,
            "iteration": iteration,
            "answer": record_answer(record, values),
            "seconds": float(record.get("agent_seconds", 0.0)),
            "input_tokens": int(record.get("input_tokens", 0)),
            "output_tokens": int(record.get("output_tokens", 0)),
        }
        view.handle("custom", answered)
        elapsed[0] += float(record.get("evaluation_seconds", 0.0))
        judged: EvaluationFinished = {
            "type": "evaluation_finished",
            "loop": loop,
            "iteration": iteration,
            "stop": bool(record["stop"]),
            "score": record.get("score"),
            "feedback": str(record.get("feedback", "")),
            "evaluator": str(record.get("evaluator", "")),
            "decided_by": list(record.get("decided_by") or []),
            "seconds": float(record.get("evaluation_seconds", 0.0)),
            "input_tokens": int(record.get("evaluator_input_tokens", 0)),
            "output_tokens": int(record.get("evaluator_output_tokens", 0)),
        }
        view.handle("custom", judged)
    if values.get("stop_reason") is not None:
        best = _best(values)
        finished: LoopFinished = {
            "type": "loop_finished",
            "loop": loop,
            "stop_reason": values["stop_reason"],
            "iterations": int(values.get("iteration", 0)),
            "best_score": best[0] if best is not None else None,
            "best_iteration": best[1] if best is not None else None,
            "selected_iteration": result["selected_iteration"] or 0,
            "answer": result["answer"] or "",
        }
        view.handle("custom", finished)
    elif values.get("records"):
        view.failed(run.stop_reason or run.state, iterations=int(values.get("iteration", 0)))
    view.close()


def _best(values: dict[str, Any]) -> tuple[float, int] | None:
    """The best score and its iteration (the later one on a tie)."""
    best: tuple[float, int] | None = None
    for record in values.get("records") or []:
        score = record.get("score")
        if score is not None and (best is None or score >= best[0]):
            best = (float(score), int(record["iteration"]))
    return best
