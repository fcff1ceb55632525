"""A graph agent that keeps files in its state and adds one per call, for the storage tests.

`file_agent` is a compiled ``StateGraph`` with ``messages`` and ``files`` (merged by
path), taking ``files`` as input as a deep agent does: the loop gives its files back on
every attempt. Each call writes one new file of 2-20 kB (``/file_N.md``, N = the number
of files it was given + 1), its text drawn from a fixed word list with N as the seed, so
that every run writes the same bytes. The benchmark of checkpoint storage uses it too.
"""

from __future__ import annotations

import random
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

WORDS = [
    "rain", "falls", "soft", "on", "the", "old", "roof", "while", "grey", "clouds", "drift",
    "over", "quiet", "hills", "and", "a", "cold", "wind", "moves", "through", "pine",
    "needles", "as", "small", "birds", "wait", "under", "wet", "leaves",
]  # fmt: skip
SMALLEST, LARGEST = 2_000, 20_000


def merged_files(old: dict[str, str] | None, new: dict[str, str] | None) -> dict[str, str]:
    """The files reducer: the new files over the old, by path."""
    return {**(old or {}), **(new or {})}


class FileAgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    files: Annotated[dict[str, str], merged_files]


def file_text(number: int, sizes: tuple[int, int] = (SMALLEST, LARGEST)) -> str:
    """The text of ``/file_{number}.md``: 2-20 kB of words (``sizes``), the same every run."""
    draw = random.Random(number)
    size = draw.randint(*sizes)
    words: list[str] = []
    length = 0
    while length < size:
        word = draw.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def file_agent(
    seen: list[dict[str, str]] | None = None, *, sizes: tuple[int, int] = (SMALLEST, LARGEST)
) -> Any:
    """The agent; ``seen`` (if given) collects the files each call was given."""

    def write(state: FileAgentState) -> dict[str, Any]:
        files = dict(state.get("files") or {})
        if seen is not None:
            seen.append(files)
        number = len(files) + 1
        path = f"/file_{number}.md"
        text = file_text(number, sizes)
        return {"messages": [AIMessage(f"wrote {path}")], "files": {path: text}}

    graph = StateGraph(FileAgentState).add_node("write", write)
    return graph.add_edge(START, "write").add_edge("write", END).compile()


def files_after(iterations: int, sizes: tuple[int, int] = (SMALLEST, LARGEST)) -> dict[str, str]:
    """The files after ``iterations`` calls that started from none."""
    return {f"/file_{n}.md": file_text(n, sizes) for n in range(1, iterations + 1)}
