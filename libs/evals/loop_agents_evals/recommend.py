"""What to use, from what an eval found: `recommend`, a pure function of an `EvalReport`.

The rule (explained in docs/eval.md): the baseline is ``single`` (else the cheapest arm
run); an arm is a contender when it beats the baseline task by task (more won than lost,
sign test p < `ALPHA`); of the contenders (and the baseline), those not significantly
worse than the one that passed most are kept, and the cheapest per passed task wins.
With fewer than `MIN_TASKS` tasks the baseline stays, and the recommendation says so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from loop_agents_evals.stats import Paired, paired_comparison

if TYPE_CHECKING:
    from loop_agents_evals.report import EvalReport

__all__ = ["ALPHA", "MIN_TASKS", "Recommendation", "arm_code", "recommend"]

ALPHA = 0.05
"""A paired sign test below this p-value counts as more than noise."""

MIN_TASKS = 10
"""Below this many tasks no arm is recommended over the baseline."""

SINGLE = "a single answer (no loop)"

Confidence = Literal["significant", "not significant", "too few tasks"]


@dataclass(frozen=True)
class Recommendation:
    """The arm to use, the code that does it, and the evidence (see the module docstring).

    Attributes:
        arm: The arm to use (``"single"``: no loop).
        code: How to do it in your code (``create_loop_agent(...)``, or ``SINGLE``).
        baseline: What the arms were measured against (``single``, else the cheapest).
        confidence: ``"significant"`` (``arm`` beats the baseline), ``"not significant"``
            (nothing does: the baseline is recommended) or ``"too few tasks"``.
        compared: The arm whose evidence is given (``arm``, or the best other one).
        won: Tasks ``compared`` passed and the baseline failed.
        lost: Tasks ``compared`` failed and the baseline passed.
        p_value: The sign test of ``won`` against ``lost``.
        passed: Tasks ``compared`` passed, of ``tasks`` with a result.
        tasks: Tasks ``compared`` has a result for.
        baseline_passed: Tasks the baseline passed, of ``baseline_tasks``.
        baseline_tasks: Tasks the baseline has a result for.
        cost_per_pass: ``compared``'s cost per passed task (``None``: none passed).
        baseline_cost_per_pass: The baseline's.
        cost_unit: ``"tokens"``, or ``"model calls"`` when no arm reported tokens.
        text: The recommendation and its evidence in words.
    """

    arm: str
    code: str
    baseline: str
    confidence: Confidence
    compared: str
    won: int
    lost: int
    p_value: float
    passed: int
    tasks: int
    baseline_passed: int
    baseline_tasks: int
    cost_per_pass: float | None
    baseline_cost_per_pass: float | None
    cost_unit: str
    text: str

    def to_json(self) -> dict[str, Any]:
        """The ``recommendation`` of the ``--out`` JSON: every attribute."""
        return asdict(self)


_FUNCTION = re.compile(r"[\w.]+:(?P<name>[\w.<>]+)")
# a control's attributes its code shows: (positional, (keyword, its default) ...)
_SHOWN: dict[str, tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {
    "History": (("policy",), ()),
    "Candidates": (("k",), (("temperature", None),)),
    "DiverseFirst": (("k",), (("temperature", None),)),
    "FeedbackStyle": (("format",), ()),
    "AnswerSelection": (("select",), ()),
    "Plateau": (("patience",), (("min_delta", 0.0),)),
    "Restart": ((), (("max_repairs", None),)),
    "Stagnation": ((), ()),
    "Adaptive": ((), (("seed", None), ("namespace", None))),
}
_KINDS = ("repair", "fresh", "informed")


def _value(value: object) -> str:
    """A described value as Python: a function by its name, text quoted."""
    if isinstance(value, str):
        found = _FUNCTION.fullmatch(value)
        return found["name"].rpartition(".")[2] if found else json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_value, value)) + "]"
    return repr(value)


def _control(described: Mapping[str, Any]) -> str:
    """A control described in a report (`describe_value`) as the code that builds it."""
    name = str(described.get("type", "")).rpartition(":")[2] or "control"
    if name not in _SHOWN:
        return f"{name}(...)"
    positional, keywords = _SHOWN[name]
    if name == "FeedbackStyle" and described.get("format") == "{feedback}":
        return "FeedbackStyle(PLAIN_FEEDBACK)"
    args = [_value(described.get(a)) for a in positional]
    args += [f"{k}={_value(described[k])}" for k, d in keywords if described.get(k, d) != d]
    kinds = described.get("kinds")
    if name == "Adaptive" and isinstance(kinds, Mapping) and tuple(kinds) != _KINDS:
        chosen = {k: None for k in _KINDS if k not in kinds}
        chosen |= {k: v for k, v in kinds.items() if k not in _KINDS}  # kinds of your own
        args.insert(0, f"kinds={_value(chosen)}")
    return f"{name}({', '.join(args)})"


def arm_code(arm: str, settings: Mapping[str, Any]) -> str:
    """How to run ``arm`` in your own code, from a report's ``settings``.

    Example:
        ```python
        assert arm_code("restart", {"iterations": 3}) == (
            "create_loop_agent(agent, evaluator, 3, controls=[Restart()])"
        )
        ```
    """
    k, threshold = settings.get("iterations"), settings.get("judge_threshold")
    budget = k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
    if not isinstance(threshold, int | float) or isinstance(threshold, bool):
        threshold = 80
    judge = f"llm_judge(model, instructions, threshold={threshold:g})"
    builtin: dict[str, tuple[str, list[Mapping[str, Any]]]] = {
        "loop": ("tests", []),
        "resample": ("tests", [{"type": ":Adaptive", "kinds": {"fresh": None}}]),
        "judge-loop": ("judge", []),
        "loop-candidates": ("tests", [{"type": ":Candidates", "k": 2}]),
        "restart": ("tests", [{"type": ":Restart"}]),
        "diverse-first": ("tests", [{"type": ":DiverseFirst", "k": 2}]),
        "adaptive": ("tests", [{"type": ":Adaptive"}]),
    }
    identity = settings.get("arms", {}).get(arm) if isinstance(settings.get("arms"), dict) else None
    if arm == "single":
        return SINGLE
    if arm in builtin:
        evaluator, controls = builtin[arm]
    elif isinstance(identity, Mapping) and identity.get("kind") == "factory":
        return f"the agent {identity.get('factory')} builds (--arm {arm}={identity.get('factory')})"
    elif isinstance(identity, Mapping) and identity.get("kind") == "loop":
        evaluator = str(identity.get("evaluator"))
        older = identity.get("options")  # a file of 0.2 kept the controls there
        found = identity.get("controls", older.get("controls") if isinstance(older, dict) else ())
        controls = [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []
    else:
        return f"the arm {arm} (what it is is not recorded in this file)"
    controls = [c for c in controls if not str(c.get("type")).endswith(":Repair")]
    steps: str | int = "K" if budget is None else budget
    for control in controls:  # the same budget of K answers
        size = control.get("k")
        if budget is not None and isinstance(size, int):
            kind = str(control.get("type"))
            if kind.endswith(":Candidates"):
                steps = max(1, budget // size)
            elif kind.endswith(":DiverseFirst"):
                steps = max(1, budget - size + 1)
    shown = f", controls=[{', '.join(map(_control, controls))}]" if controls else ""
    evaluator = judge if evaluator == "judge" else "evaluator"
    return f"create_loop_agent(agent, {evaluator}, {steps}{shown})"


def recommend(report: EvalReport) -> Recommendation | None:
    """The arm to use on these tasks and this model, with its evidence; ``None``: no result.

    A pure function of the report (its arms' summaries, its results and its settings),
    so an older ``--out`` file read back gets one too.

    Example:
        ```python
        found = recommend(report)
        print(found.arm, found.confidence, found.code)
        ```
    """
    summaries = {arm: s for arm, s in report.arms.items() if s.tasks}
    if not summaries:
        return None
    verdicts: dict[str, dict[str, bool]] = {arm: {} for arm in summaries}
    for result in report.results:
        if result.arm in verdicts:
            verdicts[result.arm][result.task_id] = result.passed
    tokens = any(s.input_tokens + s.output_tokens > 0 for s in summaries.values())

    def cost(arm: str) -> float:
        s = summaries[arm]
        return s.input_tokens + s.output_tokens if tokens else s.model_calls

    def per_pass(arm: str) -> float | None:
        s = summaries[arm]
        return cost(arm) * s.tasks / s.passed if s.passed else None

    def versus(arm: str, other: str) -> Paired:
        return paired_comparison(verdicts[arm], verdicts[other], names=(arm, other))

    def beats(arm: str, other: str) -> bool:
        found = versus(arm, other)
        return found.won > found.lost and found.p_value < ALPHA

    def rate(arm: str) -> float:
        return summaries[arm].pass_rate

    baseline = "single" if "single" in summaries else min(summaries, key=cost)
    others = [arm for arm in summaries if arm != baseline]
    count = len({task for found in verdicts.values() for task in found})
    contenders = [baseline] + [a for a in others if count >= MIN_TASKS and beats(a, baseline)]
    best = max(contenders, key=rate)
    kept = [arm for arm in contenders if not beats(best, arm)]
    chosen = min(kept, key=lambda a: (per_pass(a) or math.inf, -rate(a)))
    compared = chosen
    if chosen == baseline and others:
        compared = max(others, key=lambda a: (rate(a), -cost(a)))
    evidence = versus(compared, baseline)
    confidence: Confidence = (
        "too few tasks"
        if count < MIN_TASKS
        else "significant"
        if chosen != baseline
        else "not significant"
    )
    found = Recommendation(
        arm=chosen,
        code=arm_code(chosen, report.settings),
        baseline=baseline,
        confidence=confidence,
        compared=compared,
        won=evidence.won,
        lost=evidence.lost,
        p_value=evidence.p_value,
        passed=summaries[compared].passed,
        tasks=summaries[compared].tasks,
        baseline_passed=summaries[baseline].passed,
        baseline_tasks=summaries[baseline].tasks,
        cost_per_pass=per_pass(compared),
        baseline_cost_per_pass=per_pass(baseline),
        cost_unit="tokens" if tokens else "model calls",
        text="",
    )
    text = _text(found, count, len(report.errors))
    if chosen != best:
        beaten = versus(best, chosen)
        text += (
            f" {best} passed {summaries[best].passed}/{summaries[best].tasks}, not "
            f"significantly more (won {beaten.won}, lost {beaten.lost}, p = "
            f"{beaten.p_value:.3g}): {chosen} costs less per passed task."
        )
    return Recommendation(**(asdict(found) | {"text": text}))


def _cost(value: float | None, unit: str) -> str:
    if value is None:
        return "none passed"
    return f"{value:,.0f} {unit}" if unit == "tokens" else f"{value:.1f} {unit}"


def _text(found: Recommendation, count: int, errors: int) -> str:
    """The recommendation in words (see `Recommendation.text`)."""
    base = "a single answer" if found.baseline == "single" else found.baseline
    use = SINGLE if found.arm == "single" else found.arm
    significant = found.p_value < ALPHA and found.won > found.lost
    who = "it" if found.compared == found.arm else f"the best arm, {found.compared},"
    cost, base_cost = (
        _cost(c, found.cost_unit) for c in (found.cost_per_pass, found.baseline_cost_per_pass)
    )
    evidence = (
        f"{who} passed {found.passed}/{found.tasks} against "
        f"{found.baseline_passed}/{found.baseline_tasks} for {base}; task by task it won "
        f"{found.won} and lost {found.lost} (sign test p = {found.p_value:.3g}, "
        f"{'' if significant else 'not '}significant). Cost per passed task: {cost} "
        f"against {base_cost}."
    )
    lead = {
        "too few tasks": f"Too few tasks to choose ({count}; give at least {MIN_TASKS}, and 30 "
        f"or more to see smaller gains): keep {use} for now. So far",
        "not significant": f"Use {use}: no arm beats {base} by more than noise.",
        "significant": f"Use {use}: it beats {base} by more than noise.",
    }[found.confidence]
    if lead.endswith("."):
        evidence = evidence[0].upper() + evidence[1:]
    text = f"{lead} {evidence}"
    if found.compared == found.baseline:
        text = f"Only {found.arm} ran: there is nothing to compare it with."
    if errors:
        text += f" {errors} task/arm pairs have no result: run the eval again to complete it."
    return text
