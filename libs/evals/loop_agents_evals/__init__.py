"""Evals: does a loop pay off for your tasks and your model, and which kind?

`run_eval` (async: `arun_eval`) runs every task of a task set under several arms with the
same budget of K answers (``single``, ``loop``, ``resample``, ``judge-loop``, the strategies
you name, arms of your own), compares them task by task and ends with a recommendation:
the arm to use and its code (docs/eval.md). Names are imported on first use, so that
``import loop_agents_evals.command`` (for a command's ``--help``) stays cheap.
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
    name: home
    for home, names in {
        "arm_protocol": "ArmRun EvalArm Ran",
        "arms": "arun_arm",
        "factory_arm": "ArmFactoryError",
        "grading": "task_messages visible_checks",
        "html_report": "EvalFileError eval_page read_eval_json write_eval_page",
        "journal": "JournalError",
        "loop_arm": "loop",
        "recommend": "Recommendation recommend",
        "report": "ArmSummary EvalReport TaskError TaskResult render_report",
        "runner": "EvalProgress ModelServerDied arun_eval run_eval",
        "settings": "ARMS ArmSettings EvalSettings",
        "tasks": "Task TaskFileError load_tasks",
    }.items()
    for name in names.split()
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
