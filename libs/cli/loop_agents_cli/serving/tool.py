"""A loop offered to a tool-calling agent as a tool (`loop_as_tool`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.pregel.protocol import PregelProtocol
from pydantic import BaseModel, Field

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names model providers accept: letters, digits, ``_`` and ``-``, 1 to 64 long."""


class LoopToolInput(BaseModel):
    """The arguments of a loop tool."""

    request: str = Field(
        description=(
            "The complete task for this tool, as one self-contained message: what to "
            "produce, with any draft, material or constraints it needs."
        )
    )


class LoopToolArtifact(TypedDict, total=False):
    """What a loop tool's ``ToolMessage`` carries as ``artifact`` (what the output has)."""

    stop_reason: str
    iteration: int
    scores: list[float | None]
    feedback: list[str]


def loop_as_tool(
    loop: PregelProtocol[Any, Any, Any, Any], *, name: str, description: str
) -> BaseTool:
    """Offer a compiled loop to a tool-calling agent as a tool named ``name``.

    The tool takes ``request`` (a string) and runs the loop on it with the calling run's
    config (sync or async); its result is the loop's final answer, with a line saying so when
    the evaluator did not accept it; the `LoopToolArtifact` is the ``artifact``. `TypeError`
    for a ``loop`` that is not a compiled graph, `ValueError` for a bad ``name`` (letters,
    digits, ``_``, ``-``; at most 64) or an empty ``description``.

    Example:
        ```python
        refine = loop_as_tool(editor, name="refine_draft", description="Rewrite a draft ...")
        assistant = create_agent("openai:gpt-5.4-mini", tools=[refine])
        ```
    """
    if not isinstance(loop, PregelProtocol):
        raise TypeError(
            f"loop_as_tool needs a compiled loop (create_loop_agent(...)); got "
            f"{type(loop).__name__}: {loop!r:.80}"
        )
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.match(name):
        raise ValueError(
            f"tool name {name!r} is not usable: give 1 to 64 letters, digits, '_' or '-' "
            f"(e.g. 'refine_draft')"
        )
    if not isinstance(description, str) or not description.strip():
        raise ValueError(
            f"tool {name!r} needs a description (got {description!r}): say what the loop "
            f"produces and when the agent should call it"
        )

    def run(request: str, config: RunnableConfig) -> tuple[str, LoopToolArtifact]:
        return tool_result(loop.invoke(_loop_input(request), config))

    async def arun(request: str, config: RunnableConfig) -> tuple[str, LoopToolArtifact]:
        return tool_result(await loop.ainvoke(_loop_input(request), config))

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=name,
        description=description,
        args_schema=LoopToolInput,
        response_format="content_and_artifact",
    )


def _loop_input(request: str) -> dict[str, list[BaseMessage]]:
    return {"messages": [HumanMessage(content=request)]}


def tool_result(output: Mapping[str, Any]) -> tuple[str, LoopToolArtifact]:
    """The tool's content and artifact for a loop's output.

    Example:
        ```python
        content, artifact = tool_result(loop.invoke({"messages": [request]}))
        ```
    """
    answer = output.get("last_response")
    if not isinstance(answer, AIMessage):
        answer = next(
            (m for m in reversed(output.get("messages") or []) if isinstance(m, AIMessage)),
            None,
        )
    if answer is None:
        raise ValueError(
            f"the loop's output has no answer (keys: {sorted(output)}); expected 'messages' "
            f"ending with an AIMessage, as create_loop_agent's loops return"
        )
    artifact: LoopToolArtifact = {}
    if "stop_reason" in output and output["stop_reason"] is not None:
        artifact["stop_reason"] = str(output["stop_reason"])
    if "iteration" in output:
        artifact["iteration"] = int(output["iteration"])
    if "records" in output:
        artifact["scores"] = [record.get("score") for record in output["records"]]
    if "feedback" in output:
        artifact["feedback"] = list(output["feedback"])
    content = str(answer.text)
    reason = artifact.get("stop_reason")
    if reason is not None and reason != "accepted":
        last = (artifact.get("feedback") or [""])[-1].strip()
        content += (
            f"\n\n[Not accepted by the evaluator: the loop stopped ({reason}) after "
            f"{artifact.get('iteration', 0)} attempt(s)."
            + (f" Last feedback: {last}]" if last else "]")
        )
    return content, artifact
