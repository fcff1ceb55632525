"""Go back to an iteration of a finished loop and fork a new attempt from there.

A copywriter drafts a bakery slogan; an editor asks for two changes and accepts the third
draft. Every step is checkpointed in SQLite. Then the program goes back to the checkpoint
before iteration 2, adds an instruction for the copywriter, and runs the loop again from
there: a new branch of the same thread. Iteration 1 is not redone, and the first branch
is kept in the database.

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (``.env``, see ``.env.example``) the
copywriter is that model; otherwise (or with ``--offline``) a small function plays it;
the first line says which. The editor is scripted so that every run takes the same path.

Run it with ``python examples/fork_from_iteration.py [--offline] [--db PATH]`` (SQLite
support is an extra: ``pip install "loop-agents[sqlite]"``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from dotenv import find_dotenv, load_dotenv
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.loop.agents import AgentLike
from loop_agents.loop.checkpoints import checkpoint_before_iteration
from loop_agents.loop.feedback import feedback_text
from loop_agents.loop.state import LoopInput, LoopOutput
from loop_agents_cli.models.settings import ModelSettings, SettingsError

REQUEST = "Write a one-line slogan for a neighbourhood bakery. Reply with the slogan only."
EDITS = ["Make it shorter.", "Mention fresh bread."]
HINT = "Address it to children."
THREAD: RunnableConfig = {"configurable": {"thread_id": "bakery-slogan"}}


def editor(context: LoopContext) -> LoopEvaluation:
    """Ask for each of ``EDITS`` in turn, then accept."""
    iteration = context["iteration"]
    if iteration <= len(EDITS):
        return {"stop": False, "feedback": EDITS[iteration - 1]}
    return {"stop": True}


def offline_copywriter(messages: list[AnyMessage]) -> str:
    """A stand-in for a model: each draft says which instructions it followed."""
    draft = sum(1 for m in messages if m.type == "ai") + 1
    if draft == 1:
        return "Draft 1: Good mornings start at our bakery."
    asks = [feedback_text(m) or m.text for m in messages[1:] if m.type == "human"]
    return f"Draft {draft} [{' | '.join(asks)}]: Fresh bread, happy mornings."


def show(title: str, result: LoopOutput, print_: Callable[[str], None]) -> None:
    print_(f"--- {title}: {result['iteration']} iterations, {result['stop_reason']}")
    for message in result["messages"]:
        print_(f"  {message.type:>5}: {message.text}")


def run(
    agent: AgentLike,
    saver: BaseCheckpointSaver[Any],
    print_: Callable[[str], None] = print,
) -> tuple[LoopOutput, LoopOutput]:
    """Run the loop, go back to iteration 2, fork; return both branches' results."""
    loop = create_loop_agent(agent, editor, max_iterations=5, checkpointer=saver)
    request: LoopInput = {"messages": [HumanMessage(REQUEST)]}
    original = cast(LoopOutput, loop.invoke(request, THREAD, durability="sync"))
    show("original run", original, print_)
    original_head = loop.get_state(THREAD).config

    print_("--- the thread's checkpoints, newest first (step, next node, iteration)")
    for snapshot in loop.get_state_history(THREAD):
        step = snapshot.metadata["step"] if snapshot.metadata else "?"
        nxt = ",".join(snapshot.next) or "-"
        print_(f"  step {step:>2}  next={nxt:<13} iteration={snapshot.values.get('iteration', 0)}")

    # the checkpoint from which iteration 2 starts: the first draft and its feedback
    before_second = checkpoint_before_iteration(loop, THREAD, 2)
    # add an instruction there (a new checkpoint branching off it) and run from it
    fork = loop.update_state(before_second.config, {"messages": [HumanMessage(HINT)]})
    forked = cast(LoopOutput, loop.invoke(None, fork, durability="sync"))
    show("fork from iteration 2", forked, print_)

    kept = loop.get_state(original_head).values
    print_(f"--- the original branch is kept: it still ends with {kept['messages'][-1].text!r}")
    return original, forked


def main(argv: list[str] | None = None) -> int:
    """Entry point: pick the copywriter, open the database, run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--offline", action="store_true", help="use the offline copywriter")
    parser.add_argument("--db", help="SQLite file for the checkpoints (default: a temp file)")
    args = parser.parse_args(argv)

    agent: AgentLike = offline_copywriter
    said = "--offline: a small function plays the copywriter (no model); the editor is scripted"
    if not args.offline:
        load_dotenv(find_dotenv(usecwd=True))
        try:
            settings = ModelSettings.from_env()
        except SettingsError as exc:
            print(f"fork_from_iteration: {exc}", file=sys.stderr)
            return 2
        if settings.configured:
            agent = settings.chat_model()
            where = settings.base_url or "OpenAI"
            said = f"copywriter: {settings.model} at {where}; the editor is scripted"
        else:
            said = (
                "no model is configured (OPENAI_API_KEY or OPENAI_BASE_URL, e.g. in .env): a "
                "small function plays the copywriter, as with --offline; the editor is scripted"
            )
    print(said, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or str(Path(folder) / "checkpoints.sqlite")
        with SqliteSaver.from_conn_string(db) as saver:
            run(agent, saver)
    return 0


if __name__ == "__main__":
    sys.exit(main())
