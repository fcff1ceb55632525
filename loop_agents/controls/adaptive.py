"""Learn how to retry: `Adaptive` chooses the kind of each retry from the loop's verdicts.

Whether a loop pays depends on the model. A model that uses feedback improves when it is
shown its answer and the review (a *repair*, the seed's loop); a small model shown its
old answer tends to send it back, and does better when simply asked again (a *fresh*
sample) or asked again with what must hold (an *informed* fresh sample). No fixed
strategy wins everywhere, but the loop sees every verdict, so it can learn.

Before each attempt after the first, `Adaptive` chooses a kind of retry by Thompson
sampling: each kind has a Beta distribution of its chance to succeed, one draw per kind,
the highest draw wins. A retry *succeeds* when the evaluator accepts it or it beats the
loop's best score so far. The prior is weak and favours repair (Beta(2, 1) against
Beta(1, 2) for the others), so a model that repairs well keeps repairing, and one that
does not gives way to fresh samples after a few failed repairs.

What it learns lasts beyond one loop. It is kept in the loop's LangGraph store when the
loop has one (``create_loop_agent(..., store=InMemoryStore())``, a SQLite or PostgreSQL
store; ``create_agent(..., store=...)`` for `LoopMiddleware`), under the namespace
``("loop_agents", "adaptive", <model>, <evaluator>)``: the model as the answers name it
(``response_metadata["model_name"]``) and the evaluator's name (a period in either made
an underscore: LangGraph Server's store refuses periods). Without a store it is
kept in the `Adaptive` object, for the loops that share it in this process. Each judged
retry is one item whose key names the thread, the loop and the iteration, so a resumed
loop that judges a retry again writes the same item: every retry counts exactly once.

Each record says which kind its attempt was and why (``record["strategy"]``: the kind,
the estimates when it was chosen, whether it succeeded, and the kind chosen next); the
``evaluation_finished`` event carries it too.

The kinds are open: ``kinds={"hint": build}`` adds one, a function of a `Retry` (what the
attempt could be sent) returning the messages to send.

Example:
    ```python
    from langgraph.store.memory import InMemoryStore
    from loop_agents.controls import Adaptive

    store = InMemoryStore()
    loop = create_loop_agent(model, tests, 3, controls=[Adaptive(seed=7)], store=store)
    ```
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config, get_store
from langgraph.store.base import BaseStore

from loop_agents.controls.restart import Requirements, feedback_points, requirements_message
from loop_agents.loop.agents import describe
from loop_agents.loop.history.policies import loop_history, without_rejected_attempts
from loop_agents.loop.protocol import LoopControl, Outcome, Stage, Turn
from loop_agents.loop.state import IterationRecord
from loop_agents.runtime.steps import Call, Measured


@dataclass(frozen=True)
class Retry:
    """What an attempt after the first could be sent: a retry kind's input.

    Attributes:
        iteration: The attempt's iteration (2 or more).
        messages: What the controls before `Adaptive` chose: a repair's input (the
            answers so far and their feedback, as the history policy sends them).
        request: The loop's request.
        earlier: The thread's turns before the request, as the user saw them.
        pending: Messages added to the conversation since the latest feedback.
        feedback: The evaluator's feedback so far, oldest first (raw texts).
        requirements: The function that lists the points a feedback text names
            (``Adaptive(requirements=)``).

    """

    iteration: int
    messages: list[AnyMessage]
    request: list[AnyMessage]
    earlier: list[AnyMessage]
    pending: list[AnyMessage]
    feedback: list[str]
    requirements: Requirements = field(default=feedback_points, repr=False)

    @cached_property
    def points(self) -> list[str]:
        """What must hold: the points the feedback named, each once, in order.

        Computed when a kind first reads it (the informed kinds), not for every retry.
        """
        return _points(self.requirements, self.feedback)


RetryKind: TypeAlias = Callable[[Retry], Sequence[BaseMessage]]
"""A kind of retry: a function of a `Retry` returning the messages the attempt is sent."""


def repair(retry: Retry) -> list[AnyMessage]:
    """A repair: the answers so far with their feedback (the seed's loop)."""
    return list(retry.messages)


def fresh(retry: Retry) -> list[AnyMessage]:
    """A fresh sample: the request alone, no earlier answer of this loop."""
    return [*retry.earlier, *retry.request, *retry.pending]


def informed(retry: Retry) -> list[AnyMessage]:
    """An informed fresh sample: the request with what must hold, fenced as data."""
    return [*retry.earlier, *requirements_message(retry.points, retry.request), *retry.pending]


BUILTIN_KINDS: dict[str, RetryKind] = {"repair": repair, "fresh": fresh, "informed": informed}
"""The built-in kinds of retry, by name."""

DEFAULT_PRIOR = (1.0, 2.0)
"""Beta(1, 2) (mean 1/3), for every kind but repair: one pseudo failure."""

REPAIR_PRIOR = (2.0, 1.0)
"""Beta(2, 1) (mean 2/3): a weak lean towards repair, the seed's loop. Before any verdict
repair wins about three draws in four against the two other built-in kinds; after three
failed repairs and none of the others tried, the kinds stand level (mean 1/3)."""


class Estimate(TypedDict):
    """A kind's standing when a retry was chosen.

    Attributes:
        successes: Its retries that succeeded, so far.
        failures: Its retries that did not.
        mean: Its expected chance to succeed (the Beta distribution's mean).
        draw: The draw that Thompson sampling made for it.

    """

    successes: int
    failures: int
    mean: float
    draw: float


class Choice(TypedDict):
    """A choice of the next retry's kind, and why.

    Attributes:
        kind: The kind chosen.
        estimates: Every kind's `Estimate` at that moment.

    """

    kind: str
    estimates: dict[str, Estimate]


class Strategy(TypedDict, total=False):
    """What `Adaptive` writes in an iteration's record (``record["strategy"]``).

    Attributes:
        kind: The attempt's kind (``"first"`` for a loop's first attempt).
        estimates: The estimates when that kind was chosen (absent for the first).
        success: Whether the retry succeeded (absent for the first attempt).
        next: The kind chosen for the next attempt, when the loop goes on.
        namespace: Where the learning is kept (the store's namespace).
        loop: The loop's id in the learning's item keys.

    """

    kind: str
    estimates: dict[str, Estimate]
    success: bool
    next: Choice
    namespace: list[str]
    loop: str


class Adaptive(LoopControl):
    """Chooses each retry's kind (repair, fresh, informed) from earlier verdicts.

    See the module docstring. Pass it in ``controls=[...]`` of `create_loop_agent` or
    `LoopMiddleware`; the loop's store (``store=``) keeps what it learns across runs.

    Args:
        kinds: Kinds to add, by name (a `RetryKind`), or built-in ones to leave out
            (``{"informed": None}``). Default: repair, fresh and informed.
        prior: A kind's Beta prior as ``(successes + 1, failures + 1)``-style pseudo
            counts, e.g. ``{"fresh": (3, 1)}``; default `REPAIR_PRIOR` for repair and
            `DEFAULT_PRIOR` for the others.
        seed: Makes the choices reproducible: the same verdicts give the same choices.
        namespace: Where the learning is kept in the store; default
            ``("loop_agents", "adaptive", <model>, <evaluator>)``.
        requirements: The points one feedback text says must hold (the informed kind's
            list); default `loop_agents.controls.restart.feedback_points`.

    Raises:
        TypeError: a kind that is not a function, a prior that is not two numbers, a
            seed that is not an int, a namespace that is not a list of strings.
        ValueError: no kind left, a prior below or at 0.

    Example:
        ```python
        loop = create_loop_agent(model, tests, 4, controls=[Adaptive(kinds={"informed": None})])
        ```

    """

    name = "adaptive"
    stage = Stage.STRATEGY
    claims = frozenset({"retry_kind"})

    def __init__(
        self,
        kinds: Mapping[str, RetryKind | None] | None = None,
        *,
        prior: Mapping[str, tuple[float, float]] | None = None,
        seed: int | None = None,
        namespace: Sequence[str] | None = None,
        requirements: Requirements | None = None,
    ) -> None:
        """Check the options."""
        self.kinds = _checked_kinds(kinds)
        self.prior = _checked_prior(prior, self.kinds)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"Adaptive(seed=) must be an int or None; got {seed!r:.40}")
        self.seed = seed
        if namespace is not None and (
            isinstance(namespace, str)
            or not isinstance(namespace, Sequence)
            or not namespace
            or not all(isinstance(part, str) and part and "." not in part for part in namespace)
        ):
            raise TypeError(
                f"Adaptive(namespace=) must be a non-empty list of non-empty strings "
                f"without periods (a LangGraph store namespace: LangGraph Server's store "
                f"refuses a label with a period); got {namespace!r:.60}"
            )
        self.namespace = tuple(namespace) if namespace is not None else None
        if requirements is not None and not callable(requirements):
            raise TypeError(
                f"Adaptive(requirements=) must be a function of a feedback text; got "
                f"{type(requirements).__name__} {requirements!r:.40}"
            )
        self.requirements: Requirements = requirements or feedback_points
        self._memory = _Memory()

    # -- what the agent is sent -----------------------------------------------------------

    def shape_input(self, messages: list[AnyMessage], turn: Turn) -> list[AnyMessage]:
        """Build the attempt's input as the kind chosen after the previous verdict."""
        records = turn.records
        if turn.new_loop or turn.iteration < 2 or not records:
            return messages
        chosen = (records[-1].get("strategy") or {}).get("next")
        if not chosen or chosen["kind"] not in self.kinds:
            return messages
        build = self.kinds[chosen["kind"]]
        if build is repair:  # what the controls before chose: nothing to rebuild
            return messages
        view = loop_history(turn.state, turn.opened, turn.messages)
        retry = Retry(
            iteration=turn.iteration,
            messages=messages,
            request=list(view["request"]),
            earlier=without_rejected_attempts(view["earlier"]),
            pending=list(view["pending"]),
            feedback=list(view["feedback"]),
            requirements=self.requirements,
        )
        built = build(retry)
        if isinstance(built, str) or not isinstance(built, Sequence):
            raise TypeError(
                f"control 'adaptive': kind {chosen['kind']!r} ({describe(build)}) returned "
                f"{type(built).__name__} {built!r:.60}; it must return a list of messages"
            )
        return list(built)  # type: ignore[arg-type]

    # -- learning from the verdict --------------------------------------------------------

    def after_verdict(self, outcome: Outcome) -> Outcome | Generator[Call, Measured[Any], Outcome]:
        """Count the retry's verdict, then choose the next retry's kind (when there is one).

        In the object's own memory (no store) this is plain work, no call; with a store,
        its reads and writes are calls the loop makes with ``invoke`` or ``ainvoke``.
        """
        earlier = list(outcome.records)
        previous: Strategy = dict(earlier[-1].get("strategy") or {}) if earlier else {}  # type: ignore[assignment]
        chose = previous.get("next")
        strategy: Strategy = (
            {"kind": "first"}
            if chose is None
            else {
                "kind": chose["kind"],
                "estimates": chose["estimates"],
            }
        )
        loop_id = previous.get("loop") or uuid.uuid4().hex
        namespace = tuple(previous.get("namespace") or self._namespace(outcome))
        strategy["namespace"] = list(namespace)
        strategy["loop"] = loop_id
        written: dict[str, Any] | None = None
        if chose is not None:
            strategy["success"] = _succeeded(outcome, earlier)
            written = {
                "key": f"{_thread_of()}:{loop_id}:{outcome.iteration}",
                "value": {"kind": chose["kind"], "success": strategy["success"]},
            }
        outcome.extra["strategy"] = strategy
        choosing = not outcome.ends_loop()
        if written is None and not choosing:
            return outcome
        store = _store_of()
        if store is None:  # the object's own memory: no I/O, nothing to make a call of
            counts = self._memory.learn(namespace, written)
            if choosing:
                strategy["next"] = self._choose(counts, namespace, outcome.iteration)
            return outcome
        return self._learned(store, outcome, strategy, written, choosing)

    def _learned(
        self,
        store: BaseStore,
        outcome: Outcome,
        strategy: Strategy,
        written: dict[str, Any] | None,
        choosing: bool,
    ) -> Generator[Call, Measured[Any], Outcome]:
        namespace = tuple(strategy["namespace"])
        request = {"namespace": namespace, "write": written, "read": choosing}
        measured = yield Call(
            "adaptive",
            lambda given, config: _learn(store, given),
            lambda given, config: _alearn(store, given),
            request,
            RunnableConfig(),
        )
        if choosing:
            strategy["next"] = self._choose(measured.value, namespace, outcome.iteration)
        return outcome

    def _namespace(self, outcome: Outcome) -> tuple[str, ...]:
        if self.namespace is not None:
            return self.namespace
        evaluator = outcome.evaluator or "evaluator"
        return ("loop_agents", "adaptive", _label(_model_of(outcome)), _label(evaluator))

    def _choose(
        self, counts: Mapping[str, Sequence[int]], namespace: Sequence[str], iteration: int
    ) -> Choice:
        """Thompson sampling: one draw per kind from its Beta posterior; the highest wins."""
        if self.seed is None:
            rng = random.Random()
        else:
            tally = ";".join(f"{k}={list(counts.get(k, (0, 0)))}" for k in sorted(self.kinds))
            rng = random.Random(f"{self.seed}|{'/'.join(namespace)}|{iteration}|{tally}")
        estimates: dict[str, Estimate] = {}
        for kind in self.kinds:
            successes, failures = [*counts.get(kind, (0, 0)), 0, 0][:2]
            alpha, beta = self.prior[kind]
            alpha, beta = alpha + successes, beta + failures
            estimates[kind] = {
                "successes": successes,
                "failures": failures,
                "mean": round(alpha / (alpha + beta), 4),
                "draw": round(rng.betavariate(alpha, beta), 4),
            }
        best = max(self.kinds, key=lambda kind: estimates[kind]["draw"])
        return {"kind": best, "estimates": estimates}


class Repair(LoopControl):
    """Every retry is a repair: the answer in view with its feedback (seed 001's loop).

    A loop without a control that chooses the kind of retry (`Adaptive`, `Restart`) learns
    it (`Adaptive`); this control keeps the plain loop instead.

    Example:
        ```python
        loop = create_loop_agent(agent, judge, 3, controls=[Repair()])
        ```

    """

    name = "repair"
    stage = Stage.STRATEGY
    claims = frozenset({"retry_kind"})


DEFAULT_SEED = 0
"""The seed of the `Adaptive` a loop gets by default: its choices are reproducible."""


def with_a_strategy(controls: Sequence[LoopControl]) -> list[LoopControl]:
    """``controls``, with a default `Adaptive` when none chooses the kind of retry.

    Example:
        ```python
        [type(c).__name__ for c in with_a_strategy([Plateau(2)])]  # ['Plateau', 'Adaptive']
        assert with_a_strategy([Repair()])[0].name == "repair"
        ```

    """
    if any("retry_kind" in control.claims for control in controls):
        return list(controls)
    return [*controls, Adaptive(seed=DEFAULT_SEED)]


# -- the learning's store -------------------------------------------------------------------

SEARCH_PAGE = 500
"""Items read per store search while counting the retries of a namespace."""


def _learn(store: BaseStore, request: Mapping[str, Any]) -> dict[str, list[int]]:
    """Write the judged retry (if any), then count every kind's successes and failures."""
    namespace = request["namespace"]
    written = request["write"]
    if written is not None:
        store.put(namespace, written["key"], written["value"], index=False)
    if not request["read"]:
        return {}
    items: list[Any] = []
    while True:
        page = store.search(namespace, limit=SEARCH_PAGE, offset=len(items))
        items.extend(page)
        if len(page) < SEARCH_PAGE:
            return _counts(items)


async def _alearn(store: BaseStore, request: Mapping[str, Any]) -> dict[str, list[int]]:
    namespace = request["namespace"]
    written = request["write"]
    if written is not None:
        await store.aput(namespace, written["key"], written["value"], index=False)
    if not request["read"]:
        return {}
    items: list[Any] = []
    while True:
        page = await store.asearch(namespace, limit=SEARCH_PAGE, offset=len(items))
        items.extend(page)
        if len(page) < SEARCH_PAGE:
            return _counts(items)


MEMORY_KEYS = 10_000
"""Judged retries per namespace whose keys an `Adaptive` without a store remembers."""


class _Memory:
    """What an `Adaptive` learns without a store: each namespace's retries and tallies.

    The keys of the latest `MEMORY_KEYS` retries of a namespace are kept, so one judged
    again (a resumed loop) counts once, and a process that runs loops for months keeps a
    bounded memory; the tallies are kept up to date, so choosing never re-counts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, ...], OrderedDict[str, None]] = {}
        self._tallies: dict[tuple[str, ...], dict[str, list[int]]] = {}

    def learn(
        self, namespace: tuple[str, ...], written: Mapping[str, Any] | None
    ) -> dict[str, list[int]]:
        """Count ``written`` (a judged retry) once; return the namespace's tallies."""
        with self._lock:
            seen = self._seen.setdefault(namespace, OrderedDict())
            tallies = self._tallies.setdefault(namespace, {})
            if written is not None and written["key"] not in seen:
                kind, success = written["value"]["kind"], bool(written["value"]["success"])
                seen[written["key"]] = None
                if len(seen) > MEMORY_KEYS:
                    seen.popitem(last=False)
                tallies.setdefault(kind, [0, 0])[0 if success else 1] += 1
            return {kind: list(counts) for kind, counts in tallies.items()}


def _counts(items: Sequence[Any]) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}
    for item in items:
        value = item.value
        if not isinstance(value, Mapping) or not isinstance(value.get("kind"), str):
            continue  # not one of ours
        tally = counts.setdefault(value["kind"], [0, 0])
        tally[0 if value.get("success") is True else 1] += 1
    return counts


def _store_of() -> BaseStore | None:
    """The running loop's LangGraph store, or ``None`` (no store, or not in a graph)."""
    try:
        return get_store()
    except (RuntimeError, KeyError, AttributeError):
        return None


def _thread_of() -> str:
    """The running thread and namespace, for the retries' item keys."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return "-"
    thread = configurable.get("thread_id")
    namespace = configurable.get("checkpoint_ns") or ""
    return f"{thread if thread is not None else '-'}/{namespace}"


# -- reading verdicts and answers -----------------------------------------------------------


def _succeeded(outcome: Outcome, earlier: Sequence[IterationRecord]) -> bool:
    """Whether the iteration's retry succeeded: accepted, or beat the best score so far."""
    if outcome.selected is None:
        return False
    if outcome.stop:
        return True
    score = outcome.score
    scores = [r["score"] for r in earlier if r["score"] is not None]
    return score is not None and (not scores or score > max(scores))


def _model_of(outcome: Outcome) -> str:
    """The model as the iteration's answers name it (``"unknown model"`` when they do not)."""
    for judged in outcome.judged:
        answer = judged.attempt.answer
        if isinstance(answer, AIMessage):
            metadata = answer.response_metadata or {}
            name = metadata.get("model_name") or metadata.get("model")
            if isinstance(name, str) and name.strip():
                return name.strip()
    return "unknown model"


def _label(name: str) -> str:
    """``name`` as a store namespace label: a period becomes an underscore.

    LangGraph Server's store refuses a label with a period (``gpt-5.4-mini`` is kept
    under ``gpt-5_4-mini``).
    """
    return name.replace(".", "_")


def _points(requirements: Requirements, feedback: Sequence[str]) -> list[str]:
    points: dict[str, None] = {}
    for text in feedback:
        found = requirements(text)
        if isinstance(found, str) or not isinstance(found, Sequence):
            raise TypeError(
                f"control 'adaptive': requirements {describe(requirements)!r} returned "
                f"{type(found).__name__} {found!r:.40}; it must return a list of str"
            )
        for point in found:
            if isinstance(point, str) and point.strip():
                points[point.strip()] = None
    return list(points) or ["(the earlier answers failed without a stated reason)"]


def _checked_kinds(kinds: Mapping[str, RetryKind | None] | None) -> dict[str, RetryKind]:
    chosen: dict[str, RetryKind] = dict(BUILTIN_KINDS)
    if kinds is None:
        return chosen
    if not isinstance(kinds, Mapping):
        raise TypeError(
            f"Adaptive(kinds=) must be a mapping of names to functions (a RetryKind) or "
            f"None to leave a built-in kind out; got {type(kinds).__name__} {kinds!r:.60}"
        )
    for name, build in kinds.items():
        if not isinstance(name, str) or not name.strip():
            raise TypeError(
                f"Adaptive(kinds=): a kind's name must be a non-empty str; got {name!r:.40}"
            )
        if build is None:
            chosen.pop(name, None)
        elif not callable(build):
            raise TypeError(
                f"Adaptive(kinds=): kind {name!r} must be a function of a Retry returning "
                f"messages, or None to leave it out; got {type(build).__name__} {build!r:.40}"
            )
        else:
            chosen[name] = build
    if not chosen:
        raise ValueError("Adaptive(kinds=) left no kind of retry to choose from; keep at least one")
    return chosen


def _checked_prior(
    prior: Mapping[str, tuple[float, float]] | None, kinds: Mapping[str, RetryKind]
) -> dict[str, tuple[float, float]]:
    chosen = {kind: REPAIR_PRIOR if kind == "repair" else DEFAULT_PRIOR for kind in kinds}
    if prior is None:
        return chosen
    if not isinstance(prior, Mapping):
        raise TypeError(
            f"Adaptive(prior=) must map kinds to (alpha, beta) pairs, e.g. {{'fresh': (3, 1)}}; "
            f"got {type(prior).__name__} {prior!r:.60}"
        )
    for kind, pair in prior.items():
        if kind not in kinds:
            raise ValueError(
                f"Adaptive(prior=) names {kind!r}, which is not a kind; the kinds are "
                f"{', '.join(kinds)}"
            )
        if (
            not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in pair)
        ):
            raise TypeError(
                f"Adaptive(prior=): {kind!r} must be two numbers (alpha, beta); got {pair!r:.40}"
            )
        if not all(0 < float(x) < float("inf") for x in pair):
            raise ValueError(
                f"Adaptive(prior=): {kind!r} must be two finite numbers above 0; got {pair!r:.40}"
            )
        chosen[kind] = (float(pair[0]), float(pair[1]))
    return chosen


__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_SEED",
    "Adaptive",
    "Choice",
    "Estimate",
    "Repair",
    "Retry",
    "RetryKind",
    "Strategy",
    "fresh",
    "informed",
    "repair",
    "with_a_strategy",
]
