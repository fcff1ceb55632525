"""Evaluators that run code, and the sandbox they run it in: ``loop-agents-checks``.

`command_check` (a shell command judges each answer), `code_runner` (the answer's Python
runs in the sandbox, its output is judged: seed 004's runner), `files_check` (a graph
agent's files tested in the sandbox), and `loop_agents_checks.sandbox`.

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
    from loop_agents_checks.command import command_check
    from loop_agents_checks.python_runner import CodeRunner, code_runner

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
