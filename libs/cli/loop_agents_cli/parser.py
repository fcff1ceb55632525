"""The command's arguments: one `Command` per subcommand, and the parser built from them.

This module imports nothing heavy, so that ``loop-agents --help`` is quick: a command's
handler (``"module:function"``) is imported only when the command runs. Adding a
subcommand is one more `Command` in `COMMANDS`, with a function that adds its arguments
and a handler module.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

PROG = "loop-agents"

STRUCTURED_OUTPUT_METHODS = ("json_schema", "function_calling", "json_mode", "text")
"""The values of ``--structured-output`` (`loop_agents_cli.models.settings`)."""

DEMOS = ("song-lyrics",)

EXIT_STATUSES = """\
exit status:
  0    the loop ran (whatever stopped it: see its stop reason)
  1    the run failed (a server error, a judge without a valid verdict, a lost
       connection); the result so far is printed, and a saved run can be resumed
  2    bad arguments or settings, or no model endpoint
  130  interrupted (Ctrl-C); a saved run can be resumed
"""

ENDPOINTS = """\
Which model: --base-url or --gguf; else OPENAI_BASE_URL, LOOP_AGENTS_GGUF or
OPENAI_API_KEY (the environment, then a .env file); else a running Ollama
(LOOP_AGENTS_OLLAMA_URL, default http://127.0.0.1:11434; the model from --model or
LOOP_AGENTS_MODEL, else the first one it lists); else the bundled offline model (the
`local` extra). The choice is printed in one line at the start. The API key is read
from OPENAI_API_KEY only, never from an option, and never saved.
"""

RUN_EXAMPLES = f"""\
examples:
  loop-agents run "Write a limerick about LangGraph." --rubric "Five lines, AABBA, funny."
  loop-agents run "Write fizzbuzz(n) in Python." \\
      --check 'cp {{answer_file}} fizz.py && python3 -m pytest -q test_fizz.py'
  loop-agents run --task-file task.md --rubric-file rubric.md --threshold 85 --json
  echo "Name three primes." | loop-agents run --task-file - --rubric "Exactly three primes."

--check CMD: the answer (its fenced code block when it has exactly one, else the
whole text) is written to a file whose path is in $LOOP_AGENTS_ANSWER and replaces
{{answer_file}} in CMD; exit status 0 accepts it, otherwise the end of the command's
output is the feedback. With --rubric too, the judge sees only answers that pass.

Every run is saved (in $LOOP_AGENTS_HOME, default ~/.local/state/loop-agents) under
the id printed at the start: `loop-agents resume ID` continues it after Ctrl-C or a
failure, `loop-agents runs` lists the runs, `loop-agents show ID` prints one.

The run's answer is the best-scored one (the later on a tie; the last one when no
answer has a score), the one the summary calls best; --select last makes it the last
answer instead.

With --json the output is one object: "run_id", "answer" (the run's answer),
"stop_reason" (accepted, max_iterations, ...), "iterations", "selected_iteration" and
"selected_score" (the attempt that is the answer), "records" (one per iteration:
"iteration", "answer", "score", "feedback", "stop", "evaluator", "agent_seconds",
"evaluation_seconds", "input_tokens", "output_tokens" and the evaluator's tokens),
and "error" when the run failed.

{ENDPOINTS}
{EXIT_STATUSES}"""


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, its help, its arguments and where its handler is.

    ``handler`` and ``check`` are ``"module:function"``: the handler takes the parsed
    arguments and returns the exit status; the check (`loop_agents_cli.arguments`) runs
    before the handler's module is imported, so that bad arguments are reported fast.
    """

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: str
    epilog: str = ""
    check: str | None = None


def _wrap(text: str) -> str:
    """``text`` wrapped for ``--help`` (whose descriptions are printed as they are)."""
    return textwrap.fill(text, width=79)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0; got {text!r}")
    return value


def model_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the model (``run``, ``demo`` and any command with a model)."""
    group = parser.add_argument_group(
        "model settings",
        _wrap(
            "Default: the environment and a .env file (found from the current folder up): "
            "OPENAI_API_KEY, OPENAI_BASE_URL, LOOP_AGENTS_GGUF, LOOP_AGENTS_MODEL, "
            "LOOP_AGENTS_STRUCTURED_OUTPUT, LOOP_AGENTS_MAX_TOKENS, LOOP_AGENTS_THREADS, "
            "LOOP_AGENTS_SEED; "
            "else a running Ollama; else the bundled offline model. These options override "
            "them."
        ),
    )
    group.add_argument(
        "--env-file", type=Path, metavar="FILE", help="read the settings from this .env file"
    )
    group.add_argument("--model", metavar="NAME", help="the model name (LOOP_AGENTS_MODEL)")
    group.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (OPENAI_BASE_URL)",
    )
    group.add_argument(
        "--gguf",
        type=Path,
        metavar="PATH",
        help="run the bundled llama.cpp server on this GGUF model file (LOOP_AGENTS_GGUF)",
    )
    group.add_argument(
        "--structured-output",
        choices=STRUCTURED_OUTPUT_METHODS,
        help="how the judge's verdict is requested (LOOP_AGENTS_STRUCTURED_OUTPUT): as "
        "structured output, or text (a 'Score: N' and 'Feedback: ...' reply, for models "
        "without tool calling); default json_schema, function_calling on the bundled server",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="a cap on each answer's length, in tokens (LOOP_AGENTS_MAX_TOKENS)",
    )
    group.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads of each bundled llama.cpp server process, the agent's and the "
        "judge's (LOOP_AGENTS_THREADS; default: half the cores, at least 1)",
    )


def seed_option(parser: argparse.ArgumentParser) -> None:
    """``--seed``: the bundled server's random seed (``run`` and ``demo``; ``eval`` has its own)."""
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the random seed of the bundled llama.cpp server (LOOP_AGENTS_SEED; default: a "
        "new one every run, shown on the server line, so two runs are two samples); the "
        "same seed writes the same answers again",
    )


def run_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``run``."""
    parser.add_argument("task", nargs="?", help="the task, as text (or use --task-file)")
    parser.add_argument(
        "--task-file", type=Path, metavar="FILE", help="read the task from FILE (- for stdin)"
    )
    parser.add_argument("--rubric", metavar="TEXT", help="what a good answer must do, as text")
    parser.add_argument(
        "--rubric-file", type=Path, metavar="FILE", help="read the rubric from FILE"
    )
    parser.add_argument(
        "--check",
        metavar="CMD",
        help="a shell command that judges each answer: exit status 0 accepts it "
        "({answer_file} and $LOOP_AGENTS_ANSWER name the answer's file)",
    )
    parser.add_argument(
        "--check-timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how long --check may run per answer (default: %(default)g)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=80.0,
        metavar="SCORE",
        help="the judge's score (0-100) that accepts an answer (default: %(default)g)",
    )
    parser.add_argument(
        "--max-iterations",
        type=int,
        default=3,
        metavar="N",
        help="the most answers the model writes (default: %(default)s)",
    )
    parser.add_argument(
        "--select",
        choices=("best", "last"),
        default="best",
        help="which answer is the run's: the best-scored one (best, the default: the one "
        "the summary calls best) or the last one (last)",
    )
    parser.add_argument(
        "--inside-agent",
        action="store_true",
        help="run the loop inside the agent (LangChain's create_agent with LoopMiddleware) "
        "rather than around it: the same loop and records, one agent graph",
    )
    parser.add_argument(
        "--system", metavar="TEXT", help="the model's instructions (default: revise on feedback)"
    )
    parser.add_argument(
        "--system-file", type=Path, metavar="FILE", help="read the model's instructions from FILE"
    )
    parser.add_argument(
        "--max-file-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="the largest --task-file, --rubric-file or --system-file read, in bytes "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print only the result as JSON: the final answer, the stop reason and one "
        "record per iteration (answer, score, feedback, seconds, tokens)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="do not save the run (it cannot be resumed)"
    )
    model_options(parser)
    seed_option(parser)


def resume_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``resume``."""
    parser.add_argument("run_id", metavar="RUN_ID", help="the run's id (or its first letters)")
    parser.add_argument("--json", action="store_true", help="print only the result as JSON")
    parser.add_argument(
        "--env-file", type=Path, metavar="FILE", help="read OPENAI_API_KEY etc. from this file"
    )
    parser.add_argument(
        "--structured-output",
        choices=STRUCTURED_OUTPUT_METHODS,
        help="ask for the judge's verdict this way from now on, instead of as saved (for a "
        "server that refused the saved way)",
    )


def runs_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs``."""
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.add_argument(
        "--limit", type=int, default=20, metavar="N", help="the latest N runs (default: 20)"
    )


def show_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``show``."""
    parser.add_argument("run_id", metavar="RUN_ID", help="the run's id (or its first letters)")
    parser.add_argument(
        "--json", action="store_true", help="print the run as JSON, as `run --json` did"
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PAGE.html",
        help="write the run as a self-contained HTML page instead: the score per "
        "iteration, each iteration's answer and feedback, the settings",
    )


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``demo``."""
    parser.add_argument("name", choices=DEMOS, help="the demo to run")
    model_options(parser)
    seed_option(parser)


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "refine any task with a model, an LLM judge and/or a check command",
        "Refine a task: the model answers; a judge model scores the answer from 0 to 100 "
        "against the rubric, and/or a shell command (--check) tests it; while the answer "
        "is not accepted the feedback goes back to the model (at most --max-iterations "
        "times). The loop is streamed to the console; with --json only the result is "
        "printed.",
        run_arguments,
        "loop_agents_cli.run_command:run",
        RUN_EXAMPLES,
        check="loop_agents_cli.arguments:check_run",
    ),
    Command(
        "resume",
        "continue a saved run that was interrupted or failed",
        "Continue a saved run from its last completed step, on the model it used: no "
        "completed iteration is asked of the model again.",
        resume_arguments,
        "loop_agents_cli.run_command:resume",
        check="loop_agents_cli.arguments:check_saved_run",
    ),
    Command(
        "runs",
        "list the saved runs",
        "List the saved runs, latest first: id, start time, the task's first line, "
        "iterations, stop reason and best score.",
        runs_arguments,
        "loop_agents_cli.runs_command:runs",
        check="loop_agents_cli.arguments:check_runs",
    ),
    Command(
        "show",
        "print a saved run",
        "Print a saved run: every iteration's answer and feedback, the summary and the "
        "answer; with --json the object `run --json` printed.",
        show_arguments,
        "loop_agents_cli.show_command:show",
        check="loop_agents_cli.arguments:check_saved_run",
    ),
    Command(
        "demo",
        "run a demo",
        "Run a demo, streamed to the console. song-lyrics: a composer writes a ci to the "
        "tune 相见欢 and a reviewer scores it, at most 3 tries (the article's demo).",
        demo_arguments,
        "loop_agents_cli.demo_command:demo",
        ENDPOINTS,
        check="loop_agents_cli.arguments:check_demo",
    ),
)
"""The command's own subcommands, in the order ``--help`` lists them."""

PLUGIN_GROUP = "loop_agents_cli.commands"
"""The entry-point group of subcommands that other distributions add (each a `Command`)."""

OPTIONAL = {"eval": ("loop-agents-evals", "measure whether looping beats answering once")}
"""Subcommands of other distributions, and which one: named with how to install it when absent."""


def plugin_commands() -> list[Command]:
    """The subcommands installed distributions add (entry points of `PLUGIN_GROUP`).

    A subcommand named in `OPTIONAL` whose distribution is not installed is listed still,
    and running it says what to install.
    """
    found: dict[str, Command] = {}
    for point in entry_points(group=PLUGIN_GROUP):
        try:
            command = point.load()
        except Exception as exc:  # a broken distribution must not break the other commands
            found[point.name] = Command(
                point.name,
                f"(cannot load: {type(exc).__name__})",
                f"The {point.name} command's distribution failed to load: {exc}",
                _any_arguments,
                "loop_agents_cli.parser:not_installed",
            )
            continue
        if isinstance(command, Command) and command.name not in found:
            found[command.name] = command
    for name, (distribution, summary) in OPTIONAL.items():
        if name not in found:
            found[name] = Command(
                name,
                f"{summary} (needs {distribution})",
                f"The {name} command comes with the {distribution} distribution, which is "
                f"not installed. From a clone: pip install -e libs/{name}s (or make venv).",
                _any_arguments,
                "loop_agents_cli.parser:not_installed",
            )
    return list(found.values())


def _any_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def not_installed(args: argparse.Namespace) -> int:
    """The handler of a subcommand whose distribution is not installed: say which."""
    if args.command in OPTIONAL and not any(
        point.name == args.command for point in entry_points(group=PLUGIN_GROUP)
    ):
        distribution = OPTIONAL[args.command][0]
        print(
            f"{PROG} {args.command}: error: this command comes with {distribution}, which is "
            f"not installed; from a clone: pip install -e libs/{args.command}s",
            file=sys.stderr,
        )
        return 2
    point = next(p for p in entry_points(group=PLUGIN_GROUP) if p.name == args.command)
    point.load()  # raises the error that kept the command from loading, with its traceback
    return 2


def package_version() -> str:
    """The installed version of loop_agents."""
    try:
        return version("loop_agents")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "(not installed)"


def closest(word: str, choices: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The choice ``word`` is likeliest a typo of (of the close ones, the nearest in length).

    Example:
        ```python
        closest("runz", ["run", "resume", "runs"])  # 'runs'
        ```
    """
    close = difflib.get_close_matches(word, choices, n=3, cutoff=cutoff)
    return min(close, key=lambda choice: abs(len(choice) - len(word)), default=None)


class _Parser(argparse.ArgumentParser):
    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:  # argparse hides a write that fails: a closed stdout (`--help | head`)
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if found and (guess := closest(found[1], re.findall(r"[\w.-]+", found[2]))):
            message += f" (did you mean {guess}?)"
        super().error(message)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command's parser (``loop-agents --help`` shows it), and each subcommand's.

    Example:
        ```python
        parser, commands = build_parser()
        commands["run"].print_help()
        ```
    """
    parser = _Parser(
        prog=PROG,
        description=_wrap(
            "Loop agents from the shell: an agent answers, a judge scores the answer "
            "against a rubric (or a command tests it), and the feedback goes back to the "
            "agent until the answer is accepted. Every run is saved and can be resumed."
        ),
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    # not required=True: argparse would then say only that COMMAND is missing, never
    # which option it did not know (`loop-agents --bogus`); `main` reports both
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands: dict[str, argparse.ArgumentParser] = {}
    for command in (*COMMANDS, *plugin_commands()):
        sub = subparsers.add_parser(
            command.name,
            help=command.help,
            description=_wrap(command.description),
            epilog=command.epilog or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.arguments(sub)
        sub.set_defaults(handler=command.handler, arguments_check=command.check)
        commands[command.name] = sub
    return parser, commands
