"""loop_agents: agents that check their own work, as LangGraph graphs.

An agent answers, an evaluator judges the answer, and while the evaluator is not
satisfied its feedback goes back to the agent for another attempt:
``create_loop_agent(agent, evaluate, max_iterations=3)``. The guide: ``docs/index.md``.
The layers, lowest first (a module imports from its own and earlier ones only):

1. ``runtime``: running calls reliably, sync and async: time limits, tokens, thread locks.
2. ``loop``: the loop's core for both hosts: state, control protocol, records, history.
3. ``controls``: the parts of a loop, one module each (``loop_agents.controls``).
4. ``hosts``: `create_loop_agent` (a LangGraph graph) and `LoopMiddleware` (``create_agent``).
5. ``evaluators``: the LLM judge, rules, combinators, human review, openevals adapters.
"""

import importlib
from typing import TYPE_CHECKING, Any

from loop_agents._version import __version__ as __version__

# The public names. Type checkers read these imports; at run time `__getattr__` imports
# each name from its module (`_LAZY`) on first use, so that `import loop_agents` (and
# `loop-agents --help`) loads neither LangChain nor LangGraph.
if TYPE_CHECKING:
    from loop_agents.controls.budgets import UnknownPriceError as UnknownPriceError
    from loop_agents.evaluators import JudgeError as JudgeError
    from loop_agents.evaluators import all_of as all_of
    from loop_agents.evaluators import from_openevals as from_openevals
    from loop_agents.evaluators import llm_judge as llm_judge
    from loop_agents.evaluators import panel as panel
    from loop_agents.evaluators import rule as rule
    from loop_agents.evaluators import text_rule as text_rule
    from loop_agents.evaluators import todos_complete as todos_complete
    from loop_agents.evaluators.human import InvalidReviewError as InvalidReviewError
    from loop_agents.evaluators.human import human_review as human_review
    from loop_agents.hosts.graph import create_loop_agent as create_loop_agent
    from loop_agents.hosts.loop_agent import LoopAgent as LoopAgent
    from loop_agents.hosts.middleware import LoopMiddleware as LoopMiddleware
    from loop_agents.loop.evaluation import InvalidEvaluationError as InvalidEvaluationError
    from loop_agents.loop.events import AgentFailed as AgentFailed
    from loop_agents.loop.events import AgentFinished as AgentFinished
    from loop_agents.loop.events import CandidatesJudged as CandidatesJudged
    from loop_agents.loop.events import EvaluationFinished as EvaluationFinished
    from loop_agents.loop.events import HistoryCompacted as HistoryCompacted
    from loop_agents.loop.events import IterationStarted as IterationStarted
    from loop_agents.loop.events import LoopEvent as LoopEvent
    from loop_agents.loop.events import LoopFinished as LoopFinished
    from loop_agents.loop.input_checks import LoopInputError as LoopInputError
    from loop_agents.loop.protocol import LoopControl as LoopControl
    from loop_agents.loop.state import IterationRecord as IterationRecord
    from loop_agents.loop.state import LoopContext as LoopContext
    from loop_agents.loop.state import LoopEvaluation as LoopEvaluation
    from loop_agents.loop.state import LoopState as LoopState
    from loop_agents.loop.state import StopReason as StopReason
    from loop_agents.runtime.thread_locking import ThreadBusyError as ThreadBusyError
    from loop_agents.runtime.time_limits import LoopTimeoutError as LoopTimeoutError


_LAZY: dict[str, str] = {
    "AgentFailed": "loop_agents.loop.events",
    "AgentFinished": "loop_agents.loop.events",
    "all_of": "loop_agents.evaluators",
    "CandidatesJudged": "loop_agents.loop.events",
    "create_loop_agent": "loop_agents.hosts.graph",
    "EvaluationFinished": "loop_agents.loop.events",
    "from_openevals": "loop_agents.evaluators",
    "HistoryCompacted": "loop_agents.loop.events",
    "human_review": "loop_agents.evaluators.human",
    "InvalidEvaluationError": "loop_agents.loop.evaluation",
    "InvalidReviewError": "loop_agents.evaluators.human",
    "IterationRecord": "loop_agents.loop.state",
    "IterationStarted": "loop_agents.loop.events",
    "JudgeError": "loop_agents.evaluators",
    "llm_judge": "loop_agents.evaluators",
    "LoopAgent": "loop_agents.hosts.loop_agent",
    "LoopContext": "loop_agents.loop.state",
    "LoopControl": "loop_agents.loop.protocol",
    "LoopEvaluation": "loop_agents.loop.state",
    "LoopEvent": "loop_agents.loop.events",
    "LoopFinished": "loop_agents.loop.events",
    "LoopInputError": "loop_agents.loop.input_checks",
    "LoopMiddleware": "loop_agents.hosts.middleware",
    "LoopState": "loop_agents.loop.state",
    "LoopTimeoutError": "loop_agents.runtime.time_limits",
    "panel": "loop_agents.evaluators",
    "rule": "loop_agents.evaluators",
    "StopReason": "loop_agents.loop.state",
    "text_rule": "loop_agents.evaluators",
    "ThreadBusyError": "loop_agents.runtime.thread_locking",
    "todos_complete": "loop_agents.evaluators",
    "UnknownPriceError": "loop_agents.controls.budgets",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'loop_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
