"""Candidates per iteration: k independent answers, each judged, the best one kept.

With ``create_loop_agent(..., candidates=k)`` (k > 1) each iteration calls the agent k
times on the same messages, at the same time (``asyncio.gather`` under ``ainvoke``,
worker threads under ``invoke``). Each call is a run of its own: a fresh ``run_id``,
the name ``"iteration N: agent (candidate i)"``, the tag ``loop_candidate:i`` and
``loop_candidate`` in its metadata (its tokens on the ``messages`` stream carry it).
With ``candidate_temperature=`` (chat-model agents only) each candidate's model is
given that temperature (one number for all, or one per candidate). A chat-model agent's
candidates after the first never answer from an LLM cache (``set_llm_cache``, or the
model's ``cache=``), which would give each the first one's answer: they are copies of the
model with ``cache=False``. An agent that is a graph or a function calls its models
itself; give those models ``cache=False`` when a cache is set.

The evaluator then judges every candidate (concurrently too), each with a
`LoopContext` whose ``last_response`` is that candidate's answer, whose ``messages``
end with it and whose ``candidate`` is its number. `best_candidate` picks the
iteration's answer: the highest score; on a tie, or when no candidate has a score,
an accepted one before one that was not, then the lowest number. Only that answer
(with its tool traffic) enters ``messages`` and goes back to the agent; every
candidate's answer, verdict and usage is kept in the iteration's record
(``record["candidates"]``, the non-selected answers under ``answer``), so storage
stays linear. Budgets count every candidate's calls. With ``max_iterations=1`` this
is best-of-N.

A candidate whose call fails with a model-caused error (``on_agent_error="feedback"``)
is recorded with its error and not judged; when every candidate fails, the iteration
is a failed attempt. Any other error of one candidate ends the node (the others are
cancelled under ``ainvoke``), and the node's retry policy runs all k again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import get_executor_for_config

from loop_agents.loop._agent import AgentLike, describe
from loop_agents.loop._numbers import describe_number, finite_float
from loop_agents.loop.attempts import Attempt, AttemptRunner, Judged, JudgeRunner
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.loop.tracing import candidate_config

MAX_CANDIDATES = 64
"""The most candidates per iteration ``candidates=`` accepts."""


def check_candidates(candidates: object) -> int:
    """Validate ``candidates=``: an int from 1 to `MAX_CANDIDATES`.

    Example:
        ```python
        check_candidates(4)  # 4
        ```

    """
    if isinstance(candidates, bool) or not isinstance(candidates, int):
        raise TypeError(
            f"candidates must be an int >= 1 (answers per iteration; 1 is one answer, as "
            f"without the option); got {type(candidates).__name__} {candidates!r:.40}"
        )
    if not 1 <= candidates <= MAX_CANDIDATES:
        raise ValueError(
            f"candidates must be from 1 to {MAX_CANDIDATES} (answers per iteration); got "
            f"{describe_number(candidates)}"
        )
    return candidates


def check_candidate_temperature(
    temperature: object, candidates: int, agent: object
) -> list[float] | None:
    """Validate ``candidate_temperature=``: the temperature of each candidate, or ``None``.

    Raises:
        TypeError: not a number or a sequence of numbers, or the agent is not a chat
            model (a graph or a function has no temperature to set).
        ValueError: a temperature is negative or not finite, a sequence's length is
            not ``candidates``, or the loop has one candidate.

    """
    if temperature is None:
        return None
    if candidates == 1:
        raise ValueError(
            "candidate_temperature applies with candidates=k (k > 1); pass candidates= too, "
            "or set the temperature on the model itself"
        )
    if not isinstance(agent, BaseChatModel):
        raise TypeError(
            f"candidate_temperature sets a chat model's temperature, and agent "
            f"{describe(agent)!r} is a {type(agent).__name__}; give the agent a temperature "
            f"of its own, or pass a chat model as the agent"
        )
    values: list[object]
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        values = [temperature] * candidates
    elif isinstance(temperature, Sequence) and not isinstance(temperature, str):
        values = list(temperature)
        if len(values) != candidates:
            raise ValueError(
                f"candidate_temperature has {len(values)} values for candidates={candidates}; "
                f"give one number for all or exactly one per candidate"
            )
    else:
        raise TypeError(
            f"candidate_temperature must be a number or a sequence of {candidates} numbers; "
            f"got {type(temperature).__name__} {temperature!r:.40}"
        )
    checked: list[float] = []
    for value in values:
        number = None if isinstance(value, bool) else finite_float(value)
        if number is None or number < 0:
            raise ValueError(
                f"candidate_temperature values must be finite numbers >= 0; got "
                f"{describe_number(value)}"
            )
        checked.append(number)
    return checked


def with_temperature(model: BaseChatModel, temperature: float) -> Runnable[Any, Any]:
    """``model`` answering at ``temperature``: a copy when it has the field, else bound."""
    if "temperature" in type(model).model_fields:
        return model.model_copy(update={"temperature": temperature})
    return model.bind(temperature=temperature)


def without_cache(model: BaseChatModel) -> BaseChatModel:
    """A copy of ``model`` that never answers from an LLM cache (``cache=False``)."""
    return model.model_copy(update={"cache": False})


def candidate_agents(
    agent: AgentLike, candidates: int, temperatures: list[float] | None
) -> list[AgentLike]:
    """The agent of each candidate: the same one, or the model at each temperature.

    A chat model's candidates after the first never read an LLM cache (a cache would
    give each of them the first one's answer to the same prompt): each is a copy of the
    model with ``cache=False``.
    """
    if not isinstance(agent, BaseChatModel):
        return [agent] * candidates
    models: list[BaseChatModel] = [agent] + [without_cache(agent) for _ in range(candidates - 1)]
    if temperatures is None:
        return list(models)
    return [with_temperature(model, t) for model, t in zip(models, temperatures, strict=True)]


class CandidatePool:
    """Calls the k candidates' agents at the same time."""

    def __init__(self, runners: Sequence[AttemptRunner]) -> None:
        self.runners = list(runners)

    def invoke(self, messages: list[AnyMessage], config: RunnableConfig) -> list[Attempt]:
        """Call every candidate, each in a worker thread; wait for all."""
        with get_executor_for_config(config) as executor:
            futures = [
                executor.submit(runner.invoke, messages, candidate_config(config, number))
                for number, runner in enumerate(self.runners, 1)
            ]
            return [future.result() for future in futures]

    async def ainvoke(self, messages: list[AnyMessage], config: RunnableConfig) -> list[Attempt]:
        """Call every candidate concurrently; one that raises cancels the others."""
        return await gather_all(
            [
                runner.ainvoke(messages, candidate_config(config, number))
                for number, runner in enumerate(self.runners, 1)
            ]
        )


async def gather_all(coroutines: Sequence[Any]) -> list[Any]:
    """``asyncio.gather`` that cancels the unfinished tasks when one fails."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def judge_all(
    judge: JudgeRunner, contexts: Sequence[LoopContext], config: RunnableConfig
) -> list[Judged]:
    """Evaluate every candidate's context, each in a worker thread."""
    with get_executor_for_config(config) as executor:
        futures = [
            executor.submit(judge.invoke, context, candidate_config(config, context["candidate"]))
            for context in contexts
        ]
        return [future.result() for future in futures]


async def ajudge_all(
    judge: JudgeRunner, contexts: Sequence[LoopContext], config: RunnableConfig
) -> list[Judged]:
    """Evaluate every candidate's context concurrently."""
    return await gather_all(
        [
            judge.ainvoke(context, candidate_config(config, context["candidate"]))
            for context in contexts
        ]
    )


def best_candidate(verdicts: Sequence[tuple[int, LoopEvaluation]]) -> int:
    """The number of the best candidate among ``(number, verdict)`` pairs.

    The highest score wins; on a tie, or when no candidate has a score, an accepted
    candidate goes before one that was not, then the lowest number.

    Example:
        ```python
        best_candidate([(1, {"stop": False, "score": 60}), (2, {"stop": False, "score": 80})])
        # 2
        ```

    """
    if not verdicts:
        raise ValueError("best_candidate() needs at least one judged candidate")
    scored = [(n, v) for n, v in verdicts if v.get("score") is not None]
    pool = scored or list(verdicts)
    top = max((v.get("score") or 0.0 for _, v in pool), default=0.0)
    tied = [(n, v) for n, v in pool if not scored or v.get("score") == top]
    accepted = [n for n, v in tied if v["stop"]]
    return min(accepted) if accepted else min(n for n, _ in tied)


def candidate_context(
    base: LoopContext, produced: list[AnyMessage], answer: AIMessage, number: int
) -> LoopContext:
    """The `LoopContext` of one candidate: ``base`` with its answer and its messages."""
    return {
        **base,
        "last_response": answer,
        "messages": [*base["messages"], *produced],
        "candidate": number,
    }
