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

The public names below are imported from here; the modules that hold them are arranged
in layers, one folder each, lowest first. A module imports only from its own layer and
from the layers listed before it, never from a later one, and never from this package's
public names (``tests/test_layers.py`` checks both, and that no import cycle exists):

1. ``sandbox``: running untrusted code: limits, killing every process it started, no
   secret of the caller readable.
2. ``models``: where the model is: endpoint settings and resolution, the bundled local
   server, HTTP transports.
3. ``loop``: what `create_loop_agent` is made of: the graph, its nodes and state, input
   checks, history policies, feedback, stopping, selection, output, events, tracing,
   timeouts, checkpoints, storage, thread locking, and the helpers they share with the
   layers above (calling agents and evaluators, counting tokens); and `LoopMiddleware`,
   the same nodes run inside a ``create_agent`` agent.
4. ``evaluators``: every evaluator: the LLM judge, rules, combinators, command checks,
   human review, code review and the code runner, the 相见欢 form, the openevals
   adapter.
5. ``console``: rendering a loop for people: live in a terminal, or as an HTML page.
6. ``demos``: the Song-lyrics demo and its prompts.
7. ``evals``: task sets, arms, the eval runner and its report.
8. ``serving``: LangGraph Server entry points, configurable loops, loop-as-tool.
9. ``cli``: the ``loop-agents`` command.

Only ``__init__.py`` (this module) and ``_version.py`` sit beside the layers.
"""

import ast
import functools
import importlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_agents._moved import moved_attribute
from loop_agents._version import __version__ as __version__

# The public names and where they live: what a user of the loop needs (the factory, the
# control protocol, the state, context and record types, the events, the ready-made
# evaluators and the errors). Type checkers read these imports; at run time each name is
# imported from its module on first use (`__getattr__` below), so that `import
# loop_agents` (and `loop-agents --help`) does not load LangChain and LangGraph. Everything
# else is imported from its subpackage; the names that used to be here are in `_MOVED`.
if TYPE_CHECKING:
    from loop_agents.evaluators import (
        JudgeError,
        all_of,
        code_runner,
        command_check,
        files_check,
        from_openevals,
        llm_judge,
        panel,
        rule,
        text_rule,
        todos_complete,
    )
    from loop_agents.evaluators.human import InvalidReviewError, human_review
    from loop_agents.loop.controls.base import LoopControl
    from loop_agents.loop.controls.budgets import UnknownPriceError
    from loop_agents.loop.controls.retries import LoopTimeoutError
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
    from loop_agents.loop.graph import create_loop_agent
    from loop_agents.loop.input_checks import LoopInputError
    from loop_agents.loop.loop_agent import LoopAgent
    from loop_agents.loop.middleware import LoopMiddleware
    from loop_agents.loop.state import (
        IterationRecord,
        LoopContext,
        LoopEvaluation,
        LoopState,
        StopReason,
    )
    from loop_agents.loop.thread_locking import ThreadBusyError

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
    "code_runner",
    "command_check",
    "create_loop_agent",
    "files_check",
    "from_openevals",
    "human_review",
    "llm_judge",
    "panel",
    "rule",
    "text_rule",
    "todos_complete",
]

_MOVED: dict[str, str] = {
    "AgentLike": "loop_agents.loop.agents",
    "CandidateRecord": "loop_agents.loop.state",
    "CandidateScore": "loop_agents.loop.events",
    "CompactingHistory": "loop_agents.loop.history.compaction",
    "ConcurrentRuns": "loop_agents.loop.thread_locking",
    "DEFAULT_FEEDBACK_FORMAT": "loop_agents.loop.feedback",
    "Evaluator": "loop_agents.loop.evaluation",
    "FeedbackFormat": "loop_agents.loop.feedback",
    "FeedbackSource": "loop_agents.loop.state",
    "FormProblem": "loop_agents.demos.form_problems",
    "FormReport": "loop_agents.demos.xiangjianhuan",
    "HistoryChoice": "loop_agents.loop.history.stateful",
    "HistoryPolicy": "loop_agents.loop.history.policies",
    "LoopConsole": "loop_agents.console",
    "LoopEvaluatorRunnable": "loop_agents.loop.controls.criteria",
    "LoopHistory": "loop_agents.loop.history.policies",
    "LoopInput": "loop_agents.loop.state",
    "LoopMessages": "loop_agents.loop.output",
    "LoopOutput": "loop_agents.loop.state",
    "LoopRole": "loop_agents.loop.tracing",
    "LoopSettings": "loop_agents.serving.configurable",
    "LoopToolArtifact": "loop_agents.serving.tool",
    "OnAgentError": "loop_agents.loop.controls.agent_errors",
    "OutputMode": "loop_agents.loop.output",
    "PLAIN_FEEDBACK": "loop_agents.loop.feedback",
    "Price": "loop_agents.loop.controls.budgets",
    "Prices": "loop_agents.loop.controls.budgets",
    "ReviewDecision": "loop_agents.evaluators.human",
    "ReviewRequest": "loop_agents.evaluators.human",
    "Selection": "loop_agents.loop.controls.selection",
    "StatefulHistory": "loop_agents.loop.history.stateful",
    "Storage": "loop_agents.loop.storage",
    "StorageLayout": "loop_agents.loop.storage",
    "acheckpoint_before_iteration": "loop_agents.loop.checkpoints",
    "astream_to_console": "loop_agents.console",
    "athread_guard": "loop_agents.loop.thread_locking",
    "candidate_of": "loop_agents.loop.tracing",
    "check_xiangjianhuan": "loop_agents.demos.xiangjianhuan",
    "checkpoint_before_iteration": "loop_agents.loop.checkpoints",
    "checkpointed": "loop_agents.loop.checkpoints",
    "compacting": "loop_agents.loop.history.compaction",
    "configurable_loop": "loop_agents.serving.configurable",
    "cost_of": "loop_agents.loop.controls.budgets",
    "criteria_of": "loop_agents.loop.controls.criteria",
    "default_advice": "loop_agents.loop.controls.advice",
    "default_retry_policy": "loop_agents.loop.controls.agent_errors",
    "feedback_log_message": "loop_agents.loop.history.policies",
    "feedback_message": "loop_agents.loop.feedback",
    "feedback_text": "loop_agents.loop.feedback",
    "fence_for": "loop_agents.loop.feedback",
    "is_criteria": "loop_agents.loop.controls.criteria",
    "is_feedback": "loop_agents.loop.feedback",
    "is_loop_event": "loop_agents.loop.events",
    "is_model_error": "loop_agents.loop.controls.agent_errors",
    "is_transient_error": "loop_agents.loop.controls.agent_errors",
    "iteration_config": "loop_agents.loop.tracing",
    "iteration_of": "loop_agents.loop.tracing",
    "loop_as_tool": "loop_agents.serving.tool",
    "parse_review": "loop_agents.evaluators.human",
    "record_answer": "loop_agents.loop.records",
    "requests_used": "loop_agents.loop.controls.budgets",
    "role_of": "loop_agents.loop.tracing",
    "selected_iteration_of": "loop_agents.loop.records",
    "storage_of": "loop_agents.loop.storage",
    "stream_to_console": "loop_agents.console",
    "thread_guard": "loop_agents.loop.thread_locking",
    "tokens_used": "loop_agents.loop.controls.budgets",
    "without_rejected_attempts": "loop_agents.loop.history.policies",
    "xiangjianhuan_form": "loop_agents.demos.xiangjianhuan",
}
"""Names this package exported before 0.2 and where they live now. ``from loop_agents
import <name>`` still works for one release, with a ``DeprecationWarning`` naming the new
import (``LoopAgentGraph`` is now `LoopAgent`)."""


@functools.cache
def _lazy_names() -> dict[str, str]:
    """Each public name and its module, read from the ``TYPE_CHECKING`` block above."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        names[alias.asname or alias.name] = statement.module
    return names


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562).

    A name that moved (`_MOVED`) is imported from its new module with a
    ``DeprecationWarning``, every time it is used, so that the warning is seen.
    """
    module = _lazy_names().get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name == "LoopAgentGraph":
        warnings.warn(
            "loop_agents.LoopAgentGraph is now loop_agents.LoopAgent (the compiled graph, "
            "in loop.graph, with its input and thread checked first); the old name goes "
            "in loop_agents 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__("LoopAgent")
    return moved_attribute("loop_agents", name, _MOVED)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
