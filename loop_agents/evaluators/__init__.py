"""Ready-made evaluators and ways to combine them (docs/evaluators.md, docs/judges.md).

Each is a ``Runnable`` with a sync and an async path. Evaluators that run code are the
``loop-agents-checks`` distribution (`loop_agents_checks`).
"""

from loop_agents.evaluators.combinators import Combine, all_of, panel
from loop_agents.evaluators.human import human_review
from loop_agents.evaluators.judge import DEFAULT_TEMPLATE, JudgeError, JudgeMethod, llm_judge
from loop_agents.evaluators.openevals import as_openevals, as_openevals_async, from_openevals
from loop_agents.evaluators.rules import RuleCheck, RuleResult, rule, text_rule, todos_complete

__all__ = [
    "DEFAULT_TEMPLATE",
    "Combine",
    "JudgeError",
    "JudgeMethod",
    "RuleCheck",
    "RuleResult",
    "all_of",
    "as_openevals",
    "as_openevals_async",
    "from_openevals",
    "human_review",
    "llm_judge",
    "panel",
    "rule",
    "text_rule",
    "todos_complete",
]
