"""The loop inside create_agent: a tool-using agent that checks its own answer.

A release announcer (``create_agent`` with a ``word_count`` tool) must announce a release
in plain sentences, in at most 30 words, naming its version. Three rules check each
answer (the first rejects what is plainly no announcement: code, JSON, a tool call
written as text); while one fails, ``LoopMiddleware`` gives the agent the rules' feedback
as a user turn and the model runs again, inside the same agent graph. The agent is shown
the rules before its first try (a ``Criteria()`` control), its state is checkpointed
(SQLite), and the program prints the loop's events as they stream, then each iteration's
record from the agent's output (``loop_records``) and the announcement, saying whether it
was accepted and whether the model ever called its tool.

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (``.env``, see ``.env.example``) that
model writes the announcement; otherwise (or with ``--offline``) a scripted stand-in
does, so that the program runs without a model. The first line says which. A server that
cannot call tools (llama-cpp-python's, as the bundled offline model's, without a
tool-calling chat format) gets its tool calls back as text or not at all: the rules
reject such text, and the program says that the tool never ran.

Run it with ``python examples/inside_create_agent.py [--offline] [--db PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dotenv import find_dotenv, load_dotenv
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from loop_agents import LoopMiddleware, all_of, text_rule
from loop_agents.controls import Criteria
from loop_agents.loop.events import is_loop_event
from loop_agents_cli.models.settings import ModelSettings, SettingsError

TASK = (
    "Announce loop_agents 0.2 to its users: the loop now also runs inside create_agent, "
    "as middleware. Count your words with the word_count tool before you answer."
)
SYSTEM = "You write short, friendly release announcements. Reply with the announcement only."
MAX_WORDS = 30
THREAD: RunnableConfig = {"configurable": {"thread_id": "release-0.2"}}


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


TOOL_CALL_AS_TEXT = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:')
"""A tool call written out as text, as a server without tool calling returns it."""


TOOL_CALL = "a tool call written as text"


def not_prose(text: str) -> str | None:
    """What ``text`` is when it is plainly not an announcement, else ``None``."""
    if TOOL_CALL_AS_TEXT.search(text):
        return TOOL_CALL
    if "```" in text:
        return "a code block"
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            json.loads(stripped)
            return "JSON"
    return None


def not_prose_feedback(text: str) -> str:
    """What the announcer is told when its answer is plainly not an announcement."""
    what = not_prose(text)
    tools = " Call word_count as a tool, not in your reply." if what == TOOL_CALL else ""
    return f"That is {what}, not an announcement.{tools} Reply with the announcement only."


prose = text_rule(
    lambda text: not_prose(text) is None,
    not_prose_feedback,
    name="prose",
    description="Plain sentences: no code, no JSON, no tool call written as text.",
)
SHORTER = f"keep it to {MAX_WORDS} at most."
NAME_THE_VERSION = "Name the version: 0.2."
short = text_rule(
    lambda text: len(text.split()) <= MAX_WORDS,
    lambda text: f"{len(text.split())} words; {SHORTER}",
    name="short",
    description=f"At most {MAX_WORDS} words.",
)
names_the_version = text_rule(
    lambda text: "0.2" in text,
    NAME_THE_VERSION,
    name="names_the_version",
    description="Names the version, 0.2.",
)


def build_agent(model: BaseChatModel, checkpointer: Any = None) -> Any:
    """The announcer: a create_agent agent whose answers the two rules check."""
    rules = all_of(prose, short, names_the_version)
    loop = LoopMiddleware(rules, max_iterations=4, controls=[Criteria()])
    return create_agent(
        model, [word_count], system_prompt=SYSTEM, middleware=[loop], checkpointer=checkpointer
    )


LONG = (
    "We are delighted to announce that loop_agents, the library for agents that check "
    "their own work, can now run its whole loop inside create_agent, as a middleware, "
    "so your agents keep their tools and checkpoints."
)
NO_VERSION = "loop_agents now runs its loop inside create_agent, as middleware."
GOOD = "loop_agents 0.2 is out: the loop now runs inside create_agent, as middleware."


DRAFTS = [LONG, NO_VERSION, GOOD]


def offline_announcer(messages: Sequence[AnyMessage]) -> AIMessage:
    """A stand-in for a model: counts its draft's words, and heeds what it has been told.

    It reads the rules' feedback wherever the loop puts it, as a model would: in a review
    of its last answer, or in the points a new request lists. Told to be shorter, it drops
    the long draft; told to name the version too, it writes the good one.
    """
    told = " ".join(m.text for m in messages if m.type == "human")
    draft = GOOD if NAME_THE_VERSION in told else NO_VERSION if SHORTER in told else LONG
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(draft)
    call = {"name": "word_count", "args": {"text": draft}, "id": f"count-{DRAFTS.index(draft)}"}
    return AIMessage("", tool_calls=[call])


class ScriptedChat(GenericFakeChatModel):
    """A chat model whose answers come from a function of the messages (no network)."""

    script: Callable[[Sequence[AnyMessage]], AIMessage] = offline_announcer

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.messages = iter([self.script(messages)])
        return super()._generate(messages, stop, run_manager, **kw)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, AIMessage]:
        """Accept the tools: the script decides when to call one."""
        return self


def run(model: BaseChatModel, saver: Any, print_: Callable[[str], None] = print) -> Any:
    """Stream the announcer's run, then print its records and answer; return its output."""
    agent = build_agent(model, saver)
    request = {"messages": [HumanMessage(TASK)]}
    for event in agent.stream(request, THREAD, stream_mode="custom"):
        if not is_loop_event(event):
            continue
        if event["type"] == "iteration_started":
            print_(f"iteration {event['iteration']} of {event['max_iterations']}")
        elif event["type"] == "evaluation_finished":
            verdict = "accepted" if event["stop"] else f"feedback: {event['feedback']}"
            print_(f"  judged: {verdict}")
        elif event["type"] == "loop_finished":
            print_(f"stopped: {event['stop_reason']} after {event['iterations']} iterations")
    result = agent.get_state(THREAD).values
    for record in result["loop_records"]:
        print_(f"  #{record['iteration']}: {record['answer'].text!r} -> stop={record['stop']}")
    if not any(isinstance(m, ToolMessage) for m in result["messages"]):
        as_text = any(not_prose(r["answer"].text) == TOOL_CALL for r in result["loop_records"])
        print_(
            "the tool never ran: the model "
            + ("wrote its tool call as text" if as_text else "never called word_count")
            + " (a server without tool calling, e.g. llama-cpp-python's without a "
            "tool-calling chat format, cannot run a tool)"
        )
    accepted = result["loop_stop_reason"] == "accepted"
    verdict = "accepted" if accepted else f"not accepted: {result['loop_stop_reason']}"
    print_(f"announcement ({verdict}): {result['messages'][-1].text}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point: pick the model, open the database, run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--offline", action="store_true", help="use the scripted stand-in")
    parser.add_argument("--db", help="SQLite file for the checkpoints (default: a temp file)")
    args = parser.parse_args(argv)

    model: BaseChatModel = ScriptedChat(messages=iter(()))
    said = "--offline: a scripted stand-in writes the announcement (no model)"
    if not args.offline:
        load_dotenv(find_dotenv(usecwd=True))
        try:
            settings = ModelSettings.from_env()
        except SettingsError as exc:
            print(f"inside_create_agent: {exc}", file=sys.stderr)
            return 2
        if settings.configured:
            model = settings.chat_model()
            said = f"model: {settings.model} at {settings.base_url or 'OpenAI'}"
        else:
            said = (
                "no model is configured (OPENAI_API_KEY or OPENAI_BASE_URL, e.g. in .env): "
                "a scripted stand-in writes the announcement, as with --offline"
            )
    print(said, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or str(Path(folder) / "checkpoints.sqlite")
        with SqliteSaver.from_conn_string(db) as saver:
            run(model, saver)
    return 0


if __name__ == "__main__":
    sys.exit(main())
