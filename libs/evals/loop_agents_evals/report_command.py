"""``--report PAGE.html`` and ``--from OUT.json``: the page, and a finished eval again.

``--from`` runs nothing and looks for no model: the tables, or with ``--report`` the page,
are made from the ``--out`` JSON (TASKS, when given, only adds the tasks' prompts). Cheap
to import (argparse and pathlib), like `loop_agents_evals.command`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop_agents_evals.report import EvalReport
    from loop_agents_evals.tasks import Task

__all__ = ["add_report_arguments", "draw_from_json", "report_from_json"]


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--report`` and ``--from`` to the ``eval`` command's parser.

    Example:
        ```python
        add_report_arguments(argparse.ArgumentParser(prog="loop-agents eval"))
        ```
    """
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PAGE.html",
        help="also write the result as a self-contained HTML page: pass rates with their "
        "intervals, the cost frontier, the per-attempt curves, a task-by-arm grid and "
        "every answer",
    )
    parser.add_argument(
        "--from",
        dest="from_json",
        type=Path,
        metavar="OUT.json",
        help="show a finished eval from its --out JSON, running nothing: its tables, or "
        "with --report its page (TASKS is then optional and only adds the tasks' prompts)",
    )


def draw_from_json(source: Path, report: Path, *, tasks: Sequence[Task] | None = None) -> None:
    """Write the page of the finished eval whose ``--out`` JSON is ``source``.

    Raises:
        EvalFileError: ``source`` cannot be read or is not an eval's JSON.
    """
    from loop_agents_evals.html_report import read_eval_json, write_eval_page

    write_eval_page(report, read_eval_json(source), tasks=tasks)


def report_from_json(source: Path) -> EvalReport:
    """The `EvalReport` of a finished eval's ``--out`` JSON, computed again (an older one too).

    Raises:
        EvalFileError: unreadable, not an eval's JSON, or a malformed result.

    Example:
        ```python
        render_report(report_from_json(Path("code.json")))
        ```
    """
    from loop_agents_evals.html_report import EvalFileError, read_eval_json
    from loop_agents_evals.report import EvalReport

    data = read_eval_json(source)
    try:
        return EvalReport.from_json(data)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise EvalFileError(f"{str(source)!r} holds a malformed result ({exc})") from exc
