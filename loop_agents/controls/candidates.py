"""Candidates per iteration: k independent answers, each judged, the best one kept.

With ``create_loop_agent(..., controls=[Candidates(k)])`` (k > 1) each iteration calls the agent k
times on the same messages, at the same time (``asyncio.gather`` under ``ainvoke``,
worker threads under ``invoke``). Each call is a run of its own: a fresh ``run_id``,
the name ``"iteration N: agent (candidate i)"``, the tag ``loop_candidate:i`` and
``loop_candidate`` in its metadata (its tokens on the ``messages`` stream carry it).
With ``Candidates(k, temperature=...)`` (chat-model agents only) each candidate's model is
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

Each candidate's agent call is a LangGraph task of its own, and so is each candidate's
evaluation: with a checkpointer, a candidate that fails is, once the loop is resumed,
run again alone (the others' answers and verdicts are read back from the checkpoint, not
paid for twice), and ``Retries(agent_retry_policy=...)`` retries one candidate without
running the others again. A candidate whose call fails with a model-caused error
(with `AgentErrors`) is recorded with its error and not judged; when every
candidate fails, the iteration is a failed attempt. Any other error of one candidate ends
the node once the other candidates have finished.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from loop_agents.loop.agents import AgentCaller, AgentLike, describe
from loop_agents.loop.protocol import AgentCall, LoopControl, LoopSpec, Outcome, Stage
from loop_agents.loop.state import LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float

MAX_CANDIDATES = 64
"""The most candidates per iteration `Candidates` accepts."""


def check_candidates(candidates: object, where: str = "Candidates(candidates=)") -> int:
    """Validate a number of answers per iteration: an int from 1 to `MAX_CANDIDATES`.

    Example:
        ```python
        check_candidates(4)  # 4
        ```

    """
    if isinstance(candidates, bool) or not isinstance(candidates, int):
        raise TypeError(
            f"{where} must be an int (answers per iteration); got "
            f"{type(candidates).__name__} {candidates!r:.40}"
        )
    if not 1 <= candidates <= MAX_CANDIDATES:
        raise ValueError(
            f"{where} must be from 1 to {MAX_CANDIDATES} (answers per iteration); got "
            f"{describe_number(candidates)}"
        )
    return candidates


def check_candidate_temperature(
    temperature: object, candidates: int, agent: object, where: str = "Candidates"
) -> list[float] | None:
    """Validate a candidates' temperature: one per candidate, or ``None``.

    Args:
        temperature: A number for every candidate, or one number per candidate.
        candidates: How many candidates.
        agent: The loop's agent (``None``: not known yet; only the values are checked).
        where: The control, for messages (``"Candidates"``, ``"DiverseFirst"``).

    Raises:
        TypeError: not a number or a sequence of numbers, or the agent is not a chat
            model (a graph or a function has no temperature to set).
        ValueError: a temperature is negative or not finite, or a sequence's length is
            not ``candidates``.

    """
    if temperature is None:
        return None
    if agent is not None and not isinstance(agent, BaseChatModel):
        raise TypeError(
            f"{where}(temperature=) sets a chat model's temperature, and the loop's agent "
            f"{describe(agent)!r} is a {type(agent).__name__}; give the agent a temperature "
            f"of its own and leave temperature= out, or pass a chat model as the agent"
        )
    values: list[object]
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        values = [temperature] * candidates
    elif isinstance(temperature, Sequence) and not isinstance(temperature, str):
        values = list(temperature)
        if len(values) != candidates:
            raise ValueError(
                f"{where}(temperature=) has {len(values)} values for {candidates} answers; "
                f"give one number for all or exactly one per answer"
            )
    else:
        raise TypeError(
            f"{where}(temperature=) must be a number or a sequence of {candidates} numbers; "
            f"got {type(temperature).__name__} {temperature!r:.40}"
        )
    checked: list[float] = []
    for value in values:
        number = None if isinstance(value, bool) else finite_float(value)
        if number is None or number < 0:
            raise ValueError(
                f"{where}(temperature=) values must be finite numbers >= 0; got "
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


class Candidates(LoopControl):
    """k answers per iteration, each judged, the best one kept: ``Candidates(k)``.

    Args:
        candidates: Answers per iteration (2 to `MAX_CANDIDATES`; 1 is the plain loop).
        temperature: With a chat-model agent: the temperature of every candidate (a
            number) or of each (k numbers).

    Raises:
        TypeError: an option of the wrong type, or a temperature for an agent that is
            not a chat model.
        ValueError: an option out of range.

    Example:
        ```python
        loop = create_loop_agent(model, judge, 3, controls=[Candidates(4, temperature=0.8)])
        ```

    """

    name = "candidates"
    stage = Stage.CANDIDATES
    claims = frozenset({"answers"})
    fans_out = True

    def __init__(
        self, candidates: int = 2, *, temperature: float | Sequence[float] | None = None
    ) -> None:
        """Check the options (the agent's are checked when the loop is built)."""
        self.k = check_candidates(candidates)
        self.temperature = temperature
        self.temperatures = check_candidate_temperature(temperature, self.k, None)
        self.agents: list[AgentCaller] | None = None

    def bind(self, loop: LoopSpec) -> Candidates:
        """A copy that calls the loop's agent, or its model at each candidate's temperature."""
        where = type(self).__name__
        check_candidate_temperature(self.temperature, self.k, loop.agent, where)
        bound = copy.copy(self)
        if loop.agent is not None:
            agents = candidate_agents(loop.agent, self.k, self.temperatures)
            bound.agents = [AgentCaller(a) for a in agents]
        return bound

    def around_agent(self, call: AgentCall) -> Generator[Any, Any, Any]:
        """Make the k calls at once; return their attempts."""
        if self.k == 1:  # one call, as without the control (a list of one is not the same)
            return (yield call.but(agent=self.agents[0]) if self.agents else call)
        calls = [
            call.but(candidate=number, agent=self.agents[number - 1] if self.agents else None)
            for number in range(1, self.k + 1)
        ]
        attempts = yield calls
        return attempts

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Select the best judged candidate (see `best_candidate`)."""
        verdicts = [
            (index, {"stop": bool(j.verdict.stop), "score": j.verdict.score})
            for index, j in enumerate(outcome.judged)
            if j.verdict is not None
        ]
        if verdicts:
            outcome.selected = best_candidate(verdicts)  # type: ignore[arg-type]
        return outcome
