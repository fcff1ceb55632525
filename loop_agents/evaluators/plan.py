"""`todos_complete`: go on while the agent's own plan (its ``todos``) has open items.

The plan is the one LangChain's ``TodoListMiddleware`` keeps (``create_agent`` and
``create_deep_agent``); see docs/evaluators.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from loop_agents.evaluators.base import make_evaluator
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation


def todos_complete(
    *, todos_key: str = "todos", require_plan: bool = False, name: str = "todos_complete"
) -> LoopEvaluatorRunnable:
    """Accept when every item of the agent's plan (its state's ``todos``) is completed.

    Otherwise the feedback lists the open items; the score is the share completed. An
    attempt without a plan is accepted, unless ``require_plan=True``.

    Example:
        ```python
        loop = create_loop_agent(create_deep_agent(model=model), todos_complete(), 5)
        ```
    """
    if not isinstance(todos_key, str) or not todos_key:
        raise TypeError(f"todos_key must be a non-empty string; got {todos_key!r}")

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return _verdict((context.get("agent_state") or {}).get(todos_key), require_plan)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return evaluate(context, config)

    criteria = "Every item of your plan (your todo list) is completed."
    return make_evaluator(name, evaluate, aevaluate, criteria=criteria)


def _verdict(todos: Any, require_plan: bool) -> LoopEvaluation:
    if not todos:
        if not require_plan:
            return {"stop": True, "score": 1.0}
        feedback = "Make a plan first: write the steps as a todo list, then do them."
        return {"stop": False, "feedback": feedback, "score": 0.0}
    problem = None
    if not isinstance(todos, Sequence) or isinstance(todos, str):
        problem = f"the plan is {type(todos).__name__}, not a list of items"
    else:
        odd = [
            i for i in todos if not (isinstance(i, Mapping) and isinstance(i.get("content"), str))
        ]
        problem = f"a plan item has no 'content' text: {odd[0]!r:.80}" if odd else None
    if problem is not None:
        return {"stop": False, "feedback": f"The plan cannot be read: {problem}.", "score": 0.0}
    status = [(item["content"], str(item.get("status") or "pending")) for item in todos]
    left = [(content, state) for content, state in status if state != "completed"]
    if not left:
        return {"stop": True, "score": 1.0}
    done = len(todos) - len(left)
    listed = "\n".join(f"- {content} ({state})" for content, state in left)
    feedback = (
        f"{done} of {len(todos)} items of your plan are completed. Not done yet:\n{listed}\n"
        f"Carry on with them, and mark each completed when it is."
    )
    return {"stop": False, "feedback": feedback, "score": done / len(todos)}
