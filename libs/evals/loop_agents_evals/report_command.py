"""The ``eval`` command's page: ``--report PAGE.html``, and ``--from OUT.json`` to draw it again.

``loop-agents eval TASKS --out OUT.json --report PAGE.html`` writes the page of the
result next to its JSON; ``loop-agents eval [TASKS] --from OUT.json --report PAGE.html``
draws the page of a finished eval from its JSON and runs nothing (TASKS, when given,
only supplies the tasks' prompts, which the JSON does not hold). The page itself is
`loop_agents_evals.html_report`'s.

Importing this module is cheap (argparse and pathlib only), like `loop_agents_evals.command`.

Example:
    ```python
    page = check_report_path(Path("code.html"), out=Path("code.json"))
    draw_from_json(Path("code.json"), page, tasks=load_tasks("code"))
    ```
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

    Example:
        ```python
        draw_from_json(Path("code.json"), Path("code.html"))
        ```
    """
    from loop_agents_evals.html_report import read_eval_json, write_eval_page

    write_eval_page(report, read_eval_json(source), tasks=tasks)


def report_from_json(source: Path) -> EvalReport:
    """The `EvalReport` of the finished eval whose ``--out`` JSON is ``source``.

    The tables are computed again from its results and settings, so a file written by an
    earlier version shows what this version reports (the rescues, the comparisons).

    Raises:
        EvalFileError: ``source`` cannot be read, is not an eval's JSON, or holds a
            malformed result.

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
