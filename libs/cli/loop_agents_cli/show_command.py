"""``loop-agents show RUN_ID``: a saved run, replayed as the console showed it, or as JSON.

A run that was interrupted or failed ends with the command that resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from loop_agents.hosts.middleware import loop_output
from loop_agents.loop.events import (
    AgentFinished,
    EvaluationFinished,
    IterationStarted,
    LoopFinished,
)
from loop_agents.loop.records import choose
from loop_agents_cli.console.loop_console import LoopConsole
from loop_agents_cli.console.output import command_console
from loop_agents_cli.loop import reading_loop
from loop_agents_cli.results import record_answer, result_json
from loop_agents_cli.store import RunStore, SavedRun, resume_command


async def _values(store: RunStore, run: SavedRun) -> dict[str, Any]:
    async with store.checkpointer() as saver:
        inside = run.settings.get("inside") is True  # run --inside-agent
        loop = reading_loop(max(run.max_iterations, 1), checkpointer=saver, inside=inside)
        snapshot = await loop.aget_state({"configurable": {"thread_id": run.run_id}})
        return loop_output(snapshot.values)


def show(args: argparse.Namespace) -> int:
    """``loop-agents show RUN_ID``: the run that `check_saved_run` found, printed."""
    return print_run(args.store, args.saved, as_json=args.json, report=args.report)


def print_run(store: RunStore, run: SavedRun, *, as_json: bool, report: Path | None = None) -> int:
    """Print a saved run: as ``run --json`` did, or replayed; with ``report``, its HTML page.

    Example:
        ```python
        print_run(store, store.find("3f9a"), as_json=False)
        ```
    """
    values = asyncio.run(_values(store, run))
    failure = run.stop_reason if run.state == "failed" else None
    result = result_json(values, run_id=run.run_id, error=run.error, failure=failure)
    if report is not None:
        from loop_agents_cli.run_report_command import write_run_report

        write_run_report(run, result, report)
        print(f"Report: {report}", file=sys.stderr if as_json else sys.stdout)
        if not as_json:
            return 0
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    endpoint = run.settings.get("endpoint") or {}
    console = command_console()
    lines = [
        f"run {run.run_id} · started {run.started} · {run.state}"
        + (f" ({run.stop_reason})" if run.stop_reason else ""),
        f"model: {endpoint.get('model')} · server: "
        f"{endpoint.get('base_url') or endpoint.get('kind')}",
        f"task: {run.title}",
    ]
    for line in lines:
        console.print(line, style="dim", markup=False, highlight=False)
    if run.error:  # why it failed, as `show --json` says in "error"
        console.print(f"error: {run.error}", style="red", markup=False, highlight=False)
    view = _replay(console, values, run, result)
    if result["answer"]:
        view.print_answer(result["answer"])
    if run.state in ("interrupted", "failed"):
        # a run the server refused the judge's way for: its error names the way to resume with
        fix = re.search(r"use --structured-output (\w+)", run.error or "")
        method = fix[1] if fix else None
        again = resume_command(
            run.run_id, as_json=False, env_file=None, home=store.folder, method=method
        )
        done = f"{len(result['records'])} of {run.max_iterations} iterations are saved"
        console.print()
        console.print(f"{run.state}; {done}. Resume the run with:", markup=False)
        console.print(f"  {again}", markup=False, highlight=False)
    return 0


def _replay(
    console: Console, values: dict[str, Any], run: SavedRun, result: dict[str, Any]
) -> LoopConsole:
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
        records = values.get("records") or []
        best = choose(records, "best") if records else None
        if best is not None and best["score"] is None:
            best = None  # the last one, chosen when none is scored: not a best score
        finished: LoopFinished = {
            "type": "loop_finished",
            "loop": loop,
            "stop_reason": values["stop_reason"],
            "iterations": int(values.get("iteration", 0)),
            "best_score": best["score"] if best is not None else None,
            "best_iteration": best["iteration"] if best is not None else None,
            "selected_iteration": result["selected_iteration"] or 0,
            "answer": result["answer"] or "",
        }
        view.handle("custom", finished)
    elif values.get("records"):
        view.failed(run.stop_reason or run.state, iterations=int(values.get("iteration", 0)))
    view.close()
    return view
