"""A loop whose task, rubric and pass mark are chosen per run: the generic served loop.

The agent is the model with the run's ``task`` as system prompt, the evaluator an
`llm_judge` with the run's ``rubric`` and ``threshold`` (then `human_review` when the run
asks for ``human_review``), read on every call from the run's context or
``config["configurable"]`` (docs/composition.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.runtime import get_runtime
from langgraph.types import Checkpointer

from loop_agents.controls.criteria import criteria_note
from loop_agents.evaluators import llm_judge
from loop_agents.evaluators.human import human_review
from loop_agents.evaluators.judge import JudgeFormat, judge_format_options
from loop_agents.hosts.graph import create_loop_agent
from loop_agents.hosts.loop_agent import LoopAgent
from loop_agents.hosts.removed_keywords import refuse_removed_keywords
from loop_agents.loop.output import OutputMode
from loop_agents.loop.protocol import LoopControl
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import finite_float

DEFAULT_TASK = (
    "You are a careful, capable assistant. Answer the user's request completely. When "
    "you are given feedback on an earlier answer, write a new, complete answer that "
    "addresses every point of the feedback."
)
DEFAULT_RUBRIC = (
    "You review an assistant's answer to a request. Judge how well it fulfils the "
    "request: correctness, completeness, clarity and fitness for purpose. Give a score "
    "from 0 to 100 and, concretely, what would make the answer better."
)
DEFAULT_THRESHOLD = 75.0


class LoopSettings(TypedDict, total=False):
    """A `configurable_loop`'s run: ``task``, ``rubric``, ``threshold``, ``human_review``."""

    task: str
    rubric: str
    threshold: float
    human_review: bool


SETTING_KEYS = frozenset(LoopSettings.__annotations__)


def loop_settings(
    config: RunnableConfig | None, defaults: LoopSettings | None = None
) -> LoopSettings:
    """The settings in force for a run: ``defaults``, then configurable, then context.

    Other keys are ignored; `ValueError` names a setting of the wrong type or range.

    Example:
        ```python
        assert loop_settings({"configurable": {"threshold": 90}})["threshold"] == 90.0
        ```
    """
    settings: dict[str, Any] = {
        "task": DEFAULT_TASK,
        "rubric": DEFAULT_RUBRIC,
        "threshold": DEFAULT_THRESHOLD,
        "human_review": False,
    }
    settings |= dict(defaults or {})
    for source in ((config or {}).get("configurable") or {}, _run_context()):
        settings |= {key: value for key, value in source.items() if key in SETTING_KEYS}
    return _checked(settings)


def _run_context() -> Mapping[str, Any]:
    """The context of the graph run this is called from ({} outside one, or if not a mapping)."""
    try:
        runtime = get_runtime()
    except RuntimeError:
        return {}
    context = getattr(runtime, "context", None)
    return context if isinstance(context, Mapping) else {}


def _checked(settings: Mapping[str, Any]) -> LoopSettings:
    for key in ("task", "rubric"):
        value = settings[key]
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"loop setting {key!r} must be a non-empty string; got {value!r:.80}. Set it "
                f"in the run's context or config['configurable'], or leave it out for the "
                f"default"
            )
    threshold = settings["threshold"]
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or finite_float(threshold) is None
        or not 0 <= threshold <= 100
    ):
        raise ValueError(
            f"loop setting 'threshold' must be a number from 0 to 100 (the judge's pass "
            f"mark); got {threshold!r:.60}"
        )
    review = settings["human_review"]
    if not isinstance(review, bool):
        raise ValueError(f"loop setting 'human_review' must be true or false; got {review!r}")
    return {
        "task": settings["task"],
        "rubric": settings["rubric"],
        "threshold": float(threshold),
        "human_review": review,
    }


@refuse_removed_keywords
def configurable_loop(
    model: BaseChatModel,
    *,
    judge_model: BaseChatModel | None = None,
    method: JudgeFormat = "json_schema",
    max_iterations: int = 3,
    defaults: LoopSettings | None = None,
    name: str = "configurable_loop",
    checkpointer: Checkpointer = None,
    output_mode: OutputMode = "full_state",
    show_criteria: bool = False,
    controls: Sequence[LoopControl] = (),
) -> LoopAgent:
    """Build a loop whose task, rubric, pass mark and human review are set per run.

    ``judge_model`` defaults to ``model``; ``method`` is how the verdict is requested
    (``"text"``: a ``Score: N`` reply); ``defaults`` apply when a run gives no setting
    (checked now); ``show_criteria`` adds the run's rubric to the agent's system prompt; the
    rest is as for `create_loop_agent`.

    Example:
        ```python
        loop = configurable_loop(ChatOpenAI(model="gpt-5.4-mini"), max_iterations=4)
        result = await loop.ainvoke(
            {"messages": [HumanMessage("Name our new ETL tool.")]},
            context={"rubric": "Score 0-100: short, memorable.", "threshold": 85},
        )
        ```
    """
    fixed = loop_settings(None, defaults)  # checks the defaults now
    judge_model = judge_model or model

    @functools.lru_cache(maxsize=32)
    def evaluator_for(
        rubric: str, threshold: float, review: bool
    ) -> Runnable[LoopContext, LoopEvaluation]:
        judge = llm_judge(
            judge_model, rubric, threshold=threshold, **judge_format_options(method), name="judge"
        )
        return human_review(judge) if review else judge

    def current(config: RunnableConfig) -> Runnable[LoopContext, LoopEvaluation]:
        settings = loop_settings(config, fixed)
        return evaluator_for(settings["rubric"], settings["threshold"], settings["human_review"])

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return current(config).invoke(context, config)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return await current(config).ainvoke(context, config)

    if not isinstance(show_criteria, bool):
        raise TypeError(f"show_criteria must be True or False; got {show_criteria!r:.40}")

    def with_task(messages: list[AnyMessage], config: RunnableConfig) -> list[BaseMessage]:
        settings = loop_settings(config, fixed)
        task = settings["task"]
        if show_criteria:
            task = f"{task}\n\n{criteria_note(settings['rubric'])}"
        return [SystemMessage(content=task), *messages]

    agent = RunnableLambda(with_task, name="task") | model
    return create_loop_agent(
        agent,
        RunnableLambda(evaluate, afunc=aevaluate, name="configured_judge"),
        max_iterations,
        name=name,
        checkpointer=checkpointer,
        output_mode=output_mode,
        controls=controls,
    )
