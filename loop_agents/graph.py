r"""`create_loop_agent`: the two-node graph that calls an agent until an evaluator is satisfied.

```
START -> invoke_agent -> evaluate --(continue)--> invoke_agent
                                 \--(stop)------> END
```
"""

from __future__ import annotations

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from loop_agents._agent import AgentLike
from loop_agents._evaluation import Evaluator
from loop_agents.nodes import STEPS_PER_ITERATION, LoopNodes
from loop_agents.state import (
    LoopInput,
    LoopOutput,
    LoopState,
)


def _check_max_iterations(max_iterations: object) -> int:
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
        raise TypeError(
            f"max_iterations must be an int >= 1; got {type(max_iterations).__name__} "
            f"{max_iterations!r}"
        )
    if max_iterations < 1:
        raise ValueError(
            f"max_iterations must be >= 1 (the agent is called at least once); got {max_iterations}"
        )
    return max_iterations


def route(state: LoopState) -> str:
    """Go back to the agent unless the evaluate node recorded why the loop ends."""
    return END if state.get("stop_reason") else "invoke_agent"


def create_loop_agent(
    agent: AgentLike,
    evaluator: Evaluator,
    max_iterations: int = 100,
    *,
    name: str = "loop_agent",
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
) -> CompiledStateGraph[LoopState, None, LoopInput, LoopOutput]:
    """Build a loop agent: call ``agent``, let ``evaluator`` judge, repeat until accepted.

    The result is a compiled LangGraph graph with two nodes, ``invoke_agent`` and
    ``evaluate``. Each iteration the agent is sent the whole conversation (the request,
    its earlier answers and the feedback on them); its answer is appended to
    ``messages`` and the evaluator is given a `LoopContext`. When the evaluator returns
    ``stop=False`` its feedback is appended as a user turn and the agent tries again;
    the loop ends when the evaluator says stop or after ``max_iterations`` answers.

    Args:
        agent: What produces the answers. A compiled graph with a ``messages`` key
            (e.g. ``create_agent(...)``) is given ``{"messages": [...]}``; a chat model,
            any other ``Runnable`` or a plain sync or async function is given the list
            of messages and may return an ``AIMessage``, a string, or a mapping with
            ``messages``. Everything it produced is appended; its last AI message is
            the answer.
        evaluator: A sync or async function of `LoopContext` returning a
            `LoopEvaluation` (``stop``, ``feedback``, optional ``score``).
        max_iterations: The most times the agent is called in one loop (an int >= 1).
        name: The graph's name (shown in traces and when nested in a parent graph).
        checkpointer: A LangGraph checkpointer; with it a loop resumes after an error
            and a second run on the same thread starts a new loop on the same
            conversation.
        store: A LangGraph store, passed to the compiled graph.

    Returns:
        A compiled ``StateGraph``. Its output has ``messages`` (ending with the
        accepted or last answer), ``init_messages``, ``iteration``, ``last_response``,
        ``stop``, ``feedback``, ``stop_reason`` and ``records``.

    Raises:
        TypeError: ``agent`` or ``evaluator`` cannot be called, or ``max_iterations``
            is not an int.
        ValueError: ``max_iterations`` is below 1.

    Example:
        ```python
        from langchain.agents import create_agent
        from langchain_core.messages import HumanMessage
        from loop_agents import LoopContext, LoopEvaluation, create_loop_agent


        def evaluate(context: LoopContext) -> LoopEvaluation:
            text = context["last_response"].text
            if len(text) <= 280:
                return {"stop": True}
            return {"stop": False, "feedback": f"{len(text)} characters; keep it to 280."}


        loop = create_loop_agent(create_agent("openai:gpt-5.4-mini"), evaluate, 3)
        result = loop.invoke({"messages": [HumanMessage("Announce our release.")]})
        print(result["last_response"].text, result["stop_reason"])
        ```

    """
    max_iterations = _check_max_iterations(max_iterations)
    nodes = LoopNodes(agent, evaluator, max_iterations)
    builder = StateGraph(LoopState, input_schema=LoopInput, output_schema=LoopOutput)
    builder.add_node(
        "invoke_agent",
        RunnableLambda(nodes.invoke_agent, afunc=nodes.ainvoke_agent, name="invoke_agent"),
    )
    builder.add_node(
        "evaluate",
        RunnableLambda(nodes.evaluate, afunc=nodes.aevaluate, name="evaluate"),
    )
    builder.add_edge(START, "invoke_agent")
    builder.add_edge("invoke_agent", "evaluate")
    builder.add_conditional_edges("evaluate", route, ["invoke_agent", END])
    graph = builder.compile(checkpointer=checkpointer, store=store, name=name)
    return graph.with_config(
        recursion_limit=STEPS_PER_ITERATION * max_iterations + STEPS_PER_ITERATION + 1
    )
