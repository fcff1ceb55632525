"""Candidates per iteration: k answers at once, each judged, the best one kept (`Candidates`).

Only the selected answer enters ``messages``; every candidate is in the iteration's record.
Runs, streaming, temperatures, caches, retries and resumes: docs/loop-control.md.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence
from typing import Any, cast

from langchain_core.language_models import BaseChatModel

from loop_agents.controls.options import check_count
from loop_agents.loop.agents import AgentCaller, AgentLike, describe
from loop_agents.loop.protocol import AgentCall, LoopControl, LoopSpec, Outcome, Stage
from loop_agents.loop.state import LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float

MAX_CANDIDATES = 64
"""The most candidates per iteration `Candidates` accepts."""


def check_candidate_temperature(
    temperature: object, candidates: int, agent: object, where: str = "Candidates"
) -> list[float] | None:
    """Each candidate's temperature, or ``None``; ``agent``, once known, must be a chat model."""
    if temperature is None:
        return None
    if agent is not None and not isinstance(agent, BaseChatModel):
        raise TypeError(
            f"{where}(temperature=) sets a chat model's temperature, and the loop's agent "
            f"{describe(agent)!r} is a {type(agent).__name__}; give the agent a temperature "
            f"of its own and leave temperature= out, or pass a chat model as the agent"
        )
    one = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not one and (isinstance(temperature, str) or not isinstance(temperature, Sequence)):
        raise TypeError(
            f"{where}(temperature=) must be a number or a sequence of {candidates} numbers; "
            f"got {type(temperature).__name__} {temperature!r:.40}"
        )
    values = [temperature] * candidates if one else list(cast(Sequence[object], temperature))
    if len(values) != candidates:
        raise ValueError(
            f"{where}(temperature=) has {len(values)} values for {candidates} answers; "
            f"give one number for all or exactly one per answer"
        )
    for value in values:
        number = finite_float(value)
        if number is None or number < 0:
            raise ValueError(
                f"{where}(temperature=) values must be finite numbers >= 0; got "
                f"{describe_number(value)}"
            )
    return [float(cast(float, value)) for value in values]


def candidate_agents(
    agent: AgentLike, candidates: int, temperatures: list[float] | None
) -> list[AgentLike]:
    """Each candidate's agent; a chat model's copies after the first have no LLM cache."""
    if not isinstance(agent, BaseChatModel):
        return [agent] * candidates
    models = [agent] + [agent.model_copy(update={"cache": False}) for _ in range(candidates - 1)]
    if temperatures is None:
        return list(models)
    if "temperature" in type(agent).model_fields:  # a copy when it has the field, else bound
        return [
            m.model_copy(update={"temperature": t})
            for m, t in zip(models, temperatures, strict=True)
        ]
    return [m.bind(temperature=t) for m, t in zip(models, temperatures, strict=True)]


def best_candidate(verdicts: Sequence[tuple[int, LoopEvaluation]]) -> int:
    """The best of ``(number, verdict)`` pairs: the highest score, then accepted, then first.

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

    ``candidates`` is from 1 (the plain loop) to `MAX_CANDIDATES`; ``temperature``, with a
    chat-model agent, that of every candidate (a number) or of each (k numbers).

    Example:
        ```python
        loop = create_loop_agent(model, judge, 3, controls=[Candidates(4, temperature=0.8)])
        ```
    """

    name = "candidates"
    stage = Stage.CANDIDATES
    claims = frozenset({"answers"})
    fans_out = True
    _count = "candidates"  # the name of the number of answers, in messages

    def __init__(
        self, candidates: int = 2, *, temperature: float | Sequence[float] | None = None
    ) -> None:
        where = type(self).__name__  # the agent's options are checked when the loop is built
        count = f"{where}({self._count}=)"
        self.k = check_count(count, candidates, "answers per iteration", most=MAX_CANDIDATES)
        self.temperature = temperature
        self.temperatures = check_candidate_temperature(temperature, self.k, None, where)
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
        return (yield calls)

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
