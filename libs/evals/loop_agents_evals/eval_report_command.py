"""``loop-agents eval [TASKS] --from OUT.json [--report PAGE.html]``: a finished eval again.

Nothing runs and no model is looked for: the tables (without ``--report``) or the page
are made from the JSON that ``--out`` wrote. The options that only matter to a run
(``--arms``, ``--iterations``, the model's ...) are refused rather than silently ignored.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loop_agents_cli.errors import UsageError

__all__ = ["draw_again", "run_options_given"]

_NOT_RUN_OPTIONS = {"report", "from_json", "tasks_source"}


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
    from loop_agents_evals.report_command import draw_from_json, report_from_json
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
