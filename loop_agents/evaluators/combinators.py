"""Several evaluators as one: `all_of` (a chain of gates) and `panel` (a jury).

Both validate each member's verdict (naming the member on error), label the members'
feedback with their names and report the members that decided in ``decided_by``.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeAlias, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_executor_for_config

from loop_agents.evaluators import base
from loop_agents.loop.checkpoints import checkpointed_caller
from loop_agents.loop.evaluation import (
    Evaluator,
    EvaluatorCaller,
    LoopEvaluatorRunnable,
    combined_criteria,
)
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.steps import Program

Combine: TypeAlias = (
    Literal["all", "min", "mean"] | Callable[[Mapping[str, LoopEvaluation]], LoopEvaluation]
)
"""A panel's rule, or a function of the verdicts by member name returning the verdict."""

_Verdicts: TypeAlias = Sequence[tuple[str, LoopEvaluation]]


def _members(kind: str, evaluators: Sequence[Evaluator]) -> list[tuple[str, EvaluatorCaller]]:
    if not evaluators:
        raise ValueError(f"{kind}() needs at least one evaluator; got none")
    callers = [EvaluatorCaller(e, member_of=kind) for e in evaluators]  # TypeError if not one
    return list(zip(base.unique_names(evaluators), callers, strict=True))


def _criteria(members: Sequence[tuple[str, object]], evaluators: Sequence[Evaluator]) -> str | None:
    return combined_criteria([(m, e) for (m, _), e in zip(members, evaluators, strict=True)])


def _decided_by(verdicts: _Verdicts) -> list[str]:
    return [name for n, v in verdicts for name in (v.get("decided_by") or [n])]


def _joined(stop: bool, deciding: _Verdicts, scored: _Verdicts) -> LoopEvaluation:
    # one verdict from several: the deciders' feedback, the lowest score of ``scored``
    combined: LoopEvaluation = {
        "stop": stop,
        "feedback": base.merge_feedback((n, v.get("feedback", "")) for n, v in deciding),
        "decided_by": _decided_by(deciding),
    }
    scores = [v["score"] for _, v in scored if "score" in v]
    if scores:
        combined["score"] = min(scores)
    return combined


def all_of(*evaluators: Evaluator, name: str = "all_of") -> LoopEvaluatorRunnable:
    """Run evaluators in order; the first that asks to continue decides, the rest are skipped.

    Put cheap checks first, an LLM judge last. When all accept: the lowest score any gave
    and all their feedback. ``criteria``: the members', each under its name.

    Example:
        ```python
        evaluator = all_of(code_runner("63245986"), llm_judge(model, rubric, threshold=75))
        ```
    """
    # Each member runs as a checkpointed task: when the node runs again (a human review
    # in a later member was answered, or a later member failed and the loop resumed),
    # members that already gave their verdict are not called a second time.
    members = [
        (member, EvaluatorCaller(checkpointed_caller(caller, name=member), member_of="all_of"))
        for member, caller in _members("all_of", evaluators)
    ]

    def evaluate(context: LoopContext, config: RunnableConfig) -> Program[LoopEvaluation]:
        passed: list[tuple[str, LoopEvaluation]] = []
        for member, caller in members:
            call = base.step(member, caller.invoke, caller.ainvoke, context, config)
            verdict: LoopEvaluation = (yield call).value
            passed.append((member, verdict))
            if not verdict["stop"]:
                return {**verdict, "decided_by": _decided_by(passed[-1:])}
        return _joined(True, passed, passed)

    criteria = _criteria(members, evaluators)
    return base.stepped_evaluator(base.check_name(name, "all_of"), evaluate, criteria=criteria)


def _combine_scores(
    verdicts: _Verdicts, combine: Literal["min", "mean"], threshold: float, panel_name: str
) -> LoopEvaluation:
    unscored = [n for n, v in verdicts if "score" not in v]
    if unscored:
        raise ValueError(
            f"panel {panel_name!r} combines scores ({combine!r}) but {unscored[0]!r} gave no "
            f"score; give every member a score or use combine='all'"
        )
    scores = {n: v["score"] for n, v in verdicts}
    value = min(scores.values()) if combine == "min" else statistics.fmean(scores.values())
    shown = ", ".join(f"{n} {base.format_score(s)}" for n, s in scores.items())
    line = (
        f"Panel score ({combine} of {shown}): {base.format_score(round(value, 2))}, "
        f"threshold {base.format_score(threshold)}."
    )
    feedback = base.merge_feedback((n, v.get("feedback", "")) for n, v in verdicts)
    deciders = [n for n, s in scores.items() if s == value] if combine == "min" else list(scores)
    return {
        "stop": value >= threshold,
        "feedback": f"{feedback}\n\n{line}" if feedback else line,
        "score": value,
        "decided_by": _decided_by([(n, v) for n, v in verdicts if n in deciders]),
    }


def _combine(
    verdicts: _Verdicts, combine: Combine, threshold: float | None, panel_name: str
) -> LoopEvaluation:
    if callable(combine):
        custom = combine(dict(verdicts))  # validated by whoever calls the panel
        if isinstance(custom, Mapping) and "decided_by" not in custom:
            custom = cast(LoopEvaluation, {**custom, "decided_by": [n for n, _ in verdicts]})
        return custom
    if combine != "all":
        assert threshold is not None  # checked when the panel was built
        return _combine_scores(verdicts, combine, threshold, panel_name)
    failing = [(n, v) for n, v in verdicts if not v["stop"]]
    return _joined(not failing, failing or verdicts, verdicts)


def panel(
    *evaluators: Evaluator,
    combine: Combine = "all",
    threshold: float | None = None,
    name: str = "panel",
) -> LoopEvaluatorRunnable:
    """Run evaluators at the same time and combine their verdicts.

    ``combine``: ``"all"`` (every member accepts; the feedback of those that did not),
    ``"min"`` or ``"mean"`` of the members' scores against ``threshold`` (required then),
    or a function of the verdicts by member name. A member's error propagates; unfinished
    async members are cancelled.

    Example:
        ```python
        jury = panel(judge_a, judge_b, combine="mean", threshold=75)
        ```
    """
    members = _members("panel", evaluators)
    names = [n for n, _ in members]
    label = base.check_name(name, "panel")
    if not callable(combine) and combine not in ("all", "min", "mean"):
        raise ValueError(
            f"combine must be 'all', 'min', 'mean' or a function of the verdicts; got {combine!r}"
        )
    scored = combine in ("min", "mean")
    if scored and (isinstance(threshold, bool) or not isinstance(threshold, int | float)):
        raise ValueError(
            f"panel(combine={combine!r}) needs threshold=<the combined score to accept>; "
            f"got {threshold!r}"
        )
    if not scored and threshold is not None:
        raise ValueError(
            f"threshold is only used with combine='min' or 'mean'; got threshold={threshold!r} "
            f"with combine={combine!r}"
        )

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        with get_executor_for_config(config) as executor:
            futures = [executor.submit(caller.invoke, context, config) for _, caller in members]
            verdicts = [f.result() for f in futures]
        return _combine(list(zip(names, verdicts, strict=True)), combine, threshold, label)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        tasks = [asyncio.ensure_future(caller.ainvoke(context, config)) for _, caller in members]
        try:
            verdicts = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        return _combine(list(zip(names, verdicts, strict=True)), combine, threshold, label)

    return base.make_evaluator(label, evaluate, aevaluate, criteria=_criteria(members, evaluators))
