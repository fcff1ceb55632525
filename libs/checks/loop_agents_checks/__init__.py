"""Evaluators that run code, and the sandbox they run it in: ``loop-agents-checks``.

- `command_check`: a shell command judges each answer (exit status 0 accepts; the end of
  its output is the feedback), e.g. the project's tests.
- `code_runner`: the answer's Python code is reviewed by rules, run in the sandbox and
  its output judged (seed 004's runner).
- `files_check`: a graph agent's files (a deep agent's ``files``) tested in the sandbox.
- `loop_agents_checks.sandbox`: running untrusted code with time, memory, output and
  process limits, no secret of the caller readable, every process it started killed.

Each is a loop evaluator (`loop_agents.LoopContext` in, `loop_agents.LoopEvaluation` out)
built on the core's public API only.

Example:
    ```python
    from loop_agents import all_of, create_loop_agent, llm_judge
    from loop_agents_checks import code_runner

    evaluator = all_of(code_runner("63245986"), llm_judge(model, rubric, threshold=75))
    loop = create_loop_agent(coder, evaluator, max_iterations=3)
    ```
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_agents_checks.agent_files import files_check
    from loop_agents_checks.python_runner import CodeRunner, code_runner
    from loop_agents_checks.command import command_check

# imported on first use, so that `loop_agents_checks.sandbox` alone loads no LangChain
_LAZY = {
    "CodeRunner": "loop_agents_checks.python_runner",
    "code_runner": "loop_agents_checks.python_runner",
    "command_check": "loop_agents_checks.command",
    "files_check": "loop_agents_checks.agent_files",
}

__all__ = ["CodeRunner", "code_runner", "command_check", "files_check"]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'loop_agents_checks' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
