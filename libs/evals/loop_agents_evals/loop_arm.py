"""Loops as arms: `loop(evaluator=..., controls=[...])` builds one from controls.

The built-in loops are such arms (``loop`` is ``loop()``, ``judge-loop``
``loop(evaluator="judge")``, ...). The eval's model answers, the task's visible tests or
checks (or an LLM judge) judge, and the budget is K answers: ``max_iterations`` is K, K/c
with ``Candidates(c)``, K - k + 1 with ``DiverseFirst(k)``. Without a control that
chooses the kind of retry, every retry is a repair (the default loop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.store.memory import InMemoryStore

from loop_agents.controls import Adaptive, Candidates, DiverseFirst, LoopControl, Repair
from loop_agents.controls.candidates import best_candidate
from loop_agents.controls.restart import BUILTIN_KINDS
from loop_agents.evaluators.judge import JudgeError, judge_format_options, llm_judge
from loop_agents.hosts.graph import create_loop_agent
from loop_agents.hosts.removed_keywords import removed_keyword_hint
from loop_agents.loop.protocol import check_controls
from loop_agents.loop.state import IterationRecord, LoopContext, LoopEvaluation, LoopOutput
from loop_agents_evals.arm_protocol import ArmRun, EvalArm, Ran, describe_value
from loop_agents_evals.grading import (
    Attempts,
    VisibleResult,
    entry,
    request_text,
    retry_sent,
    sent_kind,
    strategy_entry,
    system_prompt,
    visible_verdict,
)
from loop_agents_evals.sampling import FirstAnswer, was_cut_off
from loop_agents_evals.settings import check_budget
from loop_agents_evals.tasks import Task

__all__ = ["JUDGE_INSTRUCTIONS", "LoopArm", "loop"]

JUDGE_INSTRUCTIONS = (
    "You review an answer to the task the user gave. You cannot run code or tests: judge "
    "by reading. Score from 0 to 100 how completely and exactly the answer does what the "
    "task asks (100: every requirement met), and say concisely what must change for a "
    "higher score."
)

LoopEvaluatorKind = Literal["tests", "judge"]
"""What judges a `loop` arm's answers: the task's visible tests or checks, or an LLM judge."""

_FACTORY = "give a factory (task, model, settings) -> agent as the arm"
_ONCE = "the eval runs each loop once"
_REFUSED = {
    "agent": f"the arm's agent is the eval's model; for another agent, {_FACTORY}",
    "max_iterations": "the eval's budget K (iterations=) sets it",
    "candidate_temperature": (
        "every arm samples at the eval's temperature (arm_temperatures= gives an arm its own)"
    ),
    "name": "the eval names the loop after the arm",
    "checkpointer": f"{_ONCE}, without checkpoints",
    "store": f"{_ONCE}, without a store",
    "output_mode": "the eval reads the loop's whole output",
    "storage": f"{_ONCE}, without checkpoints",
    "concurrent_runs": f"{_ONCE}, on a thread of its own",
    "busy_timeout": f"{_ONCE}, on a thread of its own",
    "share_agent_state": f"{_ONCE}, not as a node of a parent graph",
}
"""`create_loop_agent`'s keywords the eval sets itself, with the reason `loop` refuses each."""


def _trial_evaluator(context: LoopContext) -> LoopEvaluation:
    return {"stop": True}


class LoopArm(EvalArm):
    """A `create_loop_agent` loop made of controls, as an arm (see the module docstring)."""

    def __init__(
        self, *, evaluator: LoopEvaluatorKind = "tests", controls: Sequence[LoopControl] = ()
    ) -> None:
        """Check the controls by building the loop once (no model is called)."""
        if evaluator not in ("tests", "judge"):
            raise ValueError(
                f"loop(evaluator=) must be 'tests' (the task's visible tests or checks) or "
                f"'judge' (an LLM judge); got {evaluator!r:.60}; for another evaluator, "
                f"{_FACTORY}"
            )
        self.evaluator: LoopEvaluatorKind = evaluator
        self.uses_judge = evaluator == "judge"
        trial = _trial_evaluator
        if self.uses_judge:  # an llm_judge shows its instructions as its criteria
            trial = cast(Any, lambda context: {"stop": True})
            trial.criteria = JUDGE_INSTRUCTIONS
        try:
            given = check_controls(controls)
            self.controls = given
            create_loop_agent(
                GenericFakeChatModel(messages=iter(())), trial, 1, name="trial",
                controls=self.controls,
            )  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"loop(): {exc}") from None
        self.learns = any(isinstance(c, Adaptive) for c in self.controls)
        firsts = [c.k for c in self.controls if isinstance(c, DiverseFirst)]
        self.first = firsts[0] if firsts else 1
        several = [c.k for c in self.controls if type(c) is Candidates]
        self.candidates = several[0] if several else 1

    def identity(self) -> dict[str, Any]:
        """``{"kind": "loop", "evaluator": ..., "controls": [...]}`` (see `describe_value`)."""
        # a Repair (deprecated: the default) is left out, so an arm given one reads as the
        # same loop, and journals written when the built-in loops held one resume
        return {
            "kind": "loop",
            "evaluator": self.evaluator,
            "controls": describe_value([c for c in self.controls if type(c) is not Repair]),
        }

    def max_iterations(self, iterations: int) -> int:
        """The loop's ``max_iterations`` for a budget of K answers."""
        if self.candidates > 1:
            return max(1, iterations // self.candidates)
        return max(1, iterations - self.first + 1)

    def steps(self, iterations: int) -> int:
        """The length of the arm's per-attempt curve: K, or K/c iterations of c candidates."""
        if self.candidates > 1:
            return max(1, iterations // self.candidates)
        return iterations

    def check_budget(self, iterations: int, name: str) -> None:
        """Refuse a K that is not a multiple of ``candidates``, or below the first answers."""
        check_budget(name, iterations, per_iteration=self.candidates, first=self.first)

    async def run(self, run: ArmRun) -> Ran:
        """Run the loop on the task; note every answer and what its evaluator said."""
        task, attempts, iterations = run.task, run.attempts, run.settings.iterations
        failures = 0
        several = self.candidates > 1 or self.first > 1
        seen: dict[tuple[int, int], dict[str, Any]] = {}  # (iteration, candidate) -> entry

        def note(context: LoopContext, found: VisibleResult | None = None) -> dict[str, Any]:
            response = context["last_response"]
            iteration, candidate = context["iteration"], context.get("candidate", 1)
            made = entry(
                attempts.add(response),
                found,
                iteration=iteration,
                candidate=candidate if several else None,
                cut_off=was_cut_off(response),
            )
            seen[(iteration, candidate)] = made
            return made

        async def by_tests(context: LoopContext) -> LoopEvaluation:
            found = await run.grader.check(context["last_response"].text)
            made = note(context, found)
            verdict = visible_verdict(task, found, context["last_response"])
            if not found.ok:
                made["feedback"] = verdict.get("feedback", found.feedback)
            return verdict

        evaluator: Runnable[Any, Any]
        if not self.uses_judge:
            evaluator = RunnableLambda(by_tests, name="visible tests")
        else:
            judge = llm_judge(
                cast(BaseChatModel, run.judge),
                JUDGE_INSTRUCTIONS,
                threshold=run.settings.judge_threshold,
                **judge_format_options(run.settings.judge_method),
                name="judge",
            )

            async def by_judge(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
                nonlocal failures
                made = note(context)
                try:
                    verdict = await judge.ainvoke(context, config)
                except JudgeError:
                    failures += 1  # no usable verdict, so no feedback: the loop ends here
                    return {"stop": True, "feedback": "(the judge gave no usable verdict)"}
                made |= {"ok": verdict["stop"], "feedback": verdict.get("feedback", "")}
                made["score"] = verdict.get("score")
                return verdict

            evaluator = RunnableLambda(by_judge, name="judge")
        controls, store = self.controls, None
        if self.learns:  # a copy of what the arm learned so far in this eval
            store = run.learning.for_task() if run.learning else InMemoryStore()
            seed = run.learning.seed if run.learning else None
            controls = [_seeded(c, seed) for c in controls]
        loop_agent = create_loop_agent(
            _agent(run.model, task, attempts, run.first_answer),
            evaluator,
            self.max_iterations(iterations),
            name=f"eval {run.name}",
            store=store,
            controls=controls,
        )
        result = cast(
            LoopOutput,
            await loop_agent.ainvoke({"messages": [HumanMessage(request_text(task))]}, run.config),
        )
        records = list(result.get("records", []))
        _failed_calls(records, seen, several)
        if self.first > 1 and records:
            attempts.answers += _best_so_far(seen, records[0])
            records = records[1:]
        for record in records:
            chosen = seen.get((record["iteration"], record.get("candidate", 1)))
            if chosen is not None and chosen["answer"] is not None:
                attempts.answers.append(chosen["answer"])
        chosen_kinds = {r["iteration"]: strategy_entry(r.get("strategy")) for r in records}
        for key, kind in zip(sorted(seen), attempts.sent, strict=False):
            made = seen[key] | {"sent": retry_sent(kind, key[0])}
            if chosen_kinds.get(key[0]) is not None:
                made["strategy"] = chosen_kinds[key[0]]
            attempts.transcript.append(made)
        learned = run.learning.learned(store) if run.learning and store is not None else ()
        return Ran(
            result["last_response"].text,
            len(seen),
            steps=self.steps(iterations),
            judge_failures=failures,
            learned=learned,
        )


def loop(
    *,
    evaluator: LoopEvaluatorKind = "tests",
    controls: Sequence[LoopControl] = (),
    **refused: Any,
) -> LoopArm:
    """An arm that is a `create_loop_agent` loop made of these controls.

    Args:
        evaluator: ``"tests"`` (the task's visible tests or checks) or ``"judge"`` (an
            LLM judge, as in ``judge-loop``).
        controls: The loop's controls (`loop_agents.controls`), in order. The eval sets
            the agent, ``max_iterations`` (from K), the name, storage and output.
        **refused: None taken: the keywords the eval sets are refused with the reason,
            those removed in 0.3 (``history=``, ...) with the control to pass.

    Returns:
        A `LoopArm`, for ``arun_eval(..., arms={"name": loop(...)})``.

    Raises:
        TypeError, ValueError: a refused keyword, or controls `create_loop_agent`
            refuses; before any model is called.

    Example:
        ```python
        from loop_agents.controls import FeedbackStyle, History, Stagnation

        arm = loop(controls=[History("feedback_log"), FeedbackStyle("{feedback}"),
                             Stagnation()])
        ```
    """
    for option, value in refused.items():
        if option in _REFUSED:
            raise TypeError(f"loop() does not take {option}=: {_REFUSED[option]}")
        hint = removed_keyword_hint(option, value)
        raise TypeError(
            f"loop() got an unexpected keyword argument {option!r}" + (f": {hint}" if hint else "")
        )
    return LoopArm(evaluator=evaluator, controls=controls)


def _seeded(control: LoopControl, seed: int | None) -> LoopControl:
    """An `Adaptive` control as a copy learning in the task's store (and the eval's seed).

    The copy takes the eval's seed when the control has none; other controls are kept.
    """
    if not isinstance(control, Adaptive):
        return control
    # the kinds it left out stay out (a mapping of kinds adds to the built-in ones)
    left_out = {kind: None for kind in BUILTIN_KINDS if kind not in control.kinds}
    return Adaptive(
        {**left_out, **control.kinds},
        prior=control.prior,
        seed=seed if control.seed is None else control.seed,
        namespace=control.namespace,
        requirements=control.requirements,
        store="graph",
    )


def _agent(
    model: BaseChatModel, task: Task, attempts: Attempts, first: FirstAnswer | None = None
) -> Runnable[Any, Any]:
    """The arm's agent: the system message, then ``model`` (or, for the first call, ``first``)."""
    system = SystemMessage(system_prompt(task))

    def with_system(messages: list[AnyMessage]) -> list[AnyMessage]:
        attempts.sent.append(sent_kind(messages))
        return [system, *messages]

    if first is None:
        return RunnableLambda(with_system, name="instructions") | model
    taken: list[bool] = []

    async def answer(messages: list[AnyMessage], config: RunnableConfig) -> AIMessage:
        kind = sent_kind(messages)
        sent = with_system(messages)
        if kind == "first" and not taken:
            taken.append(True)  # before any await: concurrent first calls sample their own
            return await first(sent, config)
        return await model.ainvoke(sent, config)

    return RunnableLambda(answer, name="instructions")


def _failed_calls(
    records: Sequence[IterationRecord], seen: dict[tuple[int, int], dict[str, Any]], several: bool
) -> None:
    """An entry without an answer for each agent call that failed (``on_agent_error``)."""
    for record in records:
        calls = record.get("candidates") or [cast(Any, record)]
        for call in calls:
            number = call.get("candidate", 1) if record.get("candidates") else 1
            key = (record["iteration"], number or 1)
            if key not in seen and call.get("error"):
                made = entry("", iteration=key[0], candidate=key[1] if several else None)
                seen[key] = made | {"answer": None, "ok": False, "feedback": call["error"]}


def _best_so_far(
    seen: Mapping[tuple[int, int], Mapping[str, Any]], record: IterationRecord
) -> list[str]:
    """The answer after each first answer of a ``DiverseFirst`` loop: the best so far."""
    numbers = sorted(
        n for iteration, n in seen if iteration == 1 and seen[(1, n)]["answer"] is not None
    )
    steps: list[str] = []
    for count in range(1, len(numbers) + 1):
        pool = [
            (n, {"stop": bool(seen[(1, n)]["ok"]), "score": seen[(1, n)]["score"]})
            for n in numbers[:count]
        ]
        best = best_candidate(cast(Any, pool))
        steps.append(str(seen[(1, best)]["answer"]))
    chosen = record.get("candidate")
    if numbers and chosen is not None and (1, chosen) in seen:  # the loop's own choice stands
        steps[-1] = str(seen[(1, chosen)]["answer"])
    return steps
