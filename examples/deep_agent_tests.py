"""A deep agent writes code until its tests pass: its files are kept between attempts.

A ``deepagents`` deep agent keeps the files it writes in its state. Inside a loop the
files of one attempt are given back to the next, so after a failed test run the agent
revises the file it wrote (``read_file``, ``edit_file``) instead of starting from nothing.
The evaluator, `loop_agents_checks.files_check`, writes the attempt's files into an
empty folder in the sandbox, runs the tests there and feeds the failures back; a plan the
agent keeps with ``write_todos`` must be finished too (`todos_complete`).

The model comes from ``.env`` (see ``.env.example``): OpenAI with ``OPENAI_API_KEY``, or
any OpenAI-compatible server with ``OPENAI_BASE_URL`` whose model calls tools. It needs
the ``deep`` extra (``pip install 'loop_agents[deep]'``). llama-cpp-python's server (the
bundled offline model's) cannot serve a deep agent: it takes a message's content only as
a string, and a deep agent sends its instructions as a list of content blocks; the
program says so in one line. A server that refuses a request is one line too.

Run it with ``python examples/deep_agent_tests.py [--max-iterations N]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

import openai
from dotenv import find_dotenv, load_dotenv
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from loop_agents import create_loop_agent
from loop_agents.evaluators import all_of, todos_complete
from loop_agents_checks import files_check
from loop_agents_cli.models.settings import ModelSettings, SettingsError

TASK = (
    "Write /solution.py with a function slugify(title) that lowercases the title, keeps "
    "letters and digits, joins the words with single hyphens and drops everything else. "
    "Plan the work with write_todos and mark each item completed when it is done."
)
TESTS = """
from solution import slugify

def test_words():
    assert slugify("Hello World") == "hello-world"

def test_punctuation_and_spaces():
    assert slugify("  Loops, agents & graphs!  ") == "loops-agents-graphs"

def test_digits():
    assert slugify("LangGraph 1.2 release") == "langgraph-1-2-release"
"""
MAX_ITERATIONS = 4


def build_loop(model: BaseChatModel, *, max_iterations: int = MAX_ITERATIONS) -> Any:
    """The loop: a deep agent with a plan, judged by the tests and by its own plan."""
    from deepagents import create_deep_agent

    agent = create_deep_agent(model=model, tools=[], middleware=[TodoListMiddleware()])
    evaluator = all_of(files_check(TESTS, timeout=20), todos_complete())
    return create_loop_agent(agent, evaluator, max_iterations, name="deep_agent_tests")


def report(result: Any) -> str:
    """What happened: each attempt's verdict, then the solution as it stands."""
    lines = []
    for record in result["records"]:
        verdict = "accepted" if record["stop"] else record["feedback"].splitlines()[0]
        lines.append(f"attempt {record['iteration']}: {verdict}")
    solution = (result.get("agent_state") or {}).get("files", {}).get("/solution.py")
    content = solution.get("content", "") if isinstance(solution, dict) else solution or ""
    lines += [f"stopped: {result['stop_reason']}", "--- /solution.py ---", str(content)]
    return "\n".join(lines)


_CONTENT_AS_TEXT_ONLY = "ChatCompletionRequestSystemMessage"
"""In the refusal of llama-cpp-python's server: its request model, whose ``content`` is text."""


def refusal(exc: openai.APIStatusError, base_url: str | None) -> str:
    """One line for a server's refusal; for llama-cpp-python's server, why it cannot serve."""
    where = base_url or "https://api.openai.com/v1"
    message = str(exc.message)
    if _CONTENT_AS_TEXT_ONLY in message and "Input should be a valid string" in message:
        return (
            f"the server at {where} (llama-cpp-python's, as the bundled offline model's) "
            "cannot serve a deep agent: it takes a message's content only as a string, and "
            "a deep agent sends its instructions as a list of content blocks (OpenAI's "
            f"format), so it refused the first request (HTTP {exc.status_code}, validation "
            "errors); use OpenAI, Ollama, vLLM or llama.cpp's llama-server"
        )
    first = " ".join(re.sub(r"^Error code: \d+ - ", "", message).split())[:300]
    return f"the server at {where} refused a request: HTTP {exc.status_code}: {first}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: read ``.env``, build the loop, run it, print the report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--max-iterations", type=int, default=MAX_ITERATIONS)
    args = parser.parse_args(argv)
    load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
    except SettingsError as exc:
        print(f"deep_agent_tests: {exc}", file=sys.stderr)
        return 2
    if not settings.configured:
        print(
            "deep_agent_tests: no model endpoint: set OPENAI_API_KEY (OpenAI) or "
            "OPENAI_BASE_URL (an OpenAI-compatible server whose model calls tools) in the "
            "environment or .env",
            file=sys.stderr,
        )
        return 2
    loop = build_loop(settings.chat_model(), max_iterations=args.max_iterations)
    try:
        result = loop.invoke({"messages": [HumanMessage(TASK)]})
    except openai.APIStatusError as exc:
        print(f"deep_agent_tests: {refusal(exc, settings.base_url)}", file=sys.stderr)
        return 1
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
