"""``loop-agents demo NAME``: run a demo on the model the endpoint resolution finds.

It runs as ``run`` does (`loop_agents_cli.session.stream_loop`: failures, Ctrl-C) and ends
as the example program does: the summary, the verdict and the best-scored draft, tidied.
A demo is not saved, so there is nothing to resume.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents_cli.console.loop_console import LoopConsole
from loop_agents_cli.demos import song_lyrics
from loop_agents_cli.demos.prompts import prompt
from loop_agents_cli.errors import UsageError, judge_switches
from loop_agents_cli.failures import JUDGE_INVALID
from loop_agents_cli.interrupt import CtrlC, run_interruptible
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.models.local_model import LocalModelError, banner
from loop_agents_cli.models.settings import SettingsError
from loop_agents_cli.parser import PROG
from loop_agents_cli.session import Outcome, stream_loop


def demo(args: argparse.Namespace) -> int:
    """Run the Song-lyrics demo on the endpoint `check_demo` found; return the exit status."""
    endpoint: Endpoint = args.endpoint
    view = LoopConsole(tidy=True)
    try:
        if _bundled_model(endpoint):  # not for a GGUF file of the user's (--gguf)
            view.console.print(banner(), markup=False, highlight=False)
        with endpoint:
            view.console.print(endpoint.describe(), style="dim", markup=False, highlight=False)
            ctrl_c = CtrlC(_interrupted)
            outcome = run_interruptible(
                _song_lyrics(endpoint, view, ctrl_c, form_check=args.form_check), ctrl_c, endpoint
            )
    except (SettingsError, LocalModelError) as exc:
        raise UsageError(str(exc)) from exc
    return _report(outcome, view, endpoint)


async def _song_lyrics(
    endpoint: Endpoint, view: LoopConsole, ctrl_c: CtrlC, *, form_check: bool
) -> Outcome:
    ctrl_c.install()
    _, client = endpoint.http_clients()
    loop = song_lyrics.build_loop(
        endpoint.settings,
        judge_settings=endpoint.role_settings("judge"),
        http_async_client=client,
        form_check=form_check,
        checkpointer=InMemorySaver(),
    )
    message = HumanMessage(content=prompt)
    request: dict[str, Any] = {"init_messages": [message], "messages": [message]}
    config: Any = {"configurable": {"thread_id": "demo"}}

    def say(line: str) -> None:
        view.console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)

    with judge_switches(say, lambda m: f"pass --structured-output {m} to ask for it at once"):
        return await stream_loop(loop, request, config, endpoint=endpoint, view=view)


def _bundled_model(endpoint: Endpoint) -> bool:
    """Whether the demo runs on the bundled 135M-parameter model."""
    return endpoint.spec.kind == "local" and endpoint.spec.gguf is None


def _report(outcome: Outcome, view: LoopConsole, endpoint: Endpoint) -> int:
    tiny = _bundled_model(endpoint)
    failure = outcome.failure
    if failure is None:
        song_lyrics.report(outcome.values, view)
        if tiny:  # how to run the same demo on a stronger model
            view.console.print(song_lyrics.advice(offline=True), style="dim", markup=False)
        return 0
    view.failed(failure.reason)
    song_lyrics.report(outcome.values, view, stop_reason=failure.reason)
    print(f"{PROG}: error: {failure.error}", file=sys.stderr, flush=True)
    if endpoint.spec.kind == "local" and failure.reason == JUDGE_INVALID:
        # the model's limits; a server that died or could not be reached is not
        print(f"{PROG}: {song_lyrics.advice(offline=tiny)}", file=sys.stderr, flush=True)
    return 1


def _interrupted() -> None:
    print(f"\n{PROG}: interrupted (a demo is not saved: nothing to resume)", file=sys.stderr)
