"""``loop-agents runs``: the saved runs, latest first (as a table, or ``--json``).

It reads only the index of the runs file, so it imports no model library: the list (an
empty one too) comes as fast as ``--help``.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Literal

from rich import box
from rich.table import Table

from loop_agents_cli.console.output import command_console, format_score
from loop_agents_cli.store import saved_runs

TITLE_WIDTH = 50
"""The most characters of a task's first line shown in the table."""


def runs(args: argparse.Namespace) -> int:
    """``loop-agents runs``: the saved runs, latest first."""
    store = saved_runs()
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
    console = command_console()
    table = Table(box=box.SIMPLE_HEAD if console.is_terminal else box.ASCII)
    rows = [
        (
            run.run_id,
            run.started,
            run.title if len(run.title) <= TITLE_WIDTH else run.title[: TITLE_WIDTH - 1] + "…",
            f"{run.iterations}/{run.max_iterations}",
            run.stop_reason or run.state,
            format_score(run.best_score),
        )
        for run in saved
    ]
    # on a narrow screen only the task gives way: the id (what `show` and `resume` take)
    # and the figures are never cut
    columns: list[tuple[str, Literal["left", "right"]]] = [
        ("id", "left"),
        ("started", "left"),
        ("task", "left"),
        ("iterations", "right"),
        ("stop reason", "left"),
        ("best score", "right"),
    ]
    for index, (header, justify) in enumerate(columns):
        if header == "task":
            table.add_column(header, no_wrap=True, overflow="ellipsis")
        else:
            widest = max(len(row[index]) for row in rows)
            table.add_column(header, justify=justify, no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return 0
