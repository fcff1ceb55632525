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

from loop_agents_cli.errors import UsageError

if TYPE_CHECKING:
    from loop_agents_evals.report import EvalReport
    from loop_agents_evals.tasks import Task

__all__ = [
    "add_report_arguments",
    "draw_again",
    "draw_from_json",
    "report_from_json",
    "run_options_given",
]

_NOT_RUN_OPTIONS = {"report", "from_json", "tasks_source"}


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


def run_options_given(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` that differ from their defaults and only matter to a run.

    Example:
        ```python
        run_options_given(parser.parse_args(["eval", "--from", "r.json", "--limit", "3"]))
        # ['--limit']
        ```
    """
    from loop_agents_evals.command import eval_arguments

    probe = argparse.ArgumentParser(add_help=False)
    eval_arguments(probe)
    defaults = vars(probe.parse_args([]))
    names = {
        action.dest: max(action.option_strings, key=len)
        for action in probe._actions
        if action.option_strings
    }
    asked = {dest for dest in names if dest not in _NOT_RUN_OPTIONS}
    return [
        names[dest]
        for dest, default in defaults.items()
        if dest in asked and getattr(args, dest, default) != default
    ]


def draw_again(args: argparse.Namespace) -> int:
    """Print the tables, or draw the page, of the eval whose JSON is ``args.from_json``."""
    from loop_agents_cli.console.html_page import check_report_path
    from loop_agents_evals.tasks import load_tasks

    source: Path = args.from_json
    given = run_options_given(args)
    if given:
        raise UsageError(f"--from shows a finished eval and runs nothing: drop {', '.join(given)}")
    if args.report is None:
        from loop_agents_evals.report import render_report

        try:
            render_report(report_from_json(source))
        except ValueError as exc:  # EvalFileError
            raise UsageError(str(exc)) from exc
        return 0
    try:
        report: Path = check_report_path(args.report, source=source) or args.report
        tasks = load_tasks(args.tasks_source) if args.tasks_source is not None else None
        draw_from_json(source, report, tasks=tasks)
    except ValueError as exc:  # a bad page name, TASKS or OUT.json (EvalFileError)
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write the page {str(args.report)!r}: {exc}") from exc
    print(f"Report: {report}")
    return 0
