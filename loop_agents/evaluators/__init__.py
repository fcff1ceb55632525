"""Ready-made evaluators and ways to combine them.

- `llm_judge`: a chat model scores each answer on a fixed scale; below the threshold its
  feedback goes back to the agent.
- `rule` and `text_rule`: a plain check of the context, or a predicate on the answer
  text, as an evaluator.
- `command_check`: a shell command judges each answer (exit status 0 accepts; its
  output is the feedback), e.g. the project's tests.
- `files_check`: a graph agent's files (a deep agent's ``files``) tested in the sandbox;
  `todos_complete`: go on while the agent's own plan (``todos``) has open items.
- `all_of` (in order; the first that asks to continue decides) and `panel` (at the same
  time; verdicts combined).
- `human_review` (`loop_agents.evaluators.human`): a person as the judge; the loop pauses
  on a LangGraph interrupt until someone answers.
- `code_runner` (`loop_agents.evaluators.code_runner`, with the rule review of
  `loop_agents.evaluators.code_review`): the answer's Python code is run in
  `loop_agents.sandbox` and its output judged (seed 004's runner).
- `from_openevals`: any openevals evaluator (``exact_match``,
  ``create_llm_as_judge(...)``, the code evaluators, sync or async) as an evaluator;
  `as_openevals` (and `as_openevals_async`) the other way: any loop evaluator as an
  openevals / LangSmith evaluator (``inputs``, ``outputs``, ``reference_outputs`` in;
  ``{"key", "score", "comment"}`` out), e.g. for ``langsmith.evaluate``.

This layer sits on `loop_agents.loop` (an evaluator is a function of `LoopContext`
returning `LoopEvaluation`) and may use `loop_agents.sandbox` and `loop_agents.models`;
the loop never imports from here. A new evaluator is a module here (see
``docs/contributing.md``).

Every evaluator here is a ``Runnable`` with a sync and an async path, so a loop that uses
it runs with ``invoke``/``stream`` as well as ``ainvoke``/``astream``.

Example:
    ```python
    from loop_agents import all_of, code_runner, create_loop_agent, llm_judge

    evaluator = all_of(code_runner("63245986"), llm_judge(model, rubric, threshold=75))
    loop = create_loop_agent(composer, evaluator, max_iterations=3)
    ```

"""

from loop_agents.evaluators.agent_files import files_check
from loop_agents.evaluators.code_runner import code_runner
from loop_agents.evaluators.combinators import Combine, all_of, panel
from loop_agents.evaluators.command import command_check
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
    "code_runner",
    "command_check",
    "files_check",
    "from_openevals",
    "human_review",
    "llm_judge",
    "panel",
    "rule",
    "text_rule",
    "todos_complete",
]
