"""Seed 004's coder / reviewer / runner loop: the evaluator is a program, not a model.

A coder (a ``create_agent`` agent) writes Python for "What is the 39th Fibonacci number?".
The evaluator, `loop_agents_checks.python_runner.code_runner`, first reviews the answer by rules
(exactly one Python code block, which prints its result), then runs the code with a time
limit, a memory limit and an output limit in an empty temporary folder, and feeds the error
or the output back to the coder. The loop stops when the output contains the number 63245986
as a whole number (``ANSWER_PATTERN``: "The answer is 63245986" passes, 163245986 does not).

The model comes from ``.env`` (see ``.env.example``): OpenAI with ``OPENAI_API_KEY``, any
OpenAI-compatible server with ``OPENAI_BASE_URL``. With neither, the bundled offline model
(SmolLM2-135M through llama.cpp, the ``local`` extra) is used if it is installed; such a
small model mostly fails this task, which shows the loop's feedback at work.

Run it with ``python examples/coder_reviewer.py [--max-iterations N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, cast

from dotenv import find_dotenv, load_dotenv
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage

from loop_agents import create_loop_agent
from loop_agents.loop.state import LoopOutput
from loop_agents_checks.python_runner import CodeRunner, code_runner
from loop_agents_cli.models import local_model
from loop_agents_cli.models.settings import ModelSettings, SettingsError

TASK = "What is the 39th Fibonacci number?"
ANSWER = "63245986"
ANSWER_PATTERN = rf"\b{ANSWER}\b"
"""The runner's check: the answer as a whole number anywhere in the output (``match="regex"``)."""
MAX_ITERATIONS = 5
LOCAL_MAX_TOKENS = 256
"""Token cap per answer on the offline model (``LOOP_AGENTS_MAX_TOKENS`` overrides it)."""

CODER_SYSTEM_MESSAGE = SystemMessage(
    content="""\
You act as a Python coder: you write a Python program that solves the task.
Rules for the program:
- put the whole program in one ```python ... ``` code block, and write no other code block;
- use only the Python standard library;
- always print the result with print(...); a program that prints nothing is wrong;
- the program gets no input: do not call input().
A runner runs your program and tells you the error or what it printed. If the program is
wrong, fix it and send the whole program again."""
)


def build_loop(
    model: BaseChatModel,
    *,
    runner: CodeRunner | None = None,
    max_iterations: int = MAX_ITERATIONS,
) -> Any:
    """The coder / runner loop: ``model`` writes the code, ``runner`` judges it."""
    coder = create_agent(model=model, system_prompt=CODER_SYSTEM_MESSAGE, name="coder")
    evaluator = runner or code_runner(ANSWER_PATTERN, match="regex", timeout=10)
    return create_loop_agent(coder, evaluator, max_iterations, name="coder_reviewer")


async def run(
    model: BaseChatModel,
    *,
    runner: CodeRunner | None = None,
    max_iterations: int = MAX_ITERATIONS,
) -> LoopOutput:
    """Run the loop once, streaming the coder's tokens and each runner verdict."""
    loop = build_loop(model, runner=runner, max_iterations=max_iterations)
    result: dict[str, Any] = {}
    attempt = 0
    header_due = True
    async for namespace, mode, chunk in loop.astream(
        {"messages": [HumanMessage(content=TASK)]},
        stream_mode=["messages", "updates", "values"],
        subgraphs=True,  # the coder is a graph: its tokens come from inside it
    ):
        if mode == "messages":
            message, _metadata = chunk
            if isinstance(message, AIMessageChunk) and message.text:
                if header_due:
                    attempt += 1
                    print(f"\n{_rule(f'coder, attempt {attempt}')}")
                    header_due = False
                print(message.text, end="", flush=True)
        elif namespace:
            continue  # the coder graph's own state updates
        elif mode == "values":
            result = chunk
        elif mode == "updates" and "evaluate" in chunk:
            for record in (chunk["evaluate"] or {}).get("records", []):
                score = "" if record["score"] is None else f", score {record['score']:g}"
                print(f"\n{_rule(f'runner{score}')}\n{record['feedback']}", flush=True)
            header_due = True
    print(verdict(result))
    return cast(LoopOutput, result)


def _rule(title: str) -> str:
    return f" {title} ".center(78, "-")


def verdict(result: Any) -> str:
    """A short account of the run: iterations, scores, and why it stopped."""
    records = result.get("records", [])
    scores = ", ".join(
        f"#{r['iteration']}: {r['score']:g}" for r in records if r["score"] is not None
    )
    reason = result.get("stop_reason")
    reasons = {
        "accepted": f"the program printed {ANSWER}",
        "max_iterations": "the cap on iterations was reached without the right output",
        "recursion_limit": "the graph's recursion limit left no room for another try",
    }
    return "\n".join(
        [
            "================================== Verdict ===================================",
            f"iterations: {result.get('iteration', 0)}",
            f"scores: {scores}",
            f"stopped: {reasons.get(str(reason), str(reason))}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: read ``.env``, pick the model (or the offline one), run the loop."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument(
        "--max-iterations", type=int, default=MAX_ITERATIONS, help="the most attempts"
    )
    args = parser.parse_args(argv)
    load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
    except SettingsError as exc:
        print(f"coder_reviewer: {exc}", file=sys.stderr)
        return 2
    if settings.configured:
        print(f"model: {settings.model} at {settings.base_url or 'OpenAI'}", flush=True)
        asyncio.run(run(settings.chat_model(), max_iterations=args.max_iterations))
        return 0
    if not local_model.is_installed():
        print(f"coder_reviewer: {local_model.no_endpoint_message()}", file=sys.stderr)
        return 2
    print(local_model.banner(), flush=True)
    with local_model.LocalModelServer() as server:
        model = server.chat_model(max_tokens=settings.max_tokens or LOCAL_MAX_TOKENS)
        asyncio.run(run(model, max_iterations=args.max_iterations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
