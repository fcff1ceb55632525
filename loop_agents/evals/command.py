"""The ``eval`` command: its arguments, their validation, and running it with progress.

The command line tool adds the subcommand with `add_eval_parser`, turns the parsed
arguments into `EvalOptions` with `eval_options` (every check, the task file included,
happens there, before any model is built or called), builds the model from its own
endpoint options, and runs `run_eval_command`:

```python
parser = add_eval_parser(subcommands)
...
options = eval_options(args)  # EvalUsageError: print it with the usage, exit 2
endpoint = None if options.server else EvalEndpoint(model, judge_method="function_calling")
status = asyncio.run(run_eval_command(options, endpoint))
```

Importing this module is cheap: LangChain and LangGraph are imported only to run.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_agents.evals.arm_names import ARMS, DEFAULT_ARMS
from loop_agents.evals.report_command import add_report_arguments, check_report_path
from loop_agents.evals.tasks import BUNDLED_SETS, Task, TaskFileError, load_tasks

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from rich.console import Console

    from loop_agents.evals.runner import EvalProgress
    from loop_agents.evaluators.judge import JudgeFormat

__all__ = [
    "EvalEndpoint",
    "EvalOptions",
    "EvalUsageError",
    "add_eval_arguments",
    "add_eval_parser",
    "eval_options",
    "run_eval_command",
]

ARM_NAMES: tuple[str, ...] = ARMS

DEFAULT_ARM_NAMES: tuple[str, ...] = DEFAULT_ARMS

EVAL_DESCRIPTION = (
    "Measure whether a loop pays off for your tasks and your model: run every task "
    "under each arm with the same budget of K answers and compare the pass rates. "
    "single: one answer. loop: up to K answers, the feedback from the visible tests or "
    "checks. resample: up to K independent answers, the first that passes the visible "
    "tests or checks (the compute-matched control). judge-loop: up to K answers, the "
    "feedback from an LLM judge only. loop-candidates (only with --arms): the loop with "
    "2 candidate answers per iteration for K/2 iterations (K even). restart (only with "
    "--arms): the loop, but after a repair that did not improve, a fresh sample told "
    "what must hold. diverse-first (only with --arms): 2 first answers, then repair of "
    "the better one (K >= 2). adaptive (only with --arms): the loop, each retry a repair, "
    "a fresh sample or a fresh sample told what must hold, chosen by what paid on the "
    "earlier tasks of the eval (Thompson sampling, kept in the journal). Arms of your "
    "own: --arm NAME=loop,OPTION=VALUE,... (a loop built from options) or --arm "
    "NAME=module:factory (your agent); each is compared with resample and single. "
    "Every arm samples at "
    "the same temperature T unless --arm-temperature sets its own. Code answers are "
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

TASKS is a JSONL file, one task per line, or a bundled set: code, instructions.
With --out, each finished task and arm is also appended to NAME.journal.jsonl beside
it; run the same command again and the pairs already there are not run again.
Exit status: 0 every pair has a result, 1 some failed every try (run again to retry
them), 2 bad arguments or a bad task file, 130 interrupted.
"""


class EvalUsageError(ValueError):
    """A bad argument or task file: print it with the usage line and exit with 2."""


@dataclass(frozen=True)
class EvalOptions:
    """The ``eval`` command's settings, validated, with its tasks loaded.

    Attributes:
        source: TASKS as given.
        tasks: The tasks to run (after ``--tasks`` and ``--limit``).
        arms: The names of the arms to run, built-in and yours, in order.
        iterations: K.
        concurrency: Pairs run at the same time.
        temperature: Every arm's sampling temperature.
        arm_temperatures: Arm name -> its own temperature (``--arm-temperature``).
        judge_temperature: The judge's sampling temperature.
        judge_threshold: The judge's accepting score.
        out: Where the JSON result goes (its journal beside it), or ``None``.
        server: A LangGraph server URL, or ``None`` to run here.
        retries: Tries after the first for a failing pair.
        code_timeout: Seconds a code answer and its tests may run.
        json: Print the JSON result instead of the tables.
        report: Where the HTML page of the result goes, or ``None``.
        seed: The bundled server's random seed (``--seed``, checked by
            `loop_agents.models.endpoints.resolve_endpoint`), or ``None`` for a new one
            per run.
        custom_arms: The arms of your own (``--arm``): name -> a `loop(...)` arm or a
            factory.
        same_first_answer: Start every arm from one first answer per task
            (``--same-first-answer``; `loop_agents.evals.first_answers`).
    """

    source: str
    tasks: tuple[Task, ...]
    arms: tuple[str, ...]
    iterations: int = 4
    concurrency: int = 4
    temperature: float = 1.0
    arm_temperatures: tuple[tuple[str, float], ...] = ()
    judge_temperature: float = 0.0
    judge_threshold: float = 80.0
    out: Path | None = None
    server: str | None = None
    retries: int = 2
    code_timeout: float = 10.0
    json: bool = False
    report: Path | None = None
    seed: int | None = None
    custom_arms: tuple[tuple[str, Any], ...] = ()
    same_first_answer: bool = False


@dataclass(frozen=True)
class EvalEndpoint:
    """The model an eval runs with, built by the command line tool from its options.

    Attributes:
        model: The chat model (also the judge of ``judge-loop`` without ``judge_model``).
        judge_method: How the judge's verdict is requested: a structured-output
            method (``function_calling`` for llama.cpp's server), or ``"text"``
            (``Score: N`` / ``Feedback: ...``, for models without tool calling).
        description: How the model is named in the report and the journal (default:
            its name and endpoint).
        digest: The identity of the model's weights (the SHA-256 of a ``--gguf``
            file), part of the journal's key; ``None`` when not known.
        judge_model: The judge's chat model in ``judge-loop`` (default ``model``): the
            same model on a server of its own (the bundled server's judge process).
        seed: The random seed the model's server was started with (the bundled
            server's), kept in the report; ``None`` when the server keeps its own.
    """

    model: BaseChatModel
    judge_method: JudgeFormat = "json_schema"
    description: str | None = None
    digest: str | None = None
    judge_model: BaseChatModel | None = None
    seed: int | None = None


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
        help=f"the built-in arms to run, of {', '.join(ARM_NAMES)} (default: "
        f"{','.join(DEFAULT_ARM_NAMES)})",
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
    parser.add_argument(
        "--iterations",
        type=int,
        default=4,
        metavar="K",
        help="the budget of answers of every arm (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="task/arm pairs run at the same time (default: %(default)s)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the JSON result here (and resume from it)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        metavar="T",
        help="the sampling temperature of every arm (default: %(default)s)",
    )
    parser.add_argument(
        "--arm-temperature",
        action="append",
        default=[],
        metavar="ARM=T",
        help="one arm's own sampling temperature, e.g. resample=0.7 (repeatable)",
    )
    parser.add_argument(
        "--judge-temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="the sampling temperature of judge-loop's judge (default: %(default)g)",
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
        "--judge-threshold",
        type=float,
        default=80.0,
        metavar="SCORE",
        help="the judge's score (0-100) that accepts an answer in judge-loop "
        "(default: %(default)g)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        metavar="N",
        help="tries after the first for a pair that fails, e.g. on a server error "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--code-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a code answer and its tests may run (default: %(default)g)",
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


def add_eval_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.ArgumentParser:
    """Add the ``eval`` subcommand to a command's subparsers and return its parser.

    Args:
        commands: What ``parser.add_subparsers()`` returned.
        parents: Parsers whose arguments it also takes (e.g. the endpoint options).

    Example:
        ```python
        commands = parser.add_subparsers(dest="command")
        eval_parser = add_eval_parser(commands, parents=[endpoint_options])
        ```
    """
    parser = commands.add_parser(
        "eval",
        help="measure whether looping beats answering once and sampling again",
        description=EVAL_DESCRIPTION,
        epilog=EVAL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=list(parents),
    )
    add_eval_arguments(parser)
    return parser


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _arm_temperatures(
    values: Sequence[str], custom: Sequence[str] = ()
) -> tuple[tuple[str, float], ...]:
    """``--arm-temperature ARM=T`` values, checked (a later one for an arm wins)."""
    found: dict[str, float] = {}
    names = (*ARM_NAMES, *custom)
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
            )
        found[arm] = temperature
    return tuple(found.items())


def _custom_arms(values: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """``--arm NAME=SPEC`` values, each built (a factory imported) and checked."""
    if not values:
        return ()
    from loop_agents.evals.arm_specs import parse_arm_spec

    found: dict[str, Any] = {}
    for value in values:
        try:
            name, arm = parse_arm_spec(value)
        except ValueError as exc:
            raise EvalUsageError(str(exc)) from None
        if name in found:
            raise EvalUsageError(f"--arm {value!r}: an arm named {name!r} is already given")
        found[name] = arm
    return tuple(found.items())


def eval_options(args: argparse.Namespace) -> EvalOptions:
    """Validate the parsed ``eval`` arguments and load the tasks; nothing is run.

    Raises:
        EvalUsageError: an argument is out of range, an arm is unknown, the task file
            is malformed (its line and field named), or ``--tasks`` names an unknown id.

    Example:
        ```python
        options = eval_options(parser.parse_args(["eval", "instructions", "--limit", "3"]))
        ```
    """
    custom_given: Sequence[str] = getattr(args, "custom_arm", None) or []
    given = ",".join(DEFAULT_ARM_NAMES) if args.arms is None else args.arms
    arms = _names(given) or []
    unknown = [a for a in arms if a not in ARM_NAMES]
    if (not arms and not custom_given) or unknown:
        raise EvalUsageError(
            f"--arms {given!r}: give a comma-separated list of {', '.join(ARM_NAMES)}"
            + (" (for an arm of your own, --arm NAME=SPEC)" if unknown else "")
        )
    for name, value, low in (
        ("--iterations", args.iterations, 1),
        ("--concurrency", args.concurrency, 1),
        ("--retries", args.retries, 0),
    ):
        if value < low:
            raise EvalUsageError(f"{name} must be >= {low}; got {value}")
    if args.limit is not None and args.limit < 1:
        raise EvalUsageError(f"--limit must be >= 1; got {args.limit}")
    for flag, temperature in (
        ("--temperature", args.temperature),
        ("--judge-temperature", args.judge_temperature),
    ):
        if not 0 <= temperature <= 2:
            raise EvalUsageError(f"{flag} must be from 0 to 2; got {temperature:g}")
    custom_arms = _custom_arms(custom_given)
    arm_temperatures = _arm_temperatures(args.arm_temperature, [n for n, _ in custom_arms])
    for name, arm in custom_arms:
        budget = getattr(arm, "check_budget", None)
        if budget is not None:
            try:
                budget(args.iterations, name)
            except ValueError as exc:
                raise EvalUsageError(f"--arm {name}: {exc}") from None
    if ("loop-candidates" in arms and args.iterations % 2) or (
        "diverse-first" in arms and args.iterations < 2
    ):
        from loop_agents.evals.arms import check_arm_budget

        try:
            check_arm_budget(arms, args.iterations)
        except ValueError as exc:
            raise EvalUsageError(str(exc)) from None
    if not 0 <= args.judge_threshold <= 100:
        raise EvalUsageError(
            f"--judge-threshold must be from 0 to 100; got {args.judge_threshold:g}"
        )
    if not args.code_timeout > 0:
        raise EvalUsageError(f"--code-timeout must be > 0 seconds; got {args.code_timeout:g}")
    server = args.server
    if server is not None:
        if args.seed is not None:
            raise EvalUsageError(
                "--seed sets the bundled llama.cpp server's seed; with --server the "
                "LangGraph server's model samples with its own: drop --seed"
            )
        if custom_arms:
            raise EvalUsageError(
                "--arm: arms of your own run here, not on a LangGraph server (it runs the "
                "built-in arms only): drop --server, or run those arms apart"
            )
        if args.same_first_answer:
            raise EvalUsageError(
                "--same-first-answer shares the first answers of arms run here; with "
                "--server each pair runs on the LangGraph server: drop one of them"
            )
        if "adaptive" in arms:
            raise EvalUsageError(
                "adaptive learns across the tasks of an eval, which runs here (on a "
                "LangGraph server each pair runs alone): drop --server, or adaptive"
            )
        from loop_agents.evals.server import check_server_url

        try:
            server = check_server_url(server)
        except ValueError as exc:
            raise EvalUsageError(f"--server: {exc}") from None
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
    except TaskFileError as exc:
        raise EvalUsageError(str(exc)) from None
    return EvalOptions(
        source=args.tasks_source,
        tasks=tuple(tasks),
        arms=tuple(dict.fromkeys([*arms, *(name for name, _ in custom_arms)])),
        iterations=args.iterations,
        concurrency=args.concurrency,
        temperature=args.temperature,
        arm_temperatures=arm_temperatures,
        judge_temperature=args.judge_temperature,
        judge_threshold=args.judge_threshold,
        out=out,
        server=server,
        retries=args.retries,
        code_timeout=args.code_timeout,
        json=args.json,
        report=report,
        seed=args.seed,
        custom_arms=custom_arms,
        same_first_answer=args.same_first_answer,
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
            line = f"{e.task_id} / {e.arm}: failed every try ({e.error}); not counted"
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
        endpoint: The model; ``None`` only with ``options.server``.
        console: Where the tables go (default: stdout).
        progress_console: Where the progress goes (default: stderr); a bar on a
            terminal, else one line per finished task and arm (e.g. into a log file).

    Returns:
        0 when every pair has a result, 1 when some failed every try.

    Raises:
        EvalUsageError: no endpoint and no server, the journal beside ``--out``
            belongs to an eval with other settings, or an arm factory (``--arm``) does
            not return an agent for the first task.

    Example:
        ```python
        status = await run_eval_command(options, EvalEndpoint(ChatOpenAI(model="gpt-5.4-mini")))
        ```
    """
    from loop_agents.console.output import command_console
    from loop_agents.evals.factory_arm import ArmFactoryError
    from loop_agents.evals.journal import JournalError
    from loop_agents.evals.report import render_report
    from loop_agents.evals.runner import arun_eval

    console = console or command_console()
    progress_console = progress_console or command_console(stderr=True)
    model_options: dict[str, Any] = {}
    if options.server is None:
        if endpoint is None:
            raise EvalUsageError("no model: configure an endpoint, or give --server URL")
        model_options = {
            "judge_method": endpoint.judge_method,
            "model_id": endpoint.description,
            "model_digest": endpoint.digest,
            "model_seed": endpoint.seed,
            "judge": endpoint.judge_model,
        }
    with _ProgressView(progress_console) as view:
        try:
            report = await arun_eval(
                list(options.tasks),
                endpoint.model if endpoint is not None and options.server is None else None,
                arms=_arms_of(options),
                iterations=options.iterations,
                concurrency=options.concurrency,
                temperature=options.temperature,
                arm_temperatures=dict(options.arm_temperatures),
                judge_temperature=options.judge_temperature,
                judge_threshold=options.judge_threshold,
                out=options.out,
                progress=view,
                retries=options.retries,
                code_timeout=options.code_timeout,
                server=options.server,
                same_first_answer=options.same_first_answer,
                **model_options,
            )
        except (JournalError, ArmFactoryError) as exc:
            raise EvalUsageError(str(exc)) from None
    if options.json:
        text = json.dumps(report.to_json(), ensure_ascii=False, indent=2)
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        render_report(report, console)
        if options.out is not None:
            console.print(f"Results: {options.out}", markup=False, highlight=False)
    if options.report is not None:
        from loop_agents.evals.html_report import write_eval_page

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
