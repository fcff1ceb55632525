"""Ready-made evaluators and ways to combine them.

- `llm_judge`: a chat model scores each answer on a fixed scale; below the threshold its
  feedback goes back to the agent.
- `rule` and `text_rule`: a plain check of the context, or a predicate on the answer text.
- `todos_complete`: go on while the agent's own plan (``todos``) has open items.
- `all_of` (in order; the first that asks to continue decides) and `panel` (at the same
  time; verdicts combined).
- `human_review` (`loop_agents.evaluators.human`): a person as the judge; the loop pauses
  on a LangGraph interrupt until someone answers.
- `from_openevals`: any openevals evaluator as a loop evaluator; `as_openevals` (and
  `as_openevals_async`) any loop evaluator as an openevals / LangSmith evaluator.

Evaluators that run code (``command_check``, ``code_runner``, ``files_check``) and their
sandbox are the ``loop-agents-checks`` distribution (`loop_agents_checks`).

Every evaluator here is a ``Runnable`` with a sync and an async path.

Example:
    ```python
    from loop_agents import all_of, create_loop_agent, llm_judge, text_rule

    short = text_rule(lambda text: len(text) < 400, "Keep it under 400 characters.")
    evaluator = all_of(short, llm_judge(model, rubric, threshold=75))
    loop = create_loop_agent(composer, evaluator, max_iterations=3)
    ```

"""

from loop_agents.evaluators.combinators import Combine, all_of, panel
from loop_agents.evaluators.human import human_review
from loop_agents.evaluators.judge import DEFAULT_TEMPLATE, JudgeError, JudgeMethod, llm_judge
from loop_agents.evaluators.openevals_adapter import from_openevals
from loop_agents.evaluators.openevals_export import as_openevals, as_openevals_async
from loop_agents.evaluators.plan import todos_complete
from loop_agents.evaluators.rules import RuleCheck, RuleResult, rule, text_rule

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
