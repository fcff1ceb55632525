"""`todos_complete`: go on while the agent's own plan has items that are not done.

An agent with LangChain's ``TodoListMiddleware`` (``create_agent(...,
middleware=[TodoListMiddleware()])``, or ``create_deep_agent(..., middleware=[...])``)
keeps a plan in its state (``todos``: items with a ``content`` and a ``status`` of
``"pending"``, ``"in_progress"`` or ``"completed"``, written with its ``write_todos``
tool). `todos_complete` accepts an attempt when every item is
completed, and otherwise names the open ones in the feedback, so the agent carries on
with its plan instead of stopping halfway (as Microsoft Agent Framework's
``TodoCompletionLoopEvaluator`` does). Combine it with a check of the result itself:

```python
evaluator = all_of(todos_complete(), files_check(tests))
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from loop_agents.evaluators.base import make_evaluator
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation


def open_items(todos: object) -> list[tuple[str, str]]:
    """The items of a plan that are not completed: ``(content, status)`` pairs.

    Raises:
        ValueError: ``todos`` is not a list of items with a ``content``.

    Example:
        ```python
        open_items([{"content": "write tests", "status": "pending"}])
        # [('write tests', 'pending')]
        ```

    """
    if not isinstance(todos, Sequence) or isinstance(todos, str):
        raise ValueError(f"the plan is {type(todos).__name__}, not a list of items")
    items: list[tuple[str, str]] = []
    for item in todos:
        if not isinstance(item, Mapping) or not isinstance(item.get("content"), str):
            raise ValueError(f"a plan item has no 'content' text: {item!r:.80}")
        status = str(item.get("status") or "pending")
        if status != "completed":
            items.append((item["content"], status))
    return items


def todos_complete(
    *, todos_key: str = "todos", require_plan: bool = False, name: str = "todos_complete"
) -> LoopEvaluatorRunnable:
    """Accept when every item of the agent's plan (its state's ``todos``) is completed.

    Args:
        todos_key: The agent's state key holding its plan.
        require_plan: Ask for another attempt when the agent made no plan (by default
            an attempt without a plan is accepted: there is nothing left to do).
        name: The evaluator's name.

    Returns:
        An evaluator (sync and async): ``stop`` when nothing is left; otherwise the
        feedback lists the open items, and the score is the share completed.

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
        if require_plan:
            return {
                "stop": False,
                "feedback": "Make a plan first: write the steps as a todo list, then do them.",
                "score": 0.0,
            }
        return {"stop": True, "score": 1.0}
    try:
        left = open_items(todos)
    except ValueError as error:
        return {"stop": False, "feedback": f"The plan cannot be read: {error}.", "score": 0.0}
    done = len(todos) - len(left)
    score = done / len(todos)
    if not left:
        return {"stop": True, "score": 1.0}
    listed = "\n".join(f"- {content} ({status})" for content, status in left)
    return {
        "stop": False,
        "feedback": (
            f"{done} of {len(todos)} items of your plan are completed. Not done yet:\n{listed}\n"
            f"Carry on with them, and mark each completed when it is."
        ),
        "score": score,
    }
