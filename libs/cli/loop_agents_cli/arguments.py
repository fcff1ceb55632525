"""The checks of a command's arguments that need no model library: run before it is imported.

Bad arguments must be reported as fast as ``--help`` answers (a handler imports LangChain:
seconds on a loaded machine). A check raises `UsageError` and may fill in what it read
(``args.task``, ``args.endpoint``) so that the handler does not read it twice.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from loop_agents_cli.errors import UsageError
from loop_agents_cli.inputs import check_utf8, text_argument

if TYPE_CHECKING:
    from loop_agents_cli.models.endpoints import Endpoint
    from loop_agents_cli.models.settings import Environment


def check_run(args: argparse.Namespace) -> None:
    """``run``'s arguments: the texts (read now, once), a judge or a check, the numbers, the model.

    Afterwards ``args.task``, ``args.rubric`` and ``args.system`` hold the texts and the
    ``--*-file`` options are ``None``.
    """
    if args.max_file_bytes < 1:
        raise UsageError(f"--max-file-bytes must be >= 1; got {args.max_file_bytes}")
    cap = args.max_file_bytes
    args.task = text_argument(args.task, args.task_file, "task", required=True, limit=cap)
    args.rubric = text_argument(args.rubric, args.rubric_file, "rubric", required=False, limit=cap)
    args.system = text_argument(args.system, args.system_file, "system", required=False, limit=cap)
    args.task_file = args.rubric_file = args.system_file = None
    if args.check is not None:
        from loop_agents_checks.sandbox.shell_command import command_problem

        check_utf8(args.check, "check")
        if (problem := command_problem(args.check)) is not None:
            raise UsageError(f"--check: {problem}")
    if args.rubric is None and args.check is None:
        raise UsageError(
            "no rubric or check given: pass --rubric TEXT, --rubric-file FILE, --check CMD, "
            "or a rubric and a check"
        )
    if not 0 <= args.threshold <= 100:
        raise UsageError(f"--threshold must be from 0 to 100; got {args.threshold:g}")
    if args.max_iterations < 1:
        raise UsageError(f"--max-iterations must be >= 1; got {args.max_iterations}")
    check_model_options(args)


def check_model_options(args: argparse.Namespace) -> None:
    """The model options and settings: ``args.environment`` and ``args.endpoint``, found."""
    args.endpoint = find_endpoint(args, seed=args.seed)


def find_endpoint(args: argparse.Namespace, *, seed: int | None) -> Endpoint:
    """The endpoint the model options and settings name (`resolve_endpoint`); `UsageError` if none.

    Example:
        ```python
        endpoint = find_endpoint(args, seed=args.seed)
        ```
    """
    from loop_agents_cli.models.endpoints import resolve_endpoint
    from loop_agents_cli.models.settings import SettingsError

    try:
        return resolve_endpoint(
            model=args.model,
            base_url=args.base_url,
            gguf=args.gguf,
            structured_output=args.structured_output,
            max_tokens=args.max_tokens,
            threads=args.threads,
            seed=seed,
            environment=_environment(args),
        )
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc


def check_demo(args: argparse.Namespace) -> None:
    """``demo``'s settings: ``args.form_check``, then the model's (`check_model_options`)."""
    from loop_agents_cli.demos.demo_settings import check_review_method, form_check_from_env
    from loop_agents_cli.models.settings import SettingsError

    env = _environment(args)
    try:
        args.form_check = form_check_from_env(env.values)
        check_review_method(args.structured_output or env.get("LOOP_AGENTS_STRUCTURED_OUTPUT"))
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    check_model_options(args)


def _environment(args: argparse.Namespace) -> Environment:
    """The settings (the environment over the ``.env`` file or ``--env-file``), read once."""
    from loop_agents_cli.models.settings import Environment, SettingsError

    if getattr(args, "environment", None) is None:
        try:
            args.environment = Environment.read(args.env_file)
        except SettingsError as exc:
            raise UsageError(str(exc)) from exc
    environment: Environment = args.environment
    return environment


def check_saved_run(args: argparse.Namespace) -> None:
    """``show``'s and ``resume``'s run id: sets ``args.store`` and ``args.saved`` (the run).

    ``resume`` refuses a run another process runs now.
    """
    from loop_agents_cli.store import saved_runs

    if getattr(args, "report", None) is not None:
        from loop_agents_cli.run_report_command import check_page_path

        check_page_path(args.report)
    args.store = saved_runs(getattr(args, "env_file", None))
    args.saved = args.store.find(args.run_id)
    if args.command == "resume" and args.saved.running_elsewhere:
        raise UsageError(
            f"run {args.saved.run_id} is running in process {args.saved.pid}; wait for it "
            f"to end or stop it first"
        )


def check_runs(args: argparse.Namespace) -> None:
    """``runs``'s ``--limit``."""
    if args.limit < 1:
        raise UsageError(f"--limit must be >= 1; got {args.limit}")
