"""The Song-lyrics demo: a composer writes a ci to the tune 相见欢, a reviewer scores it.

The composer is a ``create_agent`` agent; the reviewer a ``ChatOpenAI`` with structured
output into ``Review``. While the score is below 75 the review goes back to the composer,
at most three times; the best-scored draft is the answer. Settings come from ``.env``
(see ``.env.example``). The loop is streamed to the console: the composer's tokens under
``----Agent----``, each review under ``----Evaluator----``, a status line per iteration,
then the summary, the verdict and the selected draft (as ``loop-agents demo`` prints them).

The demo's code lives in `loop_agents_cli.demos.song_lyrics` (so that the ``loop-agents demo
song-lyrics`` command can run it too); this program runs it with the settings of ``.env``.

Run it with ``make demo``, ``python examples/song_lyrics.py`` or ``loop-agents demo song-lyrics``.
"""

from __future__ import annotations

import asyncio
import os
import sys

import httpx
from dotenv import find_dotenv, load_dotenv

from loop_agents.loop.state import LoopOutput
from loop_agents_cli.demos import song_lyrics as demo
from loop_agents_cli.demos.song_lyrics import (
    MAX_ITERATIONS,
    PASS_SCORE,
    DemoFailed,
    Review,
    build_loop,
    verdict,
)
from loop_agents_cli.models.local_model import LocalModelError
from loop_agents_cli.models.settings import SEED_VARIABLE, ModelSettings, SettingsError, parse_seed

__all__ = ["MAX_ITERATIONS", "PASS_SCORE", "Review", "build_loop", "main", "run", "verdict"]


async def run(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> LoopOutput:
    """Run the demo once: stream it to the console, then the verdict and the selected draft."""
    return await demo.run(settings, http_async_client=http_async_client)


def main() -> int:
    """Entry point: read ``.env``, check the settings, run the loop.

    With neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` set, the bundled offline
    model is used when the ``local`` extra is installed; otherwise the message says how
    to install it (exit code 2). Nothing is installed here. A run that stops part-way (a
    server error, a reviewer that gives no usable review even when asked again) prints
    what it did, what went wrong and what to do about it (exit code 1).
    """
    load_dotenv(find_dotenv(usecwd=True))
    offline = False
    try:
        settings = ModelSettings.from_env()
        if settings.configured:
            asyncio.run(run(settings))
        else:
            offline = True
            seed = os.environ.get(SEED_VARIABLE, "").strip()
            asyncio.run(demo.run_offline(settings, seed=parse_seed(seed) if seed else None))
    except SettingsError as exc:
        print(f"song_lyrics: {exc}", file=sys.stderr)
        return 2
    except LocalModelError as exc:  # a server that could not start or died: its own fix
        print(f"song_lyrics: the run failed: {exc}", file=sys.stderr)
        return 1
    except DemoFailed as exc:
        print(f"song_lyrics: the run failed: {exc}", file=sys.stderr)
        if exc.stop_reason == "judge_invalid":  # the model's limits
            print(f"song_lyrics: {demo.advice(offline=offline)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
