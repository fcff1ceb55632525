"""``python -m loop_agents.evals``: the ``eval`` command with the model options of ``run``.

```
python -m loop_agents.evals instructions --limit 5 --base-url http://127.0.0.1:8080/v1
python -m loop_agents.evals code --local --max-tokens 256 --out code.json
```

The model settings come from the environment and a ``.env`` file (``OPENAI_API_KEY``,
``OPENAI_BASE_URL``, ``LOOP_AGENTS_MODEL``, ``LOOP_AGENTS_STRUCTURED_OUTPUT``,
``LOOP_AGENTS_MAX_TOKENS``); the options override them. ``--local`` starts the bundled
offline model (the ``local`` extra) for the eval and stops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loop_agents.evals.command import (
    EVAL_DESCRIPTION,
    EVAL_EXAMPLES,
    EvalEndpoint,
    EvalOptions,
    EvalUsageError,
    add_eval_arguments,
    eval_options,
    run_eval_command,
)

PROG = "python -m loop_agents.evals"


def build_parser() -> argparse.ArgumentParser:
    """The parser: the ``eval`` arguments and the model endpoint's options."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=EVAL_DESCRIPTION,
        epilog=EVAL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_eval_arguments(parser)
    group = parser.add_argument_group(
        "model settings",
        "Default: the environment and a .env file (OPENAI_API_KEY, OPENAI_BASE_URL, "
        "LOOP_AGENTS_MODEL, LOOP_AGENTS_STRUCTURED_OUTPUT, LOOP_AGENTS_MAX_TOKENS).",
    )
    group.add_argument("--env-file", type=Path, metavar="FILE", help="read the settings here")
    group.add_argument("--model", metavar="NAME", help="the model name (LOOP_AGENTS_MODEL)")
    group.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server")
    group.add_argument(
        "--structured-output",
        choices=("json_schema", "function_calling", "json_mode"),
        help="how the judge's verdict is requested; llama.cpp needs function_calling",
    )
    group.add_argument(
        "--max-tokens", type=int, metavar="N", help="a cap on each answer's length, in tokens"
    )
    group.add_argument(
        "--local",
        action="store_true",
        help="use the bundled offline model (SmolLM2-135M on llama.cpp; the local extra)",
    )
    return parser


def _settings(args: argparse.Namespace) -> Any:
    from dotenv import find_dotenv, load_dotenv

    from loop_agents.models import ModelSettings, SettingsError

    if args.env_file is not None:
        if not args.env_file.is_file():
            raise EvalUsageError(f"--env-file {str(args.env_file)!r} is not a file")
        load_dotenv(args.env_file)
    else:
        load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
    except SettingsError as exc:
        raise EvalUsageError(str(exc)) from None
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.base_url:
        overrides["base_url"] = args.base_url
    if args.structured_output:
        overrides["structured_output_method"] = args.structured_output
    if args.max_tokens is not None:
        if args.max_tokens < 1:
            raise EvalUsageError(f"--max-tokens must be >= 1; got {args.max_tokens}")
        overrides["max_tokens"] = args.max_tokens
    return dataclasses.replace(settings, **overrides)


async def _run(args: argparse.Namespace, options: EvalOptions) -> int:
    if options.server is not None:
        return await run_eval_command(options, None)
    if args.local:
        from loop_agents import local_model

        if not local_model.is_installed():
            raise EvalUsageError(local_model.no_endpoint_message())
        cap = args.max_tokens or local_model.DEFAULT_MAX_TOKENS
        try:
            with local_model.LocalModelServer() as server:
                endpoint = EvalEndpoint(
                    server.chat_model(max_tokens=cap),
                    judge_method="function_calling",
                    description=f"{local_model.MODEL_ALIAS} (bundled, llama.cpp, max {cap} tokens)",
                )
                return await run_eval_command(options, endpoint)
        except local_model.LocalModelError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
    settings = _settings(args)
    if not settings.configured:
        raise EvalUsageError(
            "no model endpoint is configured: set OPENAI_API_KEY or OPENAI_BASE_URL (or "
            "--base-url), use --local for the bundled offline model, or --server URL"
        )
    where = settings.base_url or "OpenAI"
    endpoint = EvalEndpoint(
        settings.chat_model(),
        judge_method=settings.structured_output_method,
        description=f"{settings.model} at {where}",
    )
    return await run_eval_command(options, endpoint)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the eval command with ``argv``; returns the exit status.

    Example:
        ```python
        status = main(["instructions", "--limit", "2", "--base-url", "http://127.0.0.1:8080/v1"])
        ```
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = eval_options(args)
        if args.local and (args.base_url or options.server):
            raise EvalUsageError("--local runs the bundled model: drop --base-url/--server")
        return asyncio.run(_run(args, options))
    except EvalUsageError as exc:
        parser.error(str(exc))  # exits with 2
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; run the same command (same --out) to resume",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
