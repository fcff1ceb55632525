"""``loop-agents eval TASKS``: the eval (`loop_agents_evals`) on the resolved endpoint."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys

from loop_agents_cli.arguments import find_endpoint
from loop_agents_cli.errors import UsageError
from loop_agents_cli.parser import PROG
from loop_agents_evals.command import EvalEndpoint, EvalUsageError, eval_options, run_eval_command


def _stable_name(kind: str, model: str, base_url: str | None) -> str:
    """How the model is named in the journal: the same on every run of the same endpoint.

    (The bundled server's URL changes with its port, so it is left out.)
    """
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
        from loop_agents_evals.report_command import draw_again

        return draw_again(args)
    try:  # every argument, before a model library is imported: as quick as --help
        options = eval_options(args)
    except EvalUsageError as exc:
        raise UsageError(str(exc)) from exc
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
