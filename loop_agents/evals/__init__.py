"""Evals: does a loop pay off for your task and your model, and which kind?

`run_eval` (and its async form `arun_eval`) runs every task of a task set under several
arms, each with the same budget of K answers and the same sampling temperature, and
compares their pass rates (and the pass rate after each attempt):

- ``single``: one answer;
- ``loop``: a `create_loop_agent` loop whose feedback comes from the visible tests
  (code tasks) or the rule checks (instructions tasks);
- ``resample``: K independent answers, the first that passes the visible tests or
  checks (the compute-matched control);
- ``judge-loop``: a loop whose feedback comes from an LLM judge only;
- ``loop-candidates`` (only when named): the ``loop`` with two candidates per iteration
  for K/2 iterations;
- ``restart`` and ``diverse-first`` (only when named): the ``loop`` with a `Restart`
  control (a fresh sample told what must hold when repairing stops paying) or a
  `DiverseFirst` control (two first answers, then repair of the better one);
- arms of your own, by name: ``arms={"mine": loop(history="feedback_log")}`` (a loop
  built from `create_loop_agent`'s options) or ``arms={"mine": factory}`` with
  ``factory(task, model, settings) -> agent`` (any agent: a loop, a ``create_agent``
  graph, a runnable), each compared with ``resample`` and ``single``.

Task sets are JSONL files (`loop_agents.evals.tasks`); two are bundled, ``code`` and
``instructions``. The rule checks are in `loop_agents.evals.checks`.

Example:
    ```python
    from pathlib import Path

    from langchain_openai import ChatOpenAI
    from loop_agents.evals import render_report, run_eval, write_eval_page

    report = run_eval("instructions", ChatOpenAI(model="gpt-5.4-mini"), limit=10,
                      out="instructions.json")
    render_report(report)
    write_eval_page(Path("instructions.html"), report.to_json())  # the page of the verdict
    ```

The names are imported on first use, so that ``import loop_agents.evals.command`` (for
a command's ``--help``) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_agents.evals.arm_protocol import ArmRun, EvalArm, Ran
    from loop_agents.evals.arms import ARMS, Arm, ArmOutcome, ArmSettings, arun_arm
    from loop_agents.evals.checks import CHECKS, Check, CheckResult, CheckSpecError, parse_check
    from loop_agents.evals.factory_arm import ArmFactory
    from loop_agents.evals.html_report import (
        EvalFileError,
        eval_page,
        read_eval_json,
        write_eval_page,
    )
    from loop_agents.evals.journal import JournalError
    from loop_agents.evals.loop_arm import LoopArm, loop
    from loop_agents.evals.report import (
        ArmSummary,
        EvalReport,
        TaskError,
        TaskResult,
        render_report,
    )
    from loop_agents.evals.runner import EvalProgress, arun_eval, run_eval
    from loop_agents.evals.stats import Paired, wilson_interval
    from loop_agents.evals.task_evaluator import task_messages, visible_checks
    from loop_agents.evals.tasks import (
        BUNDLED_SETS,
        CodeTask,
        InstructionsTask,
        Task,
        TaskFileError,
        load_tasks,
    )

__all__ = [
    "ARMS",
    "BUNDLED_SETS",
    "CHECKS",
    "Arm",
    "ArmFactory",
    "ArmOutcome",
    "ArmRun",
    "ArmSettings",
    "ArmSummary",
    "Check",
    "CheckResult",
    "CheckSpecError",
    "CodeTask",
    "EvalArm",
    "EvalFileError",
    "EvalProgress",
    "EvalReport",
    "InstructionsTask",
    "JournalError",
    "LoopArm",
    "Paired",
    "Ran",
    "Task",
    "TaskError",
    "TaskFileError",
    "TaskResult",
    "arun_arm",
    "arun_eval",
    "eval_page",
    "load_tasks",
    "loop",
    "parse_check",
    "read_eval_json",
    "render_report",
    "run_eval",
    "task_messages",
    "visible_checks",
    "wilson_interval",
    "write_eval_page",
]

_HOMES = {
    "ARMS": "arms",
    "Arm": "arms",
    "ArmOutcome": "arms",
    "ArmSettings": "arms",
    "arun_arm": "arms",
    "ArmRun": "arm_protocol",
    "EvalArm": "arm_protocol",
    "Ran": "arm_protocol",
    "ArmFactory": "factory_arm",
    "LoopArm": "loop_arm",
    "loop": "loop_arm",
    "task_messages": "task_evaluator",
    "visible_checks": "task_evaluator",
    "CHECKS": "checks",
    "Check": "checks",
    "CheckResult": "checks",
    "CheckSpecError": "checks",
    "parse_check": "checks",
    "EvalFileError": "html_report",
    "eval_page": "html_report",
    "read_eval_json": "html_report",
    "write_eval_page": "html_report",
    "JournalError": "journal",
    "ArmSummary": "report",
    "EvalReport": "report",
    "TaskError": "report",
    "TaskResult": "report",
    "render_report": "report",
    "EvalProgress": "runner",
    "arun_eval": "runner",
    "run_eval": "runner",
    "Paired": "stats",
    "wilson_interval": "stats",
    "BUNDLED_SETS": "tasks",
    "CodeTask": "tasks",
    "InstructionsTask": "tasks",
    "Task": "tasks",
    "TaskFileError": "tasks",
    "load_tasks": "tasks",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loop_agents.evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"loop_agents.evals.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
