"""A loop offered to a tool-calling agent as a tool.

`loop_as_tool` wraps a compiled loop into a LangChain tool with the name and description
you choose. The calling agent's model writes a request; the loop runs on it (its agent
answers, its evaluator judges, until accepted or out of attempts) and the final answer
is the tool's result. The calling model is told when the evaluator did not accept the
answer; the loop's stop reason, iteration count, scores and feedback come with the
``ToolMessage`` as its ``artifact`` (not sent to the model).
"""

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
    """What a loop tool attaches to its ``ToolMessage`` as ``artifact``.

    Keys are present when the loop's output has them (``output_mode="full_state"``, the
    default); a loop built with ``"full_history"`` or ``"last_message"`` returns only
    messages, so its artifact is empty.

    Attributes:
        stop_reason: Why the loop ended (``accepted``, ``max_iterations``, ...).
        iteration: How many attempts the loop made.
        scores: Each attempt's score (``None`` where the evaluator gave none).
        feedback: Each evaluation's feedback, oldest first.

    """

    stop_reason: str
    iteration: int
    scores: list[float | None]
    feedback: list[str]


def loop_as_tool(
    loop: PregelProtocol[Any, Any, Any, Any], *, name: str, description: str
) -> BaseTool:
    """Offer a compiled loop to a tool-calling agent as a tool.

    The tool takes one argument, ``request`` (a string). Each call runs the loop on
    ``{"messages": [HumanMessage(request)]}`` with the calling run's config (its
    callbacks, tags and checkpointer namespace), so the loop shows up in traces and on
    ``stream(..., subgraphs=True)`` as a subgraph of the calling agent. The tool's result
    is the text of the loop's final answer; when the evaluator did not accept it (the
    loop ran out of attempts or steps), a line saying so and giving the last feedback
    follows, so the calling model does not take it for an approved answer. The
    `LoopToolArtifact` rides along as the ``ToolMessage``'s ``artifact``.

    Sync and async both work: ``invoke`` runs the loop with ``invoke``, ``ainvoke`` with
    ``ainvoke`` (a loop with an async agent or evaluator needs the async form).

    Args:
        loop: A compiled loop, as returned by `create_loop_agent` (any output mode).
        name: The tool's name, as the calling model sees it: letters, digits, ``_``
            and ``-``, at most 64 characters.
        description: What the tool does and when to use it, as the calling model sees
            it (e.g. "Refine a draft until the style judge passes it.").

    Returns:
        A LangChain tool (``response_format="content_and_artifact"``).

    Raises:
        TypeError: ``loop`` is not a compiled graph.
        ValueError: ``name`` or ``description`` is empty or malformed.

    Example:
        ```python
        from langchain.agents import create_agent
        from loop_agents import create_loop_agent
        from loop_agents_cli.serving.tool import loop_as_tool

        editor = create_loop_agent(writer, style_judge, max_iterations=3)
        refine = loop_as_tool(
            editor,
            name="refine_draft",
            description="Rewrite a draft until the style judge passes it. Give the draft.",
        )
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
