"""The Song-lyrics demo: a composer writes a ci to the tune 相见欢, a reviewer scores it.

The composer is a ``create_agent`` agent; the reviewer a ``ChatOpenAI`` with structured
output into ``Review``. While the score is below 75 the review goes back to the composer,
at most three times. Settings come from ``.env`` (see ``.env.example``).

Run it with ``make demo`` or ``python examples/song_lyrics.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, TypedDict

import httpx
from dotenv import find_dotenv, load_dotenv
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prompts import composer_system_message, prompt, reviewer_system_message

from loop_agents import LoopContext, LoopEvaluation, LoopOutput, create_loop_agent
from loop_agents.models import ModelSettings, SettingsError

PASS_SCORE = 75
MAX_ITERATIONS = 3


class Review(TypedDict):
    """评估结果"""

    score: int
    """分数（百分制）"""
    feedback: str
    """评语"""


def build_loop(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> Any:
    """The composer/reviewer loop of the article, for the given model settings."""
    client: dict[str, Any] = {}
    if http_async_client is not None:
        client["http_async_client"] = http_async_client
    composer = create_agent(
        model=settings.chat_model(**client), system_prompt=composer_system_message
    )
    reviewer = settings.chat_model(**client).with_structured_output(
        Review, method=settings.structured_output_method
    )

    async def evaluate(context: LoopContext) -> LoopEvaluation:
        messages: list[AnyMessage] = [
            reviewer_system_message,
            *context["init_messages"],
            context["last_response"],
        ]
        review: Any = await reviewer.ainvoke(input=messages)
        return {
            "stop": review["score"] >= PASS_SCORE,
            "feedback": review["feedback"] + f"\n\n综合得分：{review['score']}",
            "score": review["score"],
        }

    return create_loop_agent(agent=composer, evaluator=evaluate, max_iterations=MAX_ITERATIONS)


def verdict(result: LoopOutput) -> str:
    """A short account of the run: iterations, the score of each try, why it stopped."""
    records = result.get("records", [])
    scores = ", ".join(
        f"#{r['iteration']}: {r['score']:g}" if r["score"] is not None else f"#{r['iteration']}: -"
        for r in records
    )
    reasons = {
        "accepted": f"the reviewer accepted the ci (score >= {PASS_SCORE})",
        "max_iterations": f"the cap of {MAX_ITERATIONS} iterations was reached",
        "recursion_limit": "the graph's recursion limit left no room for another try",
    }
    reason = result.get("stop_reason")
    return "\n".join(
        [
            "================================== Verdict ===================================",
            f"iterations: {result.get('iteration', 0)} of {MAX_ITERATIONS}",
            f"scores: {scores}",
            f"stopped: {reasons.get(str(reason), str(reason))}",
        ]
    )


async def run(
    settings: ModelSettings, *, http_async_client: httpx.AsyncClient | None = None
) -> LoopOutput:
    """Run the demo once and print the transcript and the verdict."""
    agent = build_loop(settings, http_async_client=http_async_client)
    message = HumanMessage(content=prompt)
    result: LoopOutput = await agent.ainvoke(
        input={"init_messages": [message], "messages": [message]}
    )
    for item in result["messages"]:
        item.pretty_print()
    print(verdict(result))
    return result


def main() -> int:
    """Entry point: read ``.env``, check the settings, run the loop."""
    load_dotenv(find_dotenv(usecwd=True))
    try:
        settings = ModelSettings.from_env()
        if not settings.configured:
            settings.chat_model()  # raises SettingsError with what to set
    except SettingsError as exc:
        print(f"song_lyrics: {exc}", file=sys.stderr)
        return 2
    asyncio.run(run(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
