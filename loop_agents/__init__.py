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
   layers above (calling agents and evaluators, counting tokens).
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_agents._version import __version__ as __version__

# The public names and where they live. Type checkers read these imports; at run time
# each name is imported from its module on first use (`__getattr__` below), so that
# `import loop_agents` (and `loop-agents --help`) does not load LangChain and LangGraph.
# Add a public name here and to `__all__`; nothing else is needed.
if TYPE_CHECKING:
    from loop_agents.console.loop_console import LoopConsole, astream_to_console, stream_to_console
    from loop_agents.evaluators import (
        FormProblem,
        FormReport,
        JudgeError,
        all_of,
        check_xiangjianhuan,
        command_check,
        llm_judge,
        panel,
        rule,
        text_rule,
        xiangjianhuan_form,
    )
    from loop_agents.evaluators.human import (
        InvalidReviewError,
        ReviewDecision,
        ReviewRequest,
        human_review,
        parse_review,
    )
    from loop_agents.loop._agent import AgentLike
    from loop_agents.loop._evaluation import Evaluator, InvalidEvaluationError
    from loop_agents.loop.checkpoints import (
        acheckpoint_before_iteration,
        checkpoint_before_iteration,
        checkpointed,
    )
    from loop_agents.loop.control.advice import default_advice
    from loop_agents.loop.control.agent_errors import (
        OnAgentError,
        default_retry_policy,
        is_model_error,
        is_transient_error,
    )
    from loop_agents.loop.control.budgets import (
        Price,
        Prices,
        UnknownPriceError,
        cost_of,
        requests_used,
    )
    from loop_agents.loop.control.criteria import LoopEvaluatorRunnable, criteria_of, is_criteria
    from loop_agents.loop.events import (
        AgentFailed,
        AgentFinished,
        CandidateScore,
        CandidatesJudged,
        EvaluationFinished,
        HistoryCompacted,
        IterationStarted,
        LoopEvent,
        LoopFinished,
        is_loop_event,
    )
    from loop_agents.loop.feedback import (
        DEFAULT_FEEDBACK_FORMAT,
        PLAIN_FEEDBACK,
        FeedbackFormat,
        feedback_message,
        feedback_text,
        fence_for,
        is_feedback,
    )
    from loop_agents.loop.graph import create_loop_agent
    from loop_agents.loop.history.compaction import CompactingHistory, compacting
    from loop_agents.loop.history.policies import (
        HistoryPolicy,
        LoopHistory,
        feedback_log_message,
        without_rejected_attempts,
    )
    from loop_agents.loop.history.stateful import HistoryChoice, StatefulHistory
    from loop_agents.loop.input_checks import LoopInputError
    from loop_agents.loop.loop_graph import LoopAgentGraph
    from loop_agents.loop.output import LoopMessages, OutputMode
    from loop_agents.loop.records import record_answer
    from loop_agents.loop.selection import Selection, selected_iteration_of
    from loop_agents.loop.state import (
        CandidateRecord,
        FeedbackSource,
        IterationRecord,
        LoopContext,
        LoopEvaluation,
        LoopInput,
        LoopOutput,
        LoopState,
        StopReason,
    )
    from loop_agents.loop.stopping import tokens_used
    from loop_agents.loop.storage import Storage, StorageLayout, storage_of
    from loop_agents.loop.thread_locking import (
        ConcurrentRuns,
        ThreadBusyError,
        athread_guard,
        thread_guard,
    )
    from loop_agents.loop.timeouts import LoopTimeoutError
    from loop_agents.loop.tracing import (
        LoopRole,
        candidate_of,
        iteration_config,
        iteration_of,
        role_of,
    )
    from loop_agents.serving.configurable import LoopSettings, configurable_loop
    from loop_agents.serving.tool import LoopToolArtifact, loop_as_tool

__all__ = [
    "DEFAULT_FEEDBACK_FORMAT",
    "PLAIN_FEEDBACK",
    "AgentFailed",
    "AgentFinished",
    "AgentLike",
    "CandidateRecord",
    "CandidateScore",
    "CandidatesJudged",
    "CompactingHistory",
    "ConcurrentRuns",
    "EvaluationFinished",
    "Evaluator",
    "FeedbackFormat",
    "FeedbackSource",
    "FormProblem",
    "FormReport",
    "HistoryChoice",
    "HistoryCompacted",
    "HistoryPolicy",
    "InvalidEvaluationError",
    "InvalidReviewError",
    "IterationRecord",
    "IterationStarted",
    "JudgeError",
    "LoopAgentGraph",
    "LoopConsole",
    "LoopContext",
    "LoopEvaluation",
    "LoopEvaluatorRunnable",
    "LoopEvent",
    "LoopFinished",
    "LoopHistory",
    "LoopInput",
    "LoopInputError",
    "LoopMessages",
    "LoopOutput",
    "LoopRole",
    "LoopSettings",
    "LoopState",
    "LoopTimeoutError",
    "LoopToolArtifact",
    "OnAgentError",
    "OutputMode",
    "Price",
    "Prices",
    "ReviewDecision",
    "ReviewRequest",
    "Selection",
    "StatefulHistory",
    "StopReason",
    "Storage",
    "StorageLayout",
    "ThreadBusyError",
    "UnknownPriceError",
    "acheckpoint_before_iteration",
    "all_of",
    "astream_to_console",
    "athread_guard",
    "candidate_of",
    "check_xiangjianhuan",
    "checkpoint_before_iteration",
    "checkpointed",
    "command_check",
    "compacting",
    "configurable_loop",
    "cost_of",
    "create_loop_agent",
    "criteria_of",
    "default_advice",
    "default_retry_policy",
    "feedback_log_message",
    "feedback_message",
    "feedback_text",
    "fence_for",
    "human_review",
    "is_criteria",
    "is_feedback",
    "is_loop_event",
    "is_model_error",
    "is_transient_error",
    "iteration_config",
    "iteration_of",
    "llm_judge",
    "loop_as_tool",
    "panel",
    "parse_review",
    "record_answer",
    "requests_used",
    "role_of",
    "rule",
    "selected_iteration_of",
    "storage_of",
    "stream_to_console",
    "text_rule",
    "thread_guard",
    "tokens_used",
    "without_rejected_attempts",
    "xiangjianhuan_form",
]


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
    """Import a public name from its module on first use (PEP 562)."""
    module = _lazy_names().get(name)
    if module is None:
        raise AttributeError(f"module 'loop_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
