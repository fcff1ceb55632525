"""loop_agents: agents that check their own work, as LangGraph graphs.

An agent answers, an evaluator judges the answer, and while the evaluator is not
satisfied its feedback goes back to the agent for another attempt.

Example:
    ```python
    from loop_agents import LoopContext, LoopEvaluation, create_loop_agent

    def evaluate(context: LoopContext) -> LoopEvaluation:
        ok = "42" in context["last_response"].text
        return {"stop": True} if ok else {"stop": False, "feedback": "Compute it again."}

    loop = create_loop_agent(agent, evaluate, max_iterations=3)
    ```

"""

from loop_agents._agent import AgentLike
from loop_agents._evaluation import Evaluator, InvalidEvaluationError
from loop_agents.feedback import feedback_message, is_feedback
from loop_agents.graph import create_loop_agent
from loop_agents.state import (
    IterationRecord,
    LoopContext,
    LoopEvaluation,
    LoopInput,
    LoopOutput,
    LoopState,
    StopReason,
)

__all__ = [
    "AgentLike",
    "Evaluator",
    "InvalidEvaluationError",
    "IterationRecord",
    "LoopContext",
    "LoopEvaluation",
    "LoopInput",
    "LoopOutput",
    "LoopState",
    "StopReason",
    "create_loop_agent",
    "feedback_message",
    "is_feedback",
]
