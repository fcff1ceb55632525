"""``loop-agents demo NAME``: run a demo on the model the endpoint resolution finds."""

from __future__ import annotations

import argparse
import asyncio

from dotenv import load_dotenv

from loop_agents.cli.errors import UsageError
from loop_agents.console.loop_console import LoopConsole
from loop_agents.models.endpoints import resolve_endpoint
from loop_agents.models.local_model import LocalModelError, banner
from loop_agents.models.settings import Environment, SettingsError


def demo(args: argparse.Namespace) -> int:
    """Run the Song-lyrics demo, streamed to the console."""
    from loop_agents.demos import song_lyrics

    try:
        env = Environment.read(args.env_file)
        if env.dotenv is not None:
            load_dotenv(env.dotenv)  # the demo's own settings (LOOP_AGENTS_FORM_CHECK)
        endpoint = resolve_endpoint(
            model=args.model,
            base_url=args.base_url,
            gguf=args.gguf,
            structured_output=args.structured_output,
            max_tokens=args.max_tokens,
            environment=env,
        )
        view = LoopConsole()
        if endpoint.spec.kind == "local":
            view.console.print(banner(), markup=False, highlight=False)
        with endpoint:
            view.console.print(endpoint.describe(), style="dim", markup=False, highlight=False)
            _, client = endpoint.http_clients()
            asyncio.run(song_lyrics.run(endpoint.settings, http_async_client=client, view=view))
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    except LocalModelError as exc:
        raise UsageError(str(exc)) from exc
    return 0
