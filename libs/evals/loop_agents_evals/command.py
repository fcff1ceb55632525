"""The ``eval`` command: its arguments, their checks, and running it with progress.

`eval_options` checks every argument, the task file and the sandbox before a model
library is imported; `run_eval_command` runs the eval and prints its report; `draw_again`
shows a finished one (``--from``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_agents_cli.console.html_page import check_report_path
from loop_agents_cli.errors import UsageError
from loop_agents_cli.parser import ENDPOINTS, PROG, Command, model_options
from loop_agents_evals.report_command import (
    add_report_arguments,
    draw_from_json,
    report_from_json,
)
from loop_agents_evals.settings import (
    ARMS,
    ARMS_TEXT,
    DEFAULT_ARMS,
    PAIR_TIMEOUT,
    EvalSettings,
    check_arm_budget,
    check_count,
    did_you_mean,
    server_conflict,
)
from loop_agents_evals.tasks import BUNDLED_SETS, Task, TaskFileError, check_sandbox, load_tasks

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from rich.console import Console

    from loop_agents.evaluators.judge import JudgeFormat
    from loop_agents_evals.runner import EvalProgress

__all__ = [
    "EVAL_COMMAND",
    "EvalEndpoint",
    "EvalOptions",
    "EvalUsageError",
    "add_eval_arguments",
    "eval_arguments",
    "eval_options",
    "run_eval_command",
]

GRACE_SECONDS = 1.5
"""How long an eval may wind down after Ctrl-C before the process ends anyway."""

TASKS_NEED_SANDBOX = "the code tasks' answers run in the sandbox, which cannot run here:"

EVAL_DESCRIPTION = (
    "Measure whether a loop pays off for your tasks and your model: run every task "
    "under each arm with the same budget of K answers, compare the pass rates, and end "
    "with the arm to use and its code. single: one answer. loop: up to K answers, each "
    "retry a repair (the answer and the feedback from the visible tests or checks). "
    "resample: up to K independent answers, the first that passes the visible tests or "
    "checks. judge-loop: up to K answers, the feedback from an LLM judge only. Only with "
    "--arms: loop-candidates (2 answers per iteration, K even), restart (a fresh sample "
    "told what must hold after a repair that did not improve), diverse-first (2 first "
    "answers, then repair of the better one), adaptive (each retry a repair, a fresh "
    "sample or an informed one, chosen by what paid on the earlier tasks). Arms of your "
    "own: --arm NAME=loop,KEY=VALUE,... or --arm NAME=module:factory. Every arm samples "
    "at the same temperature T unless --arm-temperature sets its own. Code answers are "
    "graded by hidden tests the model never sees."
)

EVAL_EXAMPLES = """\
examples:
  loop-agents eval instructions --limit 5 --iterations 3
  loop-agents eval code --arms single,loop,resample --out code.json
  loop-agents eval code --arms loop,loop-candidates --iterations 4 --arm-temperature resample=0.7
  loop-agents eval my_tasks.jsonl --tasks t1,t7 --concurrency 8 --out my.json
  loop-agents eval code --server http://127.0.0.1:2024 --out code.json
  loop-agents eval code --arms single,resample --arm fresh=loop,history=feedback_log,restart=on
  loop-agents eval code --arms resample --arm mine=my_arms:make_agent --out mine.json

--arm NAME=SPEC (repeatable) adds an arm of your own to those of --arms (give --arms ''
to run yours alone). SPEC is module:factory, a function (task, model, settings) -> agent
imported from the current folder, or loop / judge-loop followed by ,KEY=VALUE options:
history=full|last_attempt|feedback_log, feedback=default|plain, candidates=N,
select=last|best, patience=N, restart=on|N, first=K, stagnation=on, adaptive=on.
Such a loop repairs every retry, as the loop arm does, unless restart= or adaptive=
chooses what a retry is sent.

TASKS is a JSONL file, one task per line, or a bundled set: code, instructions.
With --out, each finished task and arm is also appended to NAME.journal.jsonl beside
it; run the same command again and the pairs already there are not run again. A pair
still running after --pair-timeout seconds is an error, run again on the next run.
Exit status: 0 every pair has a result, 1 some failed every try or the model's server
died (run again to retry them), 2 bad arguments or a bad task file, 130 interrupted.
"""


class EvalUsageError(ValueError):
    """A bad argument or task file: print it with the usage line and exit with 2."""


@dataclass(frozen=True)
class EvalOptions:
    """The ``eval`` command's arguments, checked, with its tasks loaded.

    Attributes:
        source: TASKS as given.
        tasks: The tasks to run (after ``--tasks`` and ``--limit``).
        arms: The names of the arms to run, built-in and yours, in order.
        settings: The `EvalSettings` of the arguments (the model's are added to run).
        iterations: K.
        concurrency: Pairs run at the same time.
        out: Where the JSON result goes (its journal beside it), or ``None``.
        retries: Tries after the first for a failing pair.
        pair_timeout: Seconds one task/arm pair may take.
        json: Print the JSON result instead of the tables.
        report: Where the HTML page goes, or ``None``.
        seed: The bundled server's random seed, or ``None`` for a new one per run.
        custom_arms: The arms of your own (``--arm``): name -> a `loop(...)` or a factory.
    """

    source: str
    tasks: tuple[Task, ...]
    arms: tuple[str, ...]
    settings: EvalSettings = field(default_factory=EvalSettings)
    iterations: int = 4
    concurrency: int = 4
    out: Path | None = None
    retries: int = 2
    pair_timeout: float = PAIR_TIMEOUT
    json: bool = False
    report: Path | None = None
    seed: int | None = None
    custom_arms: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class EvalEndpoint:
    """The model an eval runs with, from the command's endpoint options.

    Attributes:
        model: The chat model (also the judge without ``judge_model``).
        judge_method: How the judge's verdict is requested (`EvalSettings.judge_method`).
        description: The model's name in the report and the journal.
        digest: The SHA-256 of a ``--gguf`` file (the journal's key), or ``None``.
        judge_model: The judge's chat model (the bundled server's judge process).
        seed: The seed the model's server was started with, or ``None``.
        server_failure: Says why the bundled server stopped (`EvalSettings`'
            ``model_server_failure``).
    """

    model: BaseChatModel
    judge_method: JudgeFormat = "json_schema"
    description: str | None = None
    digest: str | None = None
    judge_model: BaseChatModel | None = None
    seed: int | None = None
    server_failure: Callable[[], str | None] | None = None


_NUMBERS: tuple[tuple[str, type, object, str, str], ...] = (
    ("--iterations", int, 4, "K", "the budget of answers of every arm (default: %(default)s)"),
    ("--concurrency", int, 4, "N", "task/arm pairs run at the same time (default: %(default)s)"),
    ("--temperature", float, 1.0, "T",
     "the sampling temperature of every arm (default: %(default)s)"),
    ("--judge-temperature", float, 0.0, "T",
     "the sampling temperature of judge-loop's judge (default: %(default)g)"),
    ("--judge-threshold", float, 80.0, "SCORE",
     "the judge's score (0-100) that accepts an answer in judge-loop (default: %(default)g)"),
    ("--retries", int, 2, "N",
     "tries after the first for a pair that fails, e.g. on a server error (default: %(default)s)"),
    ("--code-timeout", float, 10.0, "SECONDS",
     "how long a code answer and its tests may run (default: %(default)g)"),
    ("--pair-timeout", float, PAIR_TIMEOUT, "SECONDS",
     "how long one task/arm pair may take; then it is an error, run again by the next run "
     "(default: %(default)g, an hour)"),
)  # fmt: skip
"""The numeric options: flag, type, default, metavar, help."""


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``eval`` arguments (not the model endpoint's) to ``parser``.

    Example:
        ```python
        parser = argparse.ArgumentParser(prog="loop-agents eval")
        add_eval_arguments(parser)
        ```
    """
    parser.add_argument(
        "tasks_source",
        nargs="?",
        metavar="TASKS",
        help=f"a JSONL task file, or a bundled set: {', '.join(BUNDLED_SETS)} (with --from: "
        f"optional, for the tasks' prompts in the page)",
    )
    parser.add_argument(
        "--arms",
        metavar="ARM,...",
        help=f"the built-in arms to run, of {ARMS_TEXT} (default: {','.join(DEFAULT_ARMS)})",
    )
    parser.add_argument(
        "--arm",
        dest="custom_arm",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="an arm of your own (repeatable): NAME=module:factory, or "
        "NAME=loop[,KEY=VALUE...] / NAME=judge-loop[,...]; see below",
    )
    for flag, kind, default, metavar, text in _NUMBERS:
        parser.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the JSON result here (and resume from it)"
    )
    parser.add_argument(
        "--arm-temperature",
        action="append",
        default=[],
        metavar="ARM=T",
        help="one arm's own sampling temperature, e.g. resample=0.7 (repeatable)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the random seed of the bundled llama.cpp server (default: a new one every "
        "run, shown in the report, so two runs are independent samples); the same seed "
        "with --concurrency 1 samples the same answers again",
    )
    parser.add_argument(
        "--limit", type=int, metavar="N", help="run only the first N tasks (after --tasks)"
    )
    parser.add_argument(
        "--tasks", dest="task_ids", metavar="ID,...", help="run only the tasks with these ids"
    )
    parser.add_argument(
        "--same-first-answer",
        action="store_true",
        help="sample each task's first answer once and start every arm from it, so the "
        "arms differ only in what they do after it (each arm is still charged that call)",
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        help="run the tasks on this LangGraph server (its graph eval_task, its model)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON result instead of the tables"
    )
    add_report_arguments(parser)


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _arm_temperatures(values: Sequence[str], custom: Sequence[str]) -> dict[str, float]:
    """``--arm-temperature ARM=T`` values, checked (a later one for an arm wins)."""
    found: dict[str, float] = {}
    names = (*ARMS, *custom)
    for value in values:
        arm, sep, number = value.partition("=")
        arm = arm.strip()
        try:
            temperature = float(number)
        except ValueError:
            temperature = math.nan
        if not sep or arm not in names or not 0 <= temperature <= 2:
            raise EvalUsageError(
                f"--arm-temperature {value!r}: give ARM=T with ARM one of "
                f"{', '.join(names)} and T from 0 to 2, e.g. resample=0.7"
                + did_you_mean(arm, names)
            )
        found[arm] = temperature
    return found


def _custom_arms(values: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """``--arm NAME=SPEC`` values, each built (a factory imported) and checked."""
    from loop_agents_evals.arm_specs import parse_arm_spec

    found: dict[str, Any] = {}
    for value in values:
        try:
            name, arm = parse_arm_spec(value)
        except ValueError as exc:
            raise EvalUsageError(str(exc)) from None
        found[name] = arm
    return tuple(found.items())


def _settings(args: argparse.Namespace, custom: Sequence[str]) -> EvalSettings:
    """The `EvalSettings` of the arguments; a refused setting is named by its option."""
    try:
        return EvalSettings(
            temperature=args.temperature,
            arm_temperatures=_arm_temperatures(args.arm_temperature, custom),
            judge_temperature=args.judge_temperature,
            judge_threshold=args.judge_threshold,
            code_timeout=args.code_timeout,
            same_first_answer=args.same_first_answer,
            server=args.server,
        )
    except (TypeError, ValueError) as exc:  # "judge_threshold must be ..." names the option
        option, _, rest = str(exc).partition(" ")
        raise EvalUsageError(f"--{option.replace('_', '-')} {rest}") from None


def eval_options(args: argparse.Namespace) -> EvalOptions:
    """Validate the parsed ``eval`` arguments and load the tasks; nothing is run.

    The arguments that need no library are checked first, then the task file and the
    sandbox (for code tasks), then the arms of your own are built (importing a
    factory's module, or the loop's controls).

    Raises:
        EvalUsageError: an argument is out of range, an arm is unknown (with the closest
            name), the task file is malformed (its line and field named), ``--tasks``
            names an unknown id, or code tasks meet a machine whose sandbox cannot run
            code.

    Example:
        ```python
        options = eval_options(parser.parse_args(["eval", "instructions", "--limit", "3"]))
        ```
    """
    custom_given: Sequence[str] = getattr(args, "custom_arm", None) or []
    custom = [value.partition("=")[0].strip() for value in custom_given]
    repeated = [name for number, name in enumerate(custom) if name in custom[:number]]
    if repeated:
        raise EvalUsageError(f"--arm: an arm named {repeated[0]!r} is already given")
    given = ",".join(DEFAULT_ARMS) if args.arms is None else args.arms
    arms = _names(given) or []
    unknown = [a for a in arms if a not in ARMS]
    if (not arms and not custom_given) or unknown:
        named = ", ".join(f"{a!r}{did_you_mean(a, ARMS)}" for a in unknown)
        raise EvalUsageError(
            f"--arms {given!r}: give a comma-separated list of {ARMS_TEXT}"
            + (
                f" ({named}: not a built-in arm; for one of your own, --arm NAME=SPEC)"
                if unknown
                else ""
            )
        )
    try:
        for name, value, low in (
            ("--iterations", args.iterations, 1),
            ("--concurrency", args.concurrency, 1),
            ("--retries", args.retries, 0),
            *([("--limit", args.limit, 1)] if args.limit is not None else []),
        ):
            check_count(name, value, low)
        check_arm_budget(arms, args.iterations)
    except ValueError as exc:
        raise EvalUsageError(str(exc)) from None
    if not (math.isfinite(args.pair_timeout) and args.pair_timeout > 0):
        raise EvalUsageError(
            f"--pair-timeout must be a finite number of seconds > 0; got {args.pair_timeout:g}"
        )
    settings = _settings(args, custom)
    if settings.server is not None:
        if args.seed is not None:
            raise EvalUsageError(
                "--seed sets the bundled llama.cpp server's seed; with --server the "
                "LangGraph server's model samples with its own: drop --seed"
            )
        learn = [arm for arm in arms if arm == "adaptive"]
        conflict = server_conflict(custom, args.same_first_answer, learn)
        if conflict:
            raise EvalUsageError(f"--server: {conflict}")
    out: Path | None = args.out
    if out is not None and out.is_dir():
        raise EvalUsageError(
            f"--out {str(out)!r} is a folder; give a file name such as results.json"
        )
    if args.tasks_source is None:
        raise EvalUsageError(
            "give TASKS (a task file, or a bundled set: code, instructions), or --from "
            "OUT.json --report PAGE.html to draw a finished eval again"
        )
    try:
        report = check_report_path(args.report, out=out)
    except ValueError as exc:
        raise EvalUsageError(str(exc)) from None
    ids = _names(args.task_ids)
    if args.task_ids is not None and not ids:
        raise EvalUsageError("--tasks is empty; give task ids separated by commas")
    try:
        tasks = load_tasks(args.tasks_source, limit=args.limit, ids=ids)
        if settings.server is None:
            check_sandbox(tasks)
    except TaskFileError as exc:
        raise EvalUsageError(str(exc)) from None
    except RuntimeError as exc:
        from loop_agents_checks.sandbox import IsolationUnavailable

        if not isinstance(exc, IsolationUnavailable):  # only then can no code answer run
            raise
        raise EvalUsageError(f"{TASKS_NEED_SANDBOX} {exc}") from None
    custom_arms = _custom_arms(custom_given)  # imports factories, builds loops: the last check
    for name, arm in custom_arms:
        budget = getattr(arm, "check_budget", None)
        if budget is not None:
            try:
                budget(args.iterations, name)
            except ValueError as exc:
                raise EvalUsageError(f"--arm {name}: {exc}") from None
    return EvalOptions(
        source=args.tasks_source,
        tasks=tuple(tasks),
        arms=tuple(dict.fromkeys([*arms, *custom])),
        settings=settings,
        iterations=args.iterations,
        concurrency=args.concurrency,
        out=out,
        retries=args.retries,
        pair_timeout=args.pair_timeout,
        json=args.json,
        report=report,
        seed=args.seed,
        custom_arms=custom_arms,
    )


class _ProgressView:
    """A rich progress bar on a terminal; elsewhere one line per finished pair."""

    def __init__(self, console: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.console = console
        self.live = console.is_terminal
        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not self.live,
        )
        self.task_id = self.bar.add_task("eval", total=None)

    def __enter__(self) -> _ProgressView:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, event: EvalProgress) -> None:
        self.bar.update(self.task_id, total=event.total, completed=event.done)
        line: str | None = None
        if event.result is None and event.error is None and event.retrying is None:
            line = f"{event.total} task/arm pairs" + (
                f", {event.resumed} done before (resumed)" if event.resumed else ""
            )
        elif event.retrying is not None:
            r = event.retrying
            line = f"{r.task_id} / {r.arm}: try {r.attempts} failed ({r.error}); retrying"
        elif event.error is not None:
            e = event.error
            line = f"{e.task_id} / {e.arm}: no result ({e.error}); not counted"
        elif event.result is not None and not self.live:
            r2 = event.result
            verdict = "passed" if r2.passed else "failed"
            line = (
                f"[{event.done}/{event.total}] {r2.task_id} / {r2.arm}: {verdict} "
                f"({_count(r2.iterations, 'answer')}, {_count(r2.model_calls, 'call')}, "
                f"{r2.seconds:.1f} s)"
            )
        if line is not None:
            self.console.print(line, markup=False, highlight=False)


@contextlib.contextmanager
def _ends_soon_after_ctrl_c(console: Console) -> Iterator[None]:
    """On Ctrl-C, cancel the eval and end the process if it has not ended in `GRACE_SECONDS`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def exit_now() -> None:
        console.print(
            "eval interrupted; what finished is in the journal: run the same command "
            "(with the same --out) to resume",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(130)

    def pressed(number: int, frame: Any) -> None:
        timer = threading.Timer(GRACE_SECONDS, exit_now)
        timer.daemon = True
        timer.start()
        if callable(previous):
            previous(number, frame)  # asyncio's: cancels the eval, KeyboardInterrupt after
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, pressed)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def run_eval_command(
    options: EvalOptions,
    endpoint: EvalEndpoint | None,
    *,
    console: Console | None = None,
    progress_console: Console | None = None,
) -> int:
    """Run the eval with progress, print the tables (or the JSON), return the exit status.

    Args:
        options: From `eval_options`.
        endpoint: The model; ``None`` only with ``options.settings.server``.
        console: Where the tables go (default: stdout).
        progress_console: Where the progress goes (default: stderr); a bar on a
            terminal, else one line per finished task and arm (e.g. into a log file).

    Returns:
        0 when every pair has a result, 1 when some failed every try or the model's
        server died (the command then says why; what finished is in the journal).

    Raises:
        EvalUsageError: no endpoint and no server, the journal beside ``--out``
            belongs to an eval with other settings, or an arm factory (``--arm``) does
            not return an agent for the first task.

    Example:
        ```python
        status = await run_eval_command(options, EvalEndpoint(ChatOpenAI(model="gpt-5.4-mini")))
        ```
    """
    from loop_agents_cli.console.output import command_console
    from loop_agents_evals.factory_arm import ArmFactoryError
    from loop_agents_evals.journal import JournalError
    from loop_agents_evals.report import render_report
    from loop_agents_evals.runner import ModelServerDied, arun_eval

    console = console or command_console()
    progress_console = progress_console or command_console(stderr=True)
    settings = options.settings
    if settings.server is None:
        if endpoint is None:
            raise EvalUsageError("no model: configure an endpoint, or give --server URL")
        settings = dataclasses.replace(
            settings,
            judge=endpoint.judge_model,
            judge_method=endpoint.judge_method,
            model_id=endpoint.description,
            model_digest=endpoint.digest,
            model_seed=endpoint.seed,
            model_server_failure=endpoint.server_failure,
        )
    with _ProgressView(progress_console) as view, _ends_soon_after_ctrl_c(progress_console):
        try:
            report = await arun_eval(
                list(options.tasks),
                endpoint.model if endpoint is not None and settings.server is None else None,
                arms=_arms_of(options),
                iterations=options.iterations,
                concurrency=options.concurrency,
                out=options.out,
                retries=options.retries,
                pair_timeout=options.pair_timeout,
                settings=settings,
                progress=view,
            )
        except (JournalError, ArmFactoryError) as exc:
            raise EvalUsageError(str(exc)) from None
        except ModelServerDied:  # the command names the server, how it ended, its log
            kept = f" (kept in {options.out})" if options.out is not None else ""
            progress_console.print(
                f"the eval stopped: the model's server died, so no pair can finish; what "
                f"finished is kept{kept}: run the same command again to resume",
                markup=False,
                highlight=False,
            )
            return 1
    if options.json:
        text = json.dumps(report.to_json(), ensure_ascii=False, indent=2)
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        render_report(report, console)
        if options.out is not None:
            console.print(f"Results: {options.out}", markup=False, highlight=False)
    if options.report is not None:
        from loop_agents_evals.html_report import write_eval_page

        where = progress_console if options.json else console
        try:
            write_eval_page(options.report, report.to_json(), tasks=options.tasks)
        except OSError as exc:
            again = f"; draw it again with --from {options.out}" if options.out else ""
            progress_console.print(
                f"cannot write the report: {exc}{again}", markup=False, soft_wrap=True
            )
            return 1
        where.print(f"Report: {options.report}", markup=False, highlight=False, soft_wrap=True)
    return 0 if report.complete else 1


def _arms_of(options: EvalOptions) -> tuple[str, ...] | dict[str, Any]:
    """What `arun_eval` is given: the names, or with arms of your own, names -> arms."""
    if not options.custom_arms:
        return options.arms
    custom = dict(options.custom_arms)
    return {name: custom.get(name, name) for name in options.arms}


def _count(number: int, noun: str) -> str:
    """``1 answer``, ``3 answers``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _stable_name(kind: str, model: str, base_url: str | None) -> str:
    """The model's name in the journal, the same every run (the bundled server's port varies)."""
    if kind == "local":
        return f"{model} (bundled llama.cpp server)"
    return f"{model} at {base_url or 'OpenAI'}"


def _weights_digest(gguf: str | None) -> str | None:
    """The SHA-256 of a ``--gguf`` file (cached by path, size and mtime), else ``None``."""
    if gguf is None:
        return None
    from loop_agents_cli.models.file_identity import file_digest

    try:
        return file_digest(gguf)
    except OSError as exc:
        raise UsageError(f"cannot read the model file {gguf!r}: {exc}") from exc


def eval_(args: argparse.Namespace) -> int:
    """Run the eval: check every argument and the task file, resolve the model, run it."""
    if args.from_json is not None:  # a finished eval's page: nothing runs
        return draw_again(args)
    try:  # every argument, before a model library is imported: as quick as --help
        options = eval_options(args)
    except EvalUsageError as exc:
        raise UsageError(str(exc)) from exc
    from loop_agents_cli.arguments import find_endpoint
    from loop_agents_cli.models.local_model import MAX_SEED, LocalModelError
    from loop_agents_cli.models.settings import SettingsError

    try:
        if options.settings.server is not None:
            if args.base_url or args.gguf:
                raise UsageError(
                    "--server runs the tasks on the server's own model: drop --base-url/--gguf"
                )
            return asyncio.run(run_eval_command(options, None))
        endpoint = find_endpoint(args, seed=options.seed)
        if endpoint.spec.kind == "local" and endpoint.seed is None:
            # a fresh server repeats llama.cpp's fixed seed: runs would not be samples
            endpoint.seed = secrets.randbelow(MAX_SEED + 1)
        with endpoint:
            print(endpoint.describe(), file=sys.stderr)
            spec = endpoint.spec
            model = EvalEndpoint(
                # no retries inside the client: a server error fails the pair, which is
                # reported and tried again from its start (--retries), and every request
                # the server answered is one of the pair's model calls
                endpoint.chat_model(max_retries=0),
                judge_model=endpoint.chat_model(role="judge", max_retries=0),
                judge_method=spec.structured_output_method,
                description=_stable_name(spec.kind, spec.model, spec.base_url),
                digest=_weights_digest(spec.gguf) if spec.kind == "local" else None,
                seed=endpoint.seed,
                server_failure=endpoint.server_failure,
            )
            status = asyncio.run(run_eval_command(options, model))
            died = endpoint.server_failure()
            if died is not None:  # every pair after it failed: this is why
                print(f"{PROG}: error: {died}", file=sys.stderr)
                return 1
            return status
    except (EvalUsageError, SettingsError, LocalModelError) as exc:
        raise UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; run the same command (with the same --out) to resume",
            file=sys.stderr,
        )
        return 130


def eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``loop-agents eval``: the eval's own and the model's."""
    add_eval_arguments(parser)
    model_options(parser)


EVAL_COMMAND = Command(
    "eval",
    "measure whether looping beats answering once and sampling again",
    EVAL_DESCRIPTION,
    eval_arguments,
    "loop_agents_evals.command:eval_",
    EVAL_EXAMPLES + "\n" + ENDPOINTS,
)
"""``loop-agents eval``, added to the command by this distribution's entry point."""

_NOT_RUN_OPTIONS = {"report", "from_json", "tasks_source"}


def run_options_given(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` that differ from their defaults and only matter to a run.

    Example:
        ```python
        run_options_given(parser.parse_args(["eval", "--from", "r.json", "--limit", "3"]))
        # ['--limit']
        ```
    """
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
