"""The checks of a command's arguments that need no model library: run before it is imported.

A subcommand's handler imports LangChain, LangGraph and the OpenAI client (seconds on a
loaded machine). Bad arguments must be reported as fast as ``--help`` answers, so each
`loop_agents.cli.parser.Command` may name a check from here, which `loop_agents.cli.app`
runs first. A check raises `UsageError` (exit status 2) and may fill in what it read
(e.g. a task read from a file or stdin becomes ``args.task``), so that the handler does
not read it twice. Only the standard library and light modules of this package are
imported here.
"""

from __future__ import annotations

import argparse

from loop_agents.cli.errors import UsageError
from loop_agents.cli.inputs import check_utf8, text_argument


def check_run(args: argparse.Namespace) -> None:
    """``run``'s arguments: the texts (read now, once), a judge or a check, the numbers.

    ``--check``'s program must be found (`loop_agents.sandbox.shell_command`, light).

    Afterwards ``args.task``, ``args.rubric`` and ``args.system`` hold the texts (``None``
    when not given) and the ``--*-file`` options are ``None``; calling it again is a
    no-op.
    """
    if args.max_file_bytes < 1:
        raise UsageError(f"--max-file-bytes must be >= 1; got {args.max_file_bytes}")
    cap = args.max_file_bytes
    args.task = text_argument(args.task, args.task_file, "task", required=True, limit=cap)
    args.rubric = text_argument(args.rubric, args.rubric_file, "rubric", required=False, limit=cap)
    args.system = text_argument(args.system, args.system_file, "system", required=False, limit=cap)
    args.task_file = args.rubric_file = args.system_file = None
    if args.check is not None:
        from loop_agents.sandbox.shell_command import command_problem

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
    """The model options' forms, and the settings of the environment and ``--env-file``."""
    from loop_agents.models.settings import (
        Environment,
        ModelSettings,
        SettingsError,
        parse_seed,
    )

    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be >= 1; got {args.max_tokens}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1; got {args.threads}")
    if args.model is not None and not args.model.strip():
        raise UsageError("--model is empty; give a model name")
    try:
        if getattr(args, "seed", None) is not None:
            parse_seed(args.seed, "--seed")
        ModelSettings.from_env(Environment.read(args.env_file).values)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc


def check_saved_run(args: argparse.Namespace) -> None:
    """``show``'s and ``resume``'s run id: a saved run must have it (or start with it)."""
    from loop_agents.cli.store import RunStore, store_home
    from loop_agents.models.settings import Environment, SettingsError

    try:
        env = Environment.read(getattr(args, "env_file", None))
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    RunStore(store_home(env.values)).find(args.run_id)


def check_runs(args: argparse.Namespace) -> None:
    """``runs``'s ``--limit``."""
    if args.limit < 1:
        raise UsageError(f"--limit must be >= 1; got {args.limit}")
