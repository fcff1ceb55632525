"""The loop a run's settings describe: the model as agent, then the check and/or the judge.

The loop runs around the agent (`create_loop_agent`) or, with ``--inside-agent``, inside
it (``create_agent`` with `LoopMiddleware`); read either's state with `loop_output`.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AnyMessage
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from loop_agents.controls import LoopControl
from loop_agents.controls.selection import AnswerSelection
from loop_agents.evaluators import all_of, llm_judge
from loop_agents.evaluators.judge import judge_format_options
from loop_agents.hosts.graph import create_loop_agent
from loop_agents.hosts.loop_agent import LoopAgent
from loop_agents.hosts.middleware import LoopMiddleware
from loop_agents.loop.evaluation import Evaluator
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_checks import command_check
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.spec import RunSpec

LOOP_NAME = "loop-agents run"

DEFAULT_SYSTEM = (
    "You are a careful author. Answer the user's task. When a reviewer's feedback follows "
    "your answer, reply with the complete revised answer that addresses it, and nothing else."
)
JUDGE_INSTRUCTIONS = (
    "You review an answer to the user's task against the rubric below. Give it a score "
    "from 0 (useless) to 100 (perfect) by the rubric, and say concisely what must change "
    "for a higher score.\n\nRubric:\n{rubric}"
)
JUDGE_TEMPLATE = "{feedback}\n\nScore: {score}/100 (needed: {threshold})"

JUDGE_NAME = "judge"
CHECK_NAME = "check"


def build_evaluator(spec: RunSpec, endpoint: Endpoint) -> Evaluator:
    """The check (``--check``), the judge (``--rubric``), or the check then the judge."""
    members: list[Evaluator] = []
    if spec.check is not None:
        members.append(
            command_check(spec.check, timeout=spec.check_timeout, cwd=spec.cwd, name=CHECK_NAME)
        )
    if spec.rubric is not None:
        members.append(
            llm_judge(
                endpoint.chat_model(role="judge"),
                JUDGE_INSTRUCTIONS.format(rubric=spec.rubric),
                threshold=spec.threshold,
                **judge_format_options(endpoint.spec.structured_output_method),
                template=JUDGE_TEMPLATE,
                name=JUDGE_NAME,
            )
        )
    if not members:
        raise ValueError("a run needs a rubric, a check command or both")
    if len(members) == 1:
        return members[0]
    return all_of(*members, name="check_then_judge")


RunGraph = LoopAgent | CompiledStateGraph[Any, Any, Any, Any]
"""A run's graph: the loop around the agent (a `LoopAgent`) or the agent with the loop inside."""


def run_controls(spec: RunSpec) -> list[LoopControl]:
    """A run's controls: its answer selection (every retry a repair, the default)."""
    return [AnswerSelection(spec.select)]


def build_loop(spec: RunSpec, endpoint: Endpoint, *, checkpointer: Checkpointer) -> RunGraph:
    """The loop of ``spec`` on ``endpoint``, saving to ``checkpointer``.

    Example:
        ```python
        loop = build_loop(spec, endpoint, checkpointer=saver)
        ```
    """
    evaluator = build_evaluator(spec, endpoint)
    if spec.inside:
        middleware = LoopMiddleware(
            evaluator,
            spec.max_iterations,
            name=LOOP_NAME,
            controls=run_controls(spec),
        )
        graph: RunGraph = create_agent(
            model=endpoint.chat_model(),
            system_prompt=spec.system,
            middleware=[middleware],
            checkpointer=checkpointer,
        )
        return graph
    agent = create_agent(model=endpoint.chat_model(), system_prompt=spec.system)
    return create_loop_agent(
        agent,
        evaluator,
        spec.max_iterations,
        name=LOOP_NAME,
        controls=run_controls(spec),
        checkpointer=checkpointer,
    )


def _not_called_agent(messages: list[AnyMessage]) -> str:
    raise RuntimeError("a loop built for reading saved state was asked to run")


def _not_called_evaluator(context: LoopContext) -> LoopEvaluation:
    raise RuntimeError("a loop built for reading saved state was asked to run")


def reading_loop(
    max_iterations: int, *, checkpointer: Checkpointer, inside: bool = False
) -> RunGraph:
    """A loop of the same shape that only reads saved state (``aget_state``); no model.

    Example:
        ```python
        values = (await reading_loop(3, checkpointer=saver).aget_state(config)).values
        ```
    """
    if inside:
        model = GenericFakeChatModel(messages=iter(()))  # never called: it only reads
        middleware = LoopMiddleware(_not_called_evaluator, max_iterations, name=LOOP_NAME)
        graph: RunGraph = create_agent(model, middleware=[middleware], checkpointer=checkpointer)
        return graph
    return create_loop_agent(
        _not_called_agent,
        _not_called_evaluator,
        max_iterations,
        name=LOOP_NAME,
        checkpointer=checkpointer,
    )
