"""The Song-lyrics demo: a composer writes a ci to the tune 相见欢, a reviewer scores it.

The composer is a ``create_agent`` agent; the reviewer a ``ChatOpenAI`` with structured
output into ``Review``. While the score is below 75 the review goes back to the composer,
at most three times. Settings come from ``.env`` (see ``.env.example``). The loop is
streamed to the console: the composer's tokens under ``----Agent----``, each review under
``----Evaluator----``, a status line per iteration and a summary at the end.

The demo's code lives in `loop_agents.demos.song_lyrics` (so that the ``loop-agents demo
song-lyrics`` command can run it too); this program runs it with the settings of ``.env``.

Run it with ``make demo``, ``python examples/song_lyrics.py`` or ``loop-agents demo song-lyrics``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
from dotenv import find_dotenv, load_dotenv

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loop_agents import LoopOutput, local_model
from loop_agents.demos import song_lyrics as demo
from loop_agents.demos.song_lyrics import MAX_ITERATIONS, PASS_SCORE, Review, build_loop, verdict
from loop_agents.models import ModelSettings, SettingsError

__all__ = ["MAX_ITERATIONS", "PASS_SCORE", "Review", "build_loop", "main", "run", "verdict"]


async def run(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> LoopOutput:
    """Run the demo once: stream it to the console, then print the verdict."""
    return await demo.run(settings, http_async_client=http_async_client)


def main() -> int:
    """Entry point: read ``.env``, check the settings, run the loop.

    With neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` set, the bundled offline
    model is used when the ``local`` extra is installed; otherwise the message says how
    to install it (exit code 2). Nothing is installed here.
    """
    load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
    except SettingsError as exc:
        print(f"song_lyrics: {exc}", file=sys.stderr)
        return 2
    if not settings.configured:
        return run_local(settings)
    asyncio.run(run(settings))
    return 0


LOCAL_MAX_TOKENS = 256
"""Token cap per answer on the offline model (``LOOP_AGENTS_MAX_TOKENS`` overrides it)."""


def run_local(settings: ModelSettings) -> int:
    """Run the demo on the bundled offline model, or explain how to install it (exit 2)."""
    if not local_model.is_installed():
        print(f"song_lyrics: {local_model.no_endpoint_message()}", file=sys.stderr)
        return 2
    print(local_model.banner(), flush=True)
    with local_model.LocalModelServer() as server:
        # function_calling structured output and a max_tokens cap: what llama.cpp honours;
        # the client bounds the review's strings so its JSON always fits in the cap
        local = server.settings(max_tokens=settings.max_tokens or LOCAL_MAX_TOKENS)
        asyncio.run(run(local, http_async_client=server.http_async_client()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
