"""A task's visible tests or checks as a loop evaluator, and the messages a task is sent.

The built-in ``loop`` arm runs `create_loop_agent` with `visible_checks` as its
evaluator; an arm of your own (a factory) can build its loop the same way, so that it
is judged by what the built-in arms are judged by:

Example:
    ```python
    def my_arm(task, model, settings):
        return create_loop_agent(model, visible_checks(task), settings.iterations,
                                 history="feedback_log")
    ```
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableLambda

from loop_agents.evals.code_tests import DEFAULT_TIMEOUT
from loop_agents.evals.grading import VisibleResult, grader_for, request_text, system_prompt
from loop_agents.evals.sampling import was_cut_off
from loop_agents.evals.tasks import Task
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime._sync_bridge import run_coroutine

__all__ = ["CUT_OFF_FEEDBACK", "task_messages", "visible_checks", "visible_verdict"]

CUT_OFF_FEEDBACK = {
    "code": (
        "Your answer was cut off at the token cap before it ended. Answer with the code "
        "only: one code block, no explanation."
    ),
    "instructions": (
        "Your answer was cut off at the token cap before it ended. Answer more briefly, "
        "with the answer only."
    ),
}
"""The sentence a visible-checks verdict ends with when the answer hit the token cap."""


def task_messages(task: Task) -> list[AnyMessage]:
    """What every arm is sent first: the task kind's system message and the request.

    Example:
        ```python
        system, request = task_messages(task)
        ```
    """
    return [SystemMessage(system_prompt(task)), HumanMessage(request_text(task))]


def visible_verdict(task: Task, found: VisibleResult, answer: AIMessage) -> LoopEvaluation:
    """The loop's verdict on ``answer`` from what its visible tests or checks found.

    Accepted when every one passed; else the failures are the feedback (with
    `CUT_OFF_FEEDBACK` added for an answer cut off at the token cap). The score is the
    share that passed, 0 to 100.

    Example:
        ```python
        verdict = visible_verdict(task, await grader.check(answer.text), answer)
        ```
    """
    if found.ok:
        return {"stop": True, "score": found.score}
    feedback = found.feedback
    if was_cut_off(answer):
        feedback = f"{feedback}\n\n{CUT_OFF_FEEDBACK[task.kind]}".strip()
    return {"stop": False, "feedback": feedback, "score": found.score}


def visible_checks(
    task: Task, *, code_timeout: float = DEFAULT_TIMEOUT
) -> Runnable[LoopContext, LoopEvaluation]:
    """The task's visible tests (code) or its checks (instructions) as a loop evaluator.

    The evaluator of the built-in ``loop`` arm (`visible_verdict`), sync and async. The
    hidden tests stay hidden: they only grade the arm's answers afterwards.

    Args:
        task: The task.
        code_timeout: Seconds a code answer and its tests may run.

    Example:
        ```python
        loop = create_loop_agent(model, visible_checks(task), 4)
        result = await loop.ainvoke({"messages": task_messages(task)})
        ```
    """
    grader = grader_for(task, code_timeout=code_timeout)

    async def acheck(context: LoopContext) -> LoopEvaluation:
        answer = context["last_response"]
        return visible_verdict(task, await grader.check(answer.text), answer)

    def check(context: LoopContext) -> LoopEvaluation:
        return run_coroutine(acheck(context))

    return RunnableLambda(check, afunc=acheck, name="visible tests")
