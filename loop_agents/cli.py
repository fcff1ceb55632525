"""The ``loop-agents`` command: run the demo, or refine any task from the shell.

```
loop-agents demo song-lyrics
loop-agents run "Write a limerick about LangGraph." --rubric "Five lines, AABBA, funny."
loop-agents run --task-file task.md --rubric-file rubric.md --threshold 85 --json
```

The model settings are read from the environment and a ``.env`` file, as for the examples
(``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``LOOP_AGENTS_MODEL``,
``LOOP_AGENTS_STRUCTURED_OUTPUT``, ``LOOP_AGENTS_MAX_TOKENS``); options override them.
Exit status: 0 when the loop ran (whatever stopped it; see ``stop_reason``), 1 when it
failed (e.g. the model server answered with an error), 2 for bad arguments or settings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import textwrap
from collections.abc import Callable, Coroutine, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, cast, get_args

import httpx
import openai
from dotenv import find_dotenv, load_dotenv
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage

from loop_agents.console import LoopConsole, astream_to_console, section_header
from loop_agents.evaluators.judge import JudgeError, llm_judge
from loop_agents.graph import create_loop_agent
from loop_agents.models import ModelSettings, SettingsError, StructuredOutputMethod
from loop_agents.records import record_answer
from loop_agents.state import LoopInput, LoopOutput

PROG = "loop-agents"
DEMOS = ("song-lyrics",)
DEFAULT_SYSTEM = (
    "You are a careful author. Answer the user's task. When a reviewer's feedback follows "
    "your answer, reply with the complete revised answer that addresses it, and nothing else."
)
JUDGE_INSTRUCTIONS = (
    "You review an answer to the user's task against the rubric below. Give it a score "
    "from 0 (useless) to 100 (perfect) by the rubric, and say concisely what must change "
    "for a higher score.\n\nRubric:\n{rubric}"
)
JUDGE_TEMPLATE = "{feedback}\n\nScore: {score}/100 (needed: {threshold})"


RUN_EXAMPLES = """\
examples:
  loop-agents run "Write a limerick about LangGraph." --rubric "Five lines, AABBA, funny."
  loop-agents run --task-file task.md --rubric-file rubric.md --threshold 85 --json
  echo "Name three primes." | loop-agents run --task-file - --rubric "Exactly three primes."

With --json the output is one object: "answer" (the final answer), "stop_reason"
(accepted, max_iterations, ...), "iterations", "selected_iteration" and
"selected_score" (the attempt that is the answer), and "records", one per iteration:
"iteration", "answer", "score", "feedback", "stop", "evaluator", "agent_seconds",
"evaluation_seconds", "input_tokens", "output_tokens" and the judge's tokens.

The API key is read from OPENAI_API_KEY (environment or .env) only, never from an option.
"""


class UsageError(Exception):
    """A bad argument or setting: reported with the usage line, exit status 2."""


# -- arguments ---------------------------------------------------------------------------


def _model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "model settings",
        _wrap(
            "Default: the environment and a .env file (found from the current folder up): "
            "OPENAI_API_KEY, OPENAI_BASE_URL, LOOP_AGENTS_MODEL, LOOP_AGENTS_STRUCTURED_OUTPUT, "
            "LOOP_AGENTS_MAX_TOKENS. These options override them."
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
        "--structured-output",
        choices=get_args(StructuredOutputMethod),
        help="how the judge's verdict is requested; llama.cpp needs function_calling",
    )
    group.add_argument(
        "--max-tokens", type=int, metavar="N", help="a cap on each answer's length, in tokens"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser (``loop-agents --help`` shows it)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Loop agents from the shell: an agent answers, a judge scores the "
        "answer against a rubric, and the judge's feedback goes back to the agent until "
        "the score is good enough.",
        epilog="Exit status: 0 the loop ran (see its stop reason), 1 it failed, 2 bad "
        "arguments or settings.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a demo",
        description=_wrap(
            "Run a demo, streamed to the console. song-lyrics: a composer writes a ci to "
            "the tune 相见欢 and a reviewer scores it, at most 3 tries (the article's demo)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("name", choices=DEMOS, help="the demo to run")
    demo.set_defaults(handler=_demo, command_parser=demo)
    _model_options(demo)

    run = commands.add_parser(
        "run",
        help="refine any task with a model and an LLM judge",
        description=_wrap(
            "Refine a task: the model answers, a judge model scores the answer "
            "from 0 to 100 against the rubric, and while the score is below the threshold "
            "the judge's feedback goes back to the model (at most --max-iterations times). "
            "The loop is streamed to the console; with --json only the result is printed."
        ),
        epilog=RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("task", nargs="?", help="the task, as text (or use --task-file)")
    run.add_argument(
        "--task-file", type=Path, metavar="FILE", help="read the task from FILE (- for stdin)"
    )
    run.add_argument("--rubric", metavar="TEXT", help="what a good answer must do, as text")
    run.add_argument("--rubric-file", type=Path, metavar="FILE", help="read the rubric from FILE")
    run.add_argument(
        "--threshold",
        type=float,
        default=80.0,
        metavar="SCORE",
        help="the score (0-100) that accepts an answer (default: %(default)g)",
    )
    run.add_argument(
        "--max-iterations",
        type=int,
        default=3,
        metavar="N",
        help="the most answers the model writes (default: %(default)s)",
    )
    run.add_argument(
        "--system", metavar="TEXT", help="the model's instructions (default: revise on feedback)"
    )
    run.add_argument(
        "--system-file", type=Path, metavar="FILE", help="read the model's instructions from FILE"
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print only the result as JSON: the final answer, the stop reason and one "
        "record per iteration (answer, score, feedback, seconds, tokens)",
    )
    run.set_defaults(handler=_run, command_parser=run)
    _model_options(run)
    return parser


def _wrap(text: str) -> str:
    """``text`` wrapped for ``--help`` (whose descriptions are printed as they are)."""
    return textwrap.fill(text, width=79)


def _version() -> str:
    try:
        return version("loop_agents")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "(not installed)"


def _text(value: str | None, path: Path | None, what: str, *, required: bool) -> str | None:
    """The text given inline or in a file; exactly one of the two when ``required``."""
    if value is not None and path is not None:
        raise UsageError(f"give the {what} as text or with --{what}-file, not both")
    if path is not None:
        try:
            value = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the {what} from {str(path)!r}: {exc}") from exc
    if value is None:
        if required:
            raise UsageError(f"no {what} given: pass it as text or with --{what}-file FILE")
        return None
    if not value.strip():
        raise UsageError(f"the {what} is empty; give some text")
    return value.strip()


def _settings(args: argparse.Namespace, *, require_endpoint: bool = True) -> ModelSettings:
    env_file: Path | None = args.env_file
    if env_file is not None:
        if not env_file.is_file():
            raise UsageError(f"--env-file {str(env_file)!r} is not a file")
        load_dotenv(env_file)
    else:
        load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.base_url:
        overrides["base_url"] = args.base_url
    if args.structured_output:
        overrides["structured_output_method"] = args.structured_output
    if args.max_tokens is not None:
        if args.max_tokens < 1:
            raise UsageError(f"--max-tokens must be >= 1; got {args.max_tokens}")
        overrides["max_tokens"] = args.max_tokens
    settings = dataclasses.replace(settings, **overrides)
    if require_endpoint and not settings.configured:
        try:
            settings.chat_model()
        except SettingsError as exc:
            raise UsageError(str(exc)) from exc
    return settings


# -- commands ----------------------------------------------------------------------------


async def _demo(args: argparse.Namespace) -> int:
    from loop_agents.demos import song_lyrics

    settings = _settings(args, require_endpoint=False)
    if settings.configured:
        await song_lyrics.run(settings)
        return 0
    try:  # no endpoint: the bundled offline model, when its extra is installed
        await song_lyrics.run_offline(settings)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return 0


async def _run(args: argparse.Namespace) -> int:
    task = _text(args.task, args.task_file, "task", required=True)
    rubric = _text(args.rubric, args.rubric_file, "rubric", required=True)
    system = _text(args.system, args.system_file, "system", required=False) or DEFAULT_SYSTEM
    if not 0 <= args.threshold <= 100:
        raise UsageError(f"--threshold must be from 0 to 100; got {args.threshold:g}")
    if args.max_iterations < 1:
        raise UsageError(f"--max-iterations must be >= 1; got {args.max_iterations}")
    settings = _settings(args)
    judge = llm_judge(
        settings.chat_model(),
        JUDGE_INSTRUCTIONS.format(rubric=rubric),
        threshold=args.threshold,
        method=settings.structured_output_method,
        template=JUDGE_TEMPLATE,
        name="judge",
    )
    agent = create_agent(model=settings.chat_model(), system_prompt=system)
    loop = create_loop_agent(agent, judge, args.max_iterations, name="loop-agents run")
    request: LoopInput = {"messages": [HumanMessage(str(task))]}
    if args.json:
        result = cast(LoopOutput, await loop.ainvoke(request))
        print(json.dumps(result_json(result), ensure_ascii=False, indent=2))
        return 0
    view = LoopConsole()
    result = await astream_to_console(loop, request, view=view)
    view.console.print()
    view.console.print(section_header("Answer"), markup=False, highlight=False)
    view.console.print(result["last_response"].text, markup=False, highlight=False)
    return 0


def result_json(result: LoopOutput) -> dict[str, Any]:
    """The JSON form of a loop's result: answer, stop reason, iterations, selection, records.

    Messages in the records become their text; everything else is kept as it is.

    Example:
        ```python
        print(json.dumps(result_json(await loop.ainvoke(request))))
        ```

    """
    records = [
        _plain(
            {k: v for k, v in record.items() if k != "answer_id"}
            | {"answer": record_answer(record, result)}
        )
        for record in result.get("records", [])
    ]
    return {
        "answer": result["last_response"].text,
        "stop_reason": result.get("stop_reason"),
        "iterations": result.get("iteration", 0),
        "selected_iteration": result.get("selected_iteration"),
        "selected_score": result.get("selected_score"),
        "records": records,
    }


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return value.text
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``loop-agents`` command with ``argv`` (default: the process's arguments).

    Returns:
        The exit status: 0 when the loop ran, 1 when it failed, 2 for bad arguments
        (argparse exits with 2 itself for malformed options).

    Example:
        ```python
        status = main(["run", "Name a colour.", "--rubric", "One word.", "--json"])
        ```

    """
    args = build_parser().parse_args(argv)
    command_parser: argparse.ArgumentParser = args.command_parser
    handler: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.handler
    try:
        return asyncio.run(handler(args))
    except UsageError as exc:
        command_parser.error(str(exc))  # prints the usage and the message, exits with 2
    except (openai.OpenAIError, httpx.HTTPError, JudgeError, ValueError, OSError) as exc:
        # a server's error, a judge without a usable verdict, an invalid evaluation
        print(f"{command_parser.prog}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{command_parser.prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
