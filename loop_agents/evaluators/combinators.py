"""Several evaluators as one: ``all_of`` (a chain of gates) and ``panel`` (a jury).

- `all_of` runs its evaluators in order; the first that asks to continue decides and
  the rest are skipped, so cheap rule checks go first and an LLM judge last.
- `panel` runs its evaluators at the same time (``asyncio.gather`` under ``ainvoke``,
  worker threads under ``invoke``) and combines their verdicts: every one must accept
  (``"all"``), or their scores combine (``"min"``, ``"mean"``) against a threshold.

Both validate each member's verdict (naming the member on error), label the members'
feedback with their names, and report the members that decided in ``decided_by``,
which the loop records per iteration.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeAlias, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_executor_for_config

from loop_agents.evaluators.base import (
    check_name,
    format_score,
    make_evaluator,
    merge_feedback,
    unique_names,
)
from loop_agents.loop.checkpoints import checkpointed_caller
from loop_agents.loop.evaluation import (
    Evaluator,
    EvaluatorCaller,
    LoopEvaluatorRunnable,
    combined_criteria,
)
from loop_agents.loop.state import LoopContext, LoopEvaluation

Combine: TypeAlias = (
    Literal["all", "min", "mean"] | Callable[[Mapping[str, LoopEvaluation]], LoopEvaluation]
)
"""How a panel combines its verdicts: a rule's name, or a function of the verdicts by
member name (in member order) returning the combined `LoopEvaluation`."""

_Members: TypeAlias = list[tuple[str, EvaluatorCaller]]


def _members(kind: str, evaluators: Sequence[Evaluator]) -> _Members:
    if not evaluators:
        raise ValueError(f"{kind}() needs at least one evaluator; got none")
    # raises TypeError for non-callables
    callers = [EvaluatorCaller(e, member_of=kind) for e in evaluators]
    return list(zip(unique_names(evaluators), callers, strict=True))


def _decided_by(name: str, evaluation: LoopEvaluation) -> list[str]:
    return evaluation.get("decided_by") or [name]


def _joined(
    stop: bool,
    deciding: Sequence[tuple[str, LoopEvaluation]],
    scored: Sequence[tuple[str, LoopEvaluation]],
) -> LoopEvaluation:
    """One verdict from several: the deciders' feedback, the lowest score of ``scored``."""
    combined: LoopEvaluation = {
        "stop": stop,
        "feedback": merge_feedback((n, v.get("feedback", "")) for n, v in deciding),
        "decided_by": [name for n, v in deciding for name in _decided_by(n, v)],
    }
    scores = [v["score"] for _, v in scored if "score" in v]
    if scores:
        combined["score"] = min(scores)
    return combined


def _accept_all(verdicts: Sequence[tuple[str, LoopEvaluation]]) -> LoopEvaluation:
    """Everyone accepted: stop, with their feedback and the lowest score they gave."""
    return _joined(True, verdicts, verdicts)


def all_of(*evaluators: Evaluator, name: str = "all_of") -> LoopEvaluatorRunnable:
    """Run evaluators in order; the first that asks to continue decides.

    Later evaluators are skipped once one asks to continue, so put cheap checks first
    (a rule, a form check) and expensive ones last (an LLM judge): a draft that fails a
    rule costs no judge call. When every evaluator accepts, the answer is accepted with
    the lowest score any of them gave (if any) and all their feedback.

    Args:
        *evaluators: Evaluators (functions, async functions or runnables, ready-made
            ones included), in the order they run.
        name: The combined evaluator's name.

    Returns:
        A runnable evaluator (async members need the loop's ``ainvoke``). Its
        ``criteria`` are the members', each under the member's name.

    Raises:
        ValueError: no evaluators were given.
        TypeError: a member is not callable.

    Example:
        ```python
        from loop_agents import all_of, llm_judge
        from loop_agents_checks import code_runner

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

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        passed: list[tuple[str, LoopEvaluation]] = []
        for member, caller in members:
            verdict = caller.invoke(context, config)
            if not verdict["stop"]:
                return {**verdict, "decided_by": _decided_by(member, verdict)}
            passed.append((member, verdict))
        return _accept_all(passed)

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        passed: list[tuple[str, LoopEvaluation]] = []
        for member, caller in members:
            verdict = await caller.ainvoke(context, config)
            if not verdict["stop"]:
                return {**verdict, "decided_by": _decided_by(member, verdict)}
            passed.append((member, verdict))
        return _accept_all(passed)

    criteria = combined_criteria(
        [(member, evaluator) for (member, _), evaluator in zip(members, evaluators, strict=True)]
    )
    return make_evaluator(check_name(name, "all_of"), evaluate, aevaluate, criteria=criteria)


def _combine_scores(
    verdicts: Sequence[tuple[str, LoopEvaluation]],
    combine: Literal["min", "mean"],
    threshold: float,
    panel_name: str,
) -> LoopEvaluation:
    unscored = [n for n, v in verdicts if "score" not in v]
    if unscored:
        raise ValueError(
            f"panel {panel_name!r} combines scores ({combine!r}) but {unscored[0]!r} gave no "
            f"score; give every member a score or use combine='all'"
        )
    scores = {n: v["score"] for n, v in verdicts}
    value = min(scores.values()) if combine == "min" else statistics.fmean(scores.values())
    stop = value >= threshold
    shown = ", ".join(f"{n} {format_score(s)}" for n, s in scores.items())
    line = (
        f"Panel score ({combine} of {shown}): {format_score(round(value, 2))}, "
        f"threshold {format_score(threshold)}."
    )
    feedback = merge_feedback((n, v.get("feedback", "")) for n, v in verdicts)
    deciders = [n for n, s in scores.items() if s == value] if combine == "min" else list(scores)
    return {
        "stop": stop,
        "feedback": f"{feedback}\n\n{line}" if feedback else line,
        "score": value,
        "decided_by": [name for n, v in verdicts if n in deciders for name in _decided_by(n, v)],
    }


def _combine(
    verdicts: Sequence[tuple[str, LoopEvaluation]],
    combine: Combine,
    threshold: float | None,
    panel_name: str,
) -> LoopEvaluation:
    if callable(combine):
        custom = combine(dict(verdicts))  # validated by whoever calls the panel
        if isinstance(custom, Mapping) and "decided_by" not in custom:
            custom = cast(LoopEvaluation, {**custom, "decided_by": [n for n, _ in verdicts]})
        return custom
    if combine != "all":
        assert threshold is not None  # checked when the panel was built
        return _combine_scores(verdicts, combine, threshold, panel_name)
    if all(v["stop"] for _, v in verdicts):
        return _accept_all(verdicts)
    failing = [(n, v) for n, v in verdicts if not v["stop"]]
    return _joined(False, failing, verdicts)


def panel(
    *evaluators: Evaluator,
    combine: Combine = "all",
    threshold: float | None = None,
    name: str = "panel",
) -> LoopEvaluatorRunnable:
    """Run evaluators concurrently and combine their verdicts.

    Under the loop's ``ainvoke`` the members run together with ``asyncio.gather`` (sync
    members in worker threads); under ``invoke`` they run in a thread pool. If one
    fails, the error propagates (unfinished async members are cancelled).

    Args:
        *evaluators: The members (functions, async functions or runnables).
        combine: ``"all"`` (default): accept when every member accepts; the feedback
            is that of the members that asked to continue. ``"min"`` / ``"mean"``:
            combine the members' scores and accept when the result reaches
            ``threshold`` (every member must give a score); the feedback is every
            member's, with a line showing the combined score. Or a function of the
            verdicts by member name returning the combined `LoopEvaluation`.
        threshold: The combined score needed to accept; required with ``"min"`` and
            ``"mean"``, not used otherwise.
        name: The panel's name.

    Returns:
        A runnable evaluator whose ``decided_by`` names the members that decided.

    Raises:
        ValueError: no evaluators, an unknown ``combine``, or a missing or stray
            ``threshold``.

    Example:
        ```python
        from loop_agents import llm_judge, panel

        jury = panel(
            llm_judge(model_a, rubric, threshold=75, name="judge_a"),
            llm_judge(model_b, rubric, threshold=75, name="judge_b"),
            combine="mean",
            threshold=75,
        )
        ```

    """
    members = _members("panel", evaluators)
    label = check_name(name, "panel")
    if not callable(combine) and combine not in ("all", "min", "mean"):
        raise ValueError(
            f"combine must be 'all', 'min', 'mean' or a function of the verdicts; got {combine!r}"
        )
    if combine in ("min", "mean"):
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError(
                f"panel(combine={combine!r}) needs threshold=<the combined score to accept>; "
                f"got {threshold!r}"
            )
    elif threshold is not None:
        raise ValueError(
            f"threshold is only used with combine='min' or 'mean'; got threshold={threshold!r} "
            f"with combine={combine!r}"
        )

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        with get_executor_for_config(config) as executor:
            futures = [executor.submit(caller.invoke, context, config) for _, caller in members]
            verdicts = [f.result() for f in futures]
        return _combine(
            list(zip([n for n, _ in members], verdicts, strict=True)), combine, threshold, label
        )

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        tasks = [asyncio.ensure_future(caller.ainvoke(context, config)) for _, caller in members]
        try:
            verdicts = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        return _combine(
            list(zip([n for n, _ in members], verdicts, strict=True)), combine, threshold, label
        )

    criteria = combined_criteria(
        [(member, evaluator) for (member, _), evaluator in zip(members, evaluators, strict=True)]
    )
    return make_evaluator(label, evaluate, aevaluate, criteria=criteria)
