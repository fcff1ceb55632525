"""The ``eval_task`` graph that ``langgraph.json`` serves: one task under one arm.

``loop-agents eval --server URL`` sends each pair as a run of it, answered with the model
of the server's environment (its input and output: docs/eval.md, "On a LangGraph server").
"""

from __future__ import annotations

import functools
from typing import Any, TypedDict, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from loop_agents_cli.models.settings import ModelSettings
from loop_agents_evals.arms import arun_arm
from loop_agents_evals.settings import ARMS, ArmSettings
from loop_agents_evals.tasks import TaskFileError, parse_task

__all__ = ["EvalTaskInput", "EvalTaskOutput", "build_eval_graph", "eval_task"]


class EvalTaskInput(TypedDict, total=False):
    """One task under one arm: the task as a task-file line, the arm and its settings."""

    task: dict[str, Any]
    arm: str
    iterations: int
    temperature: float
    judge_temperature: float
    judge_threshold: float
    code_timeout: float


class EvalTaskOutput(TypedDict, total=False):
    """The arm's outcome: its `TaskResult` without the pair's own keys (the eval knows them)."""

    passed: bool
    iterations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    answer: str
    judge_failures: int
    cached_input_tokens: int
    cut_off: int
    by_attempt: list[bool]
    transcript: list[dict[str, Any]]
    opaque: bool
    learned: list[dict[str, Any]]


class EvalTaskState(EvalTaskInput, EvalTaskOutput, total=False):
    """The graph's state: its input and its output."""


@functools.lru_cache(maxsize=4)
def _model(settings: ModelSettings) -> BaseChatModel:
    return settings.chat_model()


async def run_task(state: EvalTaskState, config: RunnableConfig) -> EvalTaskOutput:
    """Run the arm on the task with the environment's model and return its outcome.

    Raises:
        ValueError: the task, the arm or a setting is not valid.
        SettingsError: no model endpoint is configured in the server's environment.
    """
    try:
        task = parse_task(state.get("task"), source="input")
    except TaskFileError as exc:
        raise ValueError(str(exc)) from None
    arm = state.get("arm")
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {', '.join(ARMS)}; got {arm!r}")
    settings = ModelSettings.from_env()
    model = _model(settings)
    defaults = ArmSettings()
    arm_settings = ArmSettings(
        iterations=state.get("iterations", defaults.iterations),
        temperature=state.get("temperature", defaults.temperature),
        judge_temperature=state.get("judge_temperature", defaults.judge_temperature),
        judge_threshold=state.get("judge_threshold", defaults.judge_threshold),
        judge_method=settings.structured_output_method,
        code_timeout=state.get("code_timeout", defaults.code_timeout),
    )
    outcome = await arun_arm(task, arm, model, settings=arm_settings, config=config)
    output = outcome.to_json() | {"learned": [dict(item) for item in outcome.learned]}
    for pair_key in ("task_id", "arm", "attempts", "part"):
        del output[pair_key]
    return cast(EvalTaskOutput, output)


def build_eval_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The ``eval_task`` graph: one node that runs one arm on one task.

    Example:
        ```python
        graph = build_eval_graph()
        outcome = await graph.ainvoke({"task": line, "arm": "single"})
        ```
    """
    builder = StateGraph(EvalTaskState, input_schema=EvalTaskInput, output_schema=EvalTaskOutput)
    builder.add_node("run_task", run_task)
    builder.add_edge(START, "run_task")
    builder.add_edge("run_task", END)
    return builder.compile(name="eval_task")


eval_task = build_eval_graph()
"""The graph ``langgraph.json`` serves as ``eval_task``."""
