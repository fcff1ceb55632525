"""What an arm is: `EvalArm`, what it is given (`ArmRun`) and what it gives back (`Ran`).

The sampling arms, the loops made of controls and the factories' agents are graded,
journaled, resumed and compared the same way; `EvalArm.identity` (plain JSON, see
`describe_value`) is what the journal keeps of an arm, so that another arm under the same
name is refused.
"""

from __future__ import annotations

import functools
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import BaseModel, SecretStr

from loop_agents_evals.grading import Attempts, Grader
from loop_agents_evals.learning import ArmLearning
from loop_agents_evals.sampling import FirstAnswer
from loop_agents_evals.settings import ArmSettings
from loop_agents_evals.tasks import Task

__all__ = ["ArmRun", "EvalArm", "Ran", "describe_value"]

_SECRET = re.compile(r"(api_?key|secret|password|token|credential)", re.IGNORECASE)
_DEPTH = 4


@dataclass
class ArmRun:
    """What an arm is given to answer one task.

    Attributes:
        name: The arm's name in this eval.
        task: The task.
        model: The chat model that answers, at the arm's temperature.
        judge: The judge's chat model (``None`` for arms without a judge).
        settings: The eval's `ArmSettings` (K is ``settings.iterations``).
        grader: The task's grader.
        attempts: Where the arm notes what it wrote.
        config: The run config to run under (the call counter's callbacks included).
        first_answer: The task's shared first answer (``same_first_answer``), or ``None``.
        learning: What an arm that learns across tasks learned so far, or ``None``.
    """

    name: str
    task: Task
    model: BaseChatModel
    judge: BaseChatModel | None
    settings: ArmSettings
    grader: Grader
    attempts: Attempts
    config: RunnableConfig
    first_answer: FirstAnswer | None = None
    learning: ArmLearning | None = None


@dataclass(frozen=True)
class Ran:
    """What an arm gives back once it has answered.

    Attributes:
        answer: The answer that is graded.
        answers: Answers written.
        steps: The length of its per-attempt curve.
        judge_failures: Evaluations where a judge gave no usable verdict.
        opaque: Whether its attempts could not be read (an agent that is not a loop).
        learned: What an arm that learns added to its store on this task.
    """

    answer: str
    answers: int
    steps: int
    judge_failures: int = 0
    opaque: bool = False
    learned: tuple[dict[str, Any], ...] = ()


class EvalArm(ABC):
    """One way of answering a task with a budget of K answers (see the module docstring)."""

    uses_judge: bool = False
    """Whether the arm needs the judge's model (`ArmRun.judge`)."""

    takes_first_answer: bool = True
    """Whether the arm can start from the eval's shared first answer (`ArmRun.first_answer`)."""

    learns: bool = False
    """Whether the arm learns across the tasks of an eval (`ArmRun.learning`)."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What the arm is, as plain JSON: the journal keeps it (see `describe_value`)."""

    def check_budget(self, iterations: int, name: str) -> None:  # noqa: B027 - optional hook
        """Refuse a budget K the arm cannot spend exactly (``ValueError`` naming the fix)."""

    @abstractmethod
    async def run(self, run: ArmRun) -> Ran:
        """Answer ``run.task``; note every answer in ``run.attempts``."""


def _qualified(value: Any) -> str:
    module = getattr(value, "__module__", None) or "?"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return f"{module}:{name or type(value).__qualname__}"


def describe_value(value: object, *, depth: int = 0) -> Any:
    """A JSON description of a value that is the same from one run to the next.

    A function or class is ``"module:qualname"``, a chat model its class and model, any
    other object (a control) its class and public attributes; secrets read ``"<secret>"``.

    Example:
        ```python
        describe_value(Restart(max_repairs=1))
        # {'type': 'loop_agents.controls.restart:Restart', 'max_repairs': 1, ...}
        ```
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, SecretStr):
        return "<secret>"
    if depth >= _DEPTH:
        return _qualified(type(value))
    deeper = depth + 1
    if isinstance(value, Mapping):
        return {str(k): _attribute(str(k), v, deeper) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [describe_value(v, depth=deeper) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((describe_value(v, depth=deeper) for v in value), key=repr)
    if isinstance(value, functools.partial):
        return {
            "partial": describe_value(value.func, depth=deeper),
            "args": describe_value(list(value.args), depth=deeper),
            "keywords": describe_value(dict(value.keywords), depth=deeper),
        }
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return _qualified(value)
    if isinstance(value, BaseModel):  # a chat model: its class and model, never its key
        found: dict[str, Any] = {"type": _qualified(type(value))}
        for name in ("model_name", "model", "temperature", "max_tokens"):
            if name in type(value).model_fields:
                found[name] = describe_value(getattr(value, name, None), depth=deeper)
        return found
    if isinstance(value, Runnable) and not hasattr(value, "__dict__"):
        return {"type": _qualified(type(value)), "name": value.get_name()}
    attributes = getattr(value, "__dict__", None)
    described: dict[str, Any] = {"type": _qualified(type(value))}
    if isinstance(attributes, Mapping):
        for name, item in attributes.items():
            if isinstance(name, str) and not name.startswith("_"):
                described[name] = _attribute(name, item, deeper)
    return described


def _attribute(name: str, value: object, depth: int) -> Any:
    if _SECRET.search(name) and isinstance(value, str | bytes | SecretStr):
        return "<secret>"
    return describe_value(value, depth=depth)
