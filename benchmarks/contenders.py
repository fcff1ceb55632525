"""What the benchmarks run: fake chat models, an evaluator, and the three loops compared.

- ``create_loop_agent``: the package's loop, as it is in the tree.
- ``minimal_langgraph_loop``: the same loop built by hand, the way the seed article does
  it: a ``StateGraph`` with the same state keys and reducers, two async nodes and a
  router, nothing else.
- ``plain_async_loop``: no LangGraph at all, a Python ``for`` loop around ``ainvoke``.

All three call the same chat model through ``ainvoke`` and the same async evaluator.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer
from pydantic import Field

from loop_agents import LoopContext, LoopEvaluation


def message_chars(messages: list[BaseMessage]) -> int:
    """The characters of the messages' text: the benchmarks' tokenizer-free size."""
    return sum(len(m.text) for m in messages)


class FakeChat(BaseChatModel):
    """A chat model that answers at once (or after ``delay`` seconds).

    Every answer is a new message. With ``record=True`` it counts the characters of every
    call's messages into ``sent_chars``, keeps the messages in ``prompts`` and reports the
    characters as ``input_tokens`` (otherwise it does no per-message work, so that its
    cost does not grow with the conversation).
    """

    delay: float = 0.0
    answer_chars: int = 2
    record: bool = False
    sent_chars: list[int] = Field(default_factory=list)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    counter: Iterator[int] = Field(default_factory=itertools.count)

    @property
    def _llm_type(self) -> str:
        return "benchmark-fake"

    def _answer(self, number: int, usage: UsageMetadata, **kwargs: Any) -> AIMessage:
        """The answer to call ``number`` (from 0); ``kwargs`` are the call's options."""
        text = f"answer {number} " + "x" * max(0, self.answer_chars - 8)
        return AIMessage(content=text[: max(self.answer_chars, 1)], usage_metadata=usage)

    def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        chars = message_chars(messages) if self.record else 0
        if self.record:
            self.sent_chars.append(chars)
            self.prompts.append(list(messages))
        usage: UsageMetadata = {
            "input_tokens": chars,
            "output_tokens": self.answer_chars,
            "total_tokens": chars + self.answer_chars,
        }
        message = self._answer(next(self.counter), usage, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        return self._result(messages, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._result(messages, **kwargs)


class FakeJudgeChat(FakeChat):
    """A judge's model: it calls the first tool it is offered with a failing verdict.

    For ``llm_judge(..., method="function_calling")``: the verdict scores 0 and its
    feedback is ``Review N: `` padded to ``answer_chars`` characters (N counts the calls
    from 1).
    """

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer ``tools`` (as OpenAI tool definitions) on every call."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _answer(self, number: int, usage: UsageMetadata, **kwargs: Any) -> AIMessage:
        tools = kwargs.get("tools") or [{"function": {"name": "Verdict"}}]
        feedback = f"Review {number + 1}: ".ljust(self.answer_chars, "y")
        call = {
            "name": tools[0]["function"]["name"],
            "args": {"score": 0, "feedback": feedback},
            "id": f"verdict-{number + 1}",
        }
        return AIMessage(content="", tool_calls=[call], usage_metadata=usage)


AsyncEvaluator = Callable[[LoopContext], Awaitable[LoopEvaluation]]


def accept_at(iterations: int, feedback: str = "Try again.") -> AsyncEvaluator:
    """An async evaluator that asks for another attempt until ``iterations`` answers."""

    async def evaluate(context: LoopContext) -> LoopEvaluation:
        if context["iteration"] >= iterations:
            return {"stop": True}
        return {"stop": False, "feedback": feedback}

    return evaluate


class MinimalState(TypedDict):
    """The seed's state: the same keys and reducers as `loop_agents.LoopState`'s core."""

    messages: Annotated[list[AnyMessage], add_messages]
    init_messages: NotRequired[list[AnyMessage]]
    iteration: NotRequired[Annotated[int, operator.add]]
    last_response: NotRequired[AIMessage]
    stop: NotRequired[bool]
    feedback: NotRequired[Annotated[list[str], operator.add]]


def minimal_langgraph_loop(
    model: BaseChatModel,
    evaluator: AsyncEvaluator,
    max_iterations: int,
    *,
    checkpointer: Checkpointer = None,
) -> CompiledStateGraph[MinimalState, None, MinimalState, MinimalState]:
    """The loop as a hand-built ``StateGraph``: two async nodes and a router."""

    async def invoke_agent(state: MinimalState) -> dict[str, Any]:
        response = await model.ainvoke(state["messages"])
        return {"messages": [response], "iteration": 1, "last_response": response}

    async def evaluate(state: MinimalState) -> dict[str, Any]:
        context: LoopContext = {
            "iteration": state.get("iteration", 0),
            "init_messages": state.get("init_messages") or state["messages"][:1],
            "last_response": state["last_response"],
            "feedback": state.get("feedback", []),
            "messages": state["messages"],
        }
        evaluation = await evaluator(context)
        text = evaluation.get("feedback", "")
        updates: dict[str, Any] = {"stop": evaluation["stop"], "feedback": [text]}
        if not evaluation["stop"]:
            updates["messages"] = [HumanMessage(content=text)]
        return updates

    def route(state: MinimalState) -> str:
        if state.get("stop") or state.get("iteration", 0) >= max_iterations:
            return END
        return "invoke_agent"

    builder = StateGraph(MinimalState)
    builder.add_node("invoke_agent", invoke_agent)
    builder.add_node("evaluate", evaluate)
    builder.add_edge(START, "invoke_agent")
    builder.add_edge("invoke_agent", "evaluate")
    builder.add_conditional_edges("evaluate", route, ["invoke_agent", END])
    return builder.compile(checkpointer=checkpointer).with_config(
        recursion_limit=2 * max_iterations + 3
    )


async def plain_async_loop(
    model: BaseChatModel,
    evaluator: AsyncEvaluator,
    max_iterations: int,
    request: list[AnyMessage],
) -> list[AnyMessage]:
    """The loop without LangGraph: call, judge, append the feedback, repeat."""
    messages = list(request)
    feedback: list[str] = []
    for iteration in range(1, max_iterations + 1):
        response = await model.ainvoke(messages)
        messages.append(response)
        context: LoopContext = {
            "iteration": iteration,
            "init_messages": list(request),
            "last_response": response,
            "feedback": feedback,
            "messages": messages,
        }
        evaluation = await evaluator(context)
        if evaluation["stop"]:
            break
        feedback.append(evaluation.get("feedback", ""))
        messages.append(HumanMessage(content=feedback[-1]))
    return messages
