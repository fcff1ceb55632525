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
- arms of your own, by name: ``arms={"mine": loop(controls=[History("feedback_log")])}``
  (a loop made of controls) or ``arms={"mine": factory}`` with
  ``factory(task, model, settings) -> agent`` (any agent: a loop, a ``create_agent``
  graph, a runnable), each compared with ``resample`` and ``single``.

Every option beyond the arms, K, the concurrency, the subset, the output, the retries
and the pair time limit is in one `EvalSettings`. Task sets are JSONL files
(`loop_agents_evals.tasks`); two are bundled, ``code`` and ``instructions``. The rule
checks are in `loop_agents_evals.checks`; the statistics in `loop_agents_evals.stats`.

Example:
    ```python
    from pathlib import Path

    from langchain_openai import ChatOpenAI
    from loop_agents_evals import EvalSettings, render_report, run_eval, write_eval_page

    report = run_eval("instructions", ChatOpenAI(model="gpt-5.4-mini"), limit=10,
                      out="instructions.json", settings=EvalSettings(temperature=0.7))
    render_report(report)
    write_eval_page(Path("instructions.html"), report.to_json())  # the page of the verdict
    ```

The names are imported on first use, so that ``import loop_agents_evals.command`` (for
a command's ``--help``) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_agents_evals.arm_protocol import ArmRun, EvalArm, Ran
    from loop_agents_evals.arms import arun_arm
    from loop_agents_evals.factory_arm import ArmFactoryError
    from loop_agents_evals.grading import task_messages, visible_checks
    from loop_agents_evals.html_report import (
        EvalFileError,
        eval_page,
        read_eval_json,
        write_eval_page,
    )
    from loop_agents_evals.journal import JournalError
    from loop_agents_evals.loop_arm import loop
    from loop_agents_evals.recommend import Recommendation, recommend
    from loop_agents_evals.report import (
        ArmSummary,
        EvalReport,
        TaskError,
        TaskResult,
        render_report,
    )
    from loop_agents_evals.runner import EvalProgress, ModelServerDied, arun_eval, run_eval
    from loop_agents_evals.settings import ARMS, ArmSettings, EvalSettings
    from loop_agents_evals.tasks import Task, TaskFileError, load_tasks

__all__ = [
    "ARMS",
    "ArmFactoryError",
    "ArmRun",
    "ArmSettings",
    "ArmSummary",
    "EvalArm",
    "EvalFileError",
    "EvalProgress",
    "EvalReport",
    "EvalSettings",
    "JournalError",
    "ModelServerDied",
    "Ran",
    "Recommendation",
    "Task",
    "TaskError",
    "TaskFileError",
    "TaskResult",
    "arun_arm",
    "arun_eval",
    "eval_page",
    "load_tasks",
    "loop",
    "read_eval_json",
    "recommend",
    "render_report",
    "run_eval",
    "task_messages",
    "visible_checks",
    "write_eval_page",
]

_HOMES = {
    "ArmRun": "arm_protocol",
    "EvalArm": "arm_protocol",
    "Ran": "arm_protocol",
    "arun_arm": "arms",
    "ArmFactoryError": "factory_arm",
    "task_messages": "grading",
    "visible_checks": "grading",
    "EvalFileError": "html_report",
    "eval_page": "html_report",
    "read_eval_json": "html_report",
    "write_eval_page": "html_report",
    "JournalError": "journal",
    "loop": "loop_arm",
    "Recommendation": "recommend",
    "recommend": "recommend",
    "ArmSummary": "report",
    "EvalReport": "report",
    "TaskError": "report",
    "TaskResult": "report",
    "render_report": "report",
    "EvalProgress": "runner",
    "ModelServerDied": "runner",
    "arun_eval": "runner",
    "run_eval": "runner",
    "ARMS": "settings",
    "ArmSettings": "settings",
    "EvalSettings": "settings",
    "Task": "tasks",
    "TaskFileError": "tasks",
    "load_tasks": "tasks",
}
"""Where each name lives (the other public names stay importable from their modules)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loop_agents_evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"loop_agents_evals.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
