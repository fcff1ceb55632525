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

The public names below are imported from here; the controls from `loop_agents.controls`.
The package is in layers, one folder each, lowest first; a module imports only from its
own layer and those before it (``tests/repository/test_layers.py`` checks it, and that no
import cycle exists; ``docs/architecture.md`` draws them):

1. ``runtime``: running calls reliably: programs written once for ``invoke`` and
   ``ainvoke``, time limits, token counting, one run at a time on a thread.
2. ``loop``: the loop's core, written once for both hosts: its state, the control
   protocol, the two steps of an iteration, records, events, feedback, history, storage.
3. ``controls``: the parts of a loop, one module each.
4. ``hosts``: `create_loop_agent` (a LangGraph graph) and `LoopMiddleware` (inside
   ``create_agent``).
5. ``evaluators``: the LLM judge, rules, combinators, human review, the openevals adapters.

The command, the eval and the evaluators that run code are distributions of their own
(``loop-agents-cli``, ``loop-agents-evals``, ``loop-agents-checks``), built on this one.
"""

import importlib
from typing import TYPE_CHECKING, Any

from loop_agents._version import __version__ as __version__

# The public names: what a user of the loop needs (the factory and the middleware, the
# control protocol, the state, context and record types, the events, the ready-made
# evaluators and the errors). Type checkers read these imports; at run time each name is
# imported from its module on first use (`__getattr__` below, from `_LAZY`), so that
# `import loop_agents` (and `loop-agents --help`) does not load LangChain and LangGraph.
if TYPE_CHECKING:
    from loop_agents.controls.budgets import UnknownPriceError
    from loop_agents.evaluators import (
        JudgeError,
        all_of,
        from_openevals,
        llm_judge,
        panel,
        rule,
        text_rule,
        todos_complete,
    )
    from loop_agents.evaluators.human import InvalidReviewError, human_review
    from loop_agents.hosts.graph import create_loop_agent
    from loop_agents.hosts.loop_agent import LoopAgent
    from loop_agents.hosts.middleware import LoopMiddleware
    from loop_agents.loop.evaluation import InvalidEvaluationError
    from loop_agents.loop.events import (
        AgentFailed,
        AgentFinished,
        CandidatesJudged,
        EvaluationFinished,
        HistoryCompacted,
        IterationStarted,
        LoopEvent,
        LoopFinished,
    )
    from loop_agents.loop.input_checks import LoopInputError
    from loop_agents.loop.protocol import LoopControl
    from loop_agents.loop.state import (
        IterationRecord,
        LoopContext,
        LoopEvaluation,
        LoopState,
        StopReason,
    )
    from loop_agents.runtime.thread_locking import ThreadBusyError
    from loop_agents.runtime.time_limits import LoopTimeoutError

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
"""Each public name and the module it lives in (the imports above, for type checkers)."""

__all__ = [
    "AgentFailed",
    "AgentFinished",
    "CandidatesJudged",
    "EvaluationFinished",
    "HistoryCompacted",
    "InvalidEvaluationError",
    "InvalidReviewError",
    "IterationRecord",
    "IterationStarted",
    "JudgeError",
    "LoopAgent",
    "LoopContext",
    "LoopControl",
    "LoopEvaluation",
    "LoopEvent",
    "LoopFinished",
    "LoopInputError",
    "LoopMiddleware",
    "LoopState",
    "LoopTimeoutError",
    "StopReason",
    "ThreadBusyError",
    "UnknownPriceError",
    "all_of",
    "create_loop_agent",
    "from_openevals",
    "human_review",
    "llm_judge",
    "panel",
    "rule",
    "text_rule",
    "todos_complete",
]


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
