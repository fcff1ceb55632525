"""Learn how to retry: `Adaptive` chooses the kind of each retry from the loop's verdicts.

Thompson sampling over repair, fresh and informed retries, from how each fared in the latest
loops (in memory or in a LangGraph store). The user guide: ``docs/strategies.md``.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Generator, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple, TypeAlias, TypedDict, cast

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config, get_store
from langgraph.errors import GraphBubbleUp
from langgraph.store.base import BaseStore

from loop_agents.controls.options import check_function
from loop_agents.controls.restart import (
    BUILTIN_KINDS,
    Requirements,
    Retry,
    RetryKind,
    feedback_points,
    fresh_start,
    repair,
)
from loop_agents.loop.agents import describe
from loop_agents.loop.protocol import LoopControl, Outcome, Stage, Turn
from loop_agents.runtime.steps import Call, Measured
from loop_agents.runtime.usage import message_model

DEFAULT_PRIOR = (1.0, 2.0)
"""Beta(1, 2) (mean 1/3), for every kind but repair: one pseudo failure."""

REPAIR_PRIOR = (2.0, 1.0)
"""Beta(2, 1) (mean 2/3): a weak lean towards repair, the seed's loop."""

MAX_PSEUDO_COUNT = 1e6
"""The largest pseudo count of a prior (a huge one makes a Beta draw hang)."""

WINDOW = 200
"""The most loops whose retries a choice counts: the latest (in a store, 100 to 200)."""

GENERATION = WINDOW // 2
"""Loops per generation of a store's items; a choice reads the latest two generations."""

Tallies: TypeAlias = dict[str, list[int]]
"""Successes and failures by kind: ``{"fresh": [2, 5]}``."""


class Estimate(TypedDict):
    """A kind's standing when a retry was chosen: its counts, mean and draw."""

    successes: int
    failures: int
    mean: float
    draw: float


class Choice(TypedDict):
    """A choice of the next retry's ``kind``, with every kind's `Estimate`."""

    kind: str
    estimates: dict[str, Estimate]


class Strategy(TypedDict, total=False):
    """What `Adaptive` writes in a record (``record["strategy"]``; see docs/strategies.md)."""

    kind: str
    estimates: dict[str, Estimate]
    success: bool
    next: Choice
    namespace: list[str]
    loop: str
    tallies: Tallies
    best: float | None
    generation: int
    store_error: str


class Adaptive(LoopControl):
    """Chooses each retry's kind (repair, fresh, informed) from earlier verdicts.

    A retry *succeeds* when the evaluator accepts it or it beats the loop's best score;
    each kind's Beta posterior counts the latest `WINDOW` loops; the highest draw wins.

    Args:
        kinds: Kinds to add by name (a `RetryKind`), or built-in ones to leave out (``None``).
        prior: Each kind's Beta pseudo counts ``(alpha, beta)``, finite, above 0 and at most
            `MAX_PSEUDO_COUNT` (default `REPAIR_PRIOR` for repair, else `DEFAULT_PRIOR`).
        seed: Makes the choices reproducible: the same verdicts give the same choices.
        namespace: Where the learning is kept (default ``("loop_agents", "adaptive",
            <model>, <evaluator>)``).
        requirements: The points one feedback text says must hold (`feedback_points`).
        store: ``None`` (this object's memory), ``"graph"`` (the running graph's store)
            or a ``BaseStore``; one that fails never ends the loop (it learns in memory,
            warns once and records ``strategy["store_error"]``).

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
        store: BaseStore | Literal["graph"] | None = None,
    ) -> None:
        self.kinds = _checked_kinds(kinds)
        self.prior = _checked_prior(prior, self.kinds)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"Adaptive(seed=) must be an int or None; got {seed!r:.40}")
        self.seed = seed
        self.namespace = None if namespace is None else _checked_namespace(namespace)
        self.requirements = check_function("Adaptive(requirements=)", requirements, feedback_points)
        if store is not None and store != "graph" and not isinstance(store, BaseStore):
            raise TypeError(
                f"Adaptive(store=) must be None (this object's memory), 'graph' (the running "
                f"graph's store) or a LangGraph BaseStore; got {type(store).__name__} {store!r:.60}"
            )
        self._store = store  # private: an eval tells arms apart by their public attributes
        self._memory: dict[tuple[str, ...], OrderedDict[str, Tallies]] = {}
        self._lock = threading.Lock()

    def retry_kind(self, turn: Turn) -> str | None:
        """The kind chosen after the previous verdict (``None`` for a loop's first attempt)."""
        records = turn.records
        chosen = (records[-1].get("strategy") or {}).get("next") if records else None
        return self._sendable(chosen["kind"]) if chosen else None

    def shape_input(self, messages: list[AnyMessage], turn: Turn) -> list[AnyMessage]:
        """Build the attempt's input as the kind chosen after the previous verdict."""
        kind = self.retry_kind(turn)
        build = self.kinds.get(kind or "repair", repair)
        if build is repair:  # what the history policy chose
            return messages
        parts = fresh_start(turn)  # the request, the earlier turns, the pending messages
        built = build(Retry(turn.iteration, messages, *parts, turn.feedback, self.requirements))
        if isinstance(built, str) or not isinstance(built, Sequence):
            raise TypeError(
                f"control 'adaptive': kind {kind!r} ({describe(build)}) returned "
                f"{type(built).__name__} {built!r:.60}; it must return a list of messages"
            )
        return list(built)  # type: ignore[arg-type]

    def _sendable(self, kind: str) -> str:
        """``kind``, or ``"repair"`` (what is sent then) when this control has no such kind."""
        return kind if kind in self.kinds else "repair"

    def after_verdict(self, outcome: Outcome) -> Outcome | Generator[Call, Measured[Any], Outcome]:
        """Count the verdict into the loop's tallies; choose the next retry's kind."""
        records = outcome.records
        previous = cast(Strategy, dict(records[-1].get("strategy") or {}) if records else {})
        chose = previous.get("next")
        strategy: Strategy = {"kind": "first" if chose is None else self._sendable(chose["kind"])}
        if chose is not None:
            strategy["estimates"] = chose["estimates"]
        strategy["namespace"] = list(previous.get("namespace") or self._namespace(outcome))
        strategy["loop"] = previous.get("loop") or uuid.uuid4().hex
        tallies = {kind: list(pair) for kind, pair in (previous.get("tallies") or {}).items()}
        scores = (score for r in records if (score := r["score"]) is not None)  # older records
        best = previous["best"] if "best" in previous else max(scores, default=None)
        score = outcome.score  # None for an iteration without an answer
        beats = score is not None and (best is None or score > best)
        if chose is not None:  # a retry succeeds when accepted or when it beats the best score
            strategy["success"] = bool(outcome.stop) or beats
            tallies.setdefault(strategy["kind"], [0, 0])[0 if strategy["success"] else 1] += 1
        strategy["best"] = score if beats else best
        strategy["tallies"] = tallies
        for carried in ("generation", "store_error"):
            if carried in previous:
                strategy[carried] = previous[carried]
        outcome.extra["strategy"] = strategy
        choosing = not outcome.ends_loop()
        if chose is None and not choosing:
            return outcome
        key = _label(f"{_thread_of()}:{strategy['loop']}")
        wrote = tallies if chose is not None else None
        step = _Step(tuple(strategy["namespace"]), key, wrote, choosing, strategy.get("generation"))
        return self._learned(outcome, strategy, step)

    def _learned(
        self, outcome: Outcome, strategy: Strategy, step: _Step
    ) -> Generator[Call, Measured[Any], Outcome]:
        # learn in the store (one call) or in memory (no call), then choose
        store = self._store if "store_error" not in strategy else None
        if store == "graph":
            try:
                store = get_store()
            except (RuntimeError, KeyError, AttributeError):
                store = None
            if store is None:
                _failed(strategy, "the running graph has no store (give it one: store=...)")
        result: dict[str, Any] = {}
        if isinstance(store, BaseStore):
            learn, alearn = partial(_learn, store), partial(_alearn, store)
            result = (yield Call("adaptive", learn, alearn, step, RunnableConfig())).value
            if "error" in result:
                _failed(strategy, result["error"])
            else:
                strategy["generation"] = result["generation"]
        if store is None or "error" in result:  # no store, or it failed: the object's memory
            result["counts"] = self._remember(step)
        if step.read:
            strategy["next"] = self._choose(result["counts"], step.namespace, outcome.iteration)
        return outcome

    def _remember(self, step: _Step) -> Tallies:
        """Keep the step's tallies in memory (the latest `WINDOW` loops); count them."""
        with self._lock:
            loops = self._memory.setdefault(step.namespace, OrderedDict())
            if step.tallies is not None:
                loops[step.key] = step.tallies
                loops.move_to_end(step.key)
                if len(loops) > WINDOW:
                    loops.popitem(last=False)
            return _summed(loops.items(), step)

    def _namespace(self, outcome: Outcome) -> tuple[str, ...]:
        if self.namespace is not None:
            return self.namespace
        evaluator = outcome.evaluator or "evaluator"
        return ("loop_agents", "adaptive", _label(_model_of(outcome)), _label(evaluator))

    def _choose(self, counts: Tallies, namespace: Sequence[str], iteration: int) -> Choice:
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
    """Deprecated: every retry is a repair by default. Remove ``Repair()``; it goes in 0.4."""

    claims = frozenset({"retry_kind"})

    def __init__(self) -> None:
        warnings.warn(
            "Repair() is the default now: remove it from controls=[...]; it goes in "
            "loop_agents 0.4",
            DeprecationWarning,
            stacklevel=2,
        )


# -- the store: one item per loop, ``(*namespace, "loops", <generation>) / <key>``; the item
# ``head`` names the latest generation. A choice reads at most `WINDOW` items (two
# generations), however many loops came before (docs/strategies.md, "The window").


class _Step(NamedTuple):
    """One verdict's learning: the loop's entry, whether to read, the loop's generation."""

    namespace: tuple[str, ...]
    key: str
    tallies: Tallies | None  # None: nothing judged to write (a loop's first verdict)
    read: bool
    generation: int | None  # the loop's, once it wrote to a store


def _plan(step: _Step) -> Generator[tuple[str, tuple[Any, ...]], Any, dict[str, Any]]:
    """The store calls of one verdict, as ``(method, args)``; returns the counts."""
    head = yield ("get", (step.namespace, "head"))
    latest = head.value.get("generation") if head is not None else 0
    latest = latest if type(latest) is int and latest >= 0 else 0
    mine = latest if step.generation is None else step.generation
    if step.tallies is not None:
        yield ("put", ((*step.namespace, "loops", str(mine)), step.key, {"tallies": step.tallies}))
    if not step.read:
        return {"generation": mine}
    entries: list[tuple[str, Any]] = []
    for number in range(latest, max(latest - 2, -1), -1):
        found = yield ("search", ((*step.namespace, "loops", str(number)),))
        entries += [(item.key, item.value.get("tallies")) for item in found]
        if number == latest and len(found) >= GENERATION:
            yield ("put", (step.namespace, "head", {"generation": latest + 1}))
    return {"generation": mine, "counts": _summed(entries, step)}


_OPTIONS: dict[str, Any] = {"get": {}, "put": {"index": False}, "search": {"limit": GENERATION}}


def _learn(store: BaseStore, step: _Step, config: RunnableConfig) -> dict[str, Any]:
    """Run `_plan` on the store's sync methods; a failure is ``{"error": ...}``."""
    plan, reply = _plan(step), None
    try:
        while True:
            method, args = plan.send(reply)
            reply = getattr(store, method)(*args, **_OPTIONS[method])
    except StopIteration as done:
        return cast(dict[str, Any], done.value)
    except GraphBubbleUp:
        raise
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


async def _alearn(store: BaseStore, step: _Step, config: RunnableConfig) -> dict[str, Any]:
    """`_learn` on the async methods (in a thread on the sync ones where they are missing)."""
    plan, reply = _plan(step), None
    try:
        while True:
            method, args = plan.send(reply)
            try:
                reply = await getattr(store, f"a{method}")(*args, **_OPTIONS[method])
            except NotImplementedError:  # SqliteStore has no async methods: its sync ones
                reply = await asyncio.to_thread(getattr(store, method), *args, **_OPTIONS[method])
    except StopIteration as done:
        return cast(dict[str, Any], done.value)
    except GraphBubbleUp:
        raise
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def _failed(strategy: Strategy, error: str) -> None:
    """Record and say why the store failed (once a loop: its later verdicts skip it)."""
    strategy["store_error"] = error
    warning = f"Adaptive: the store failed ({error:.200}); the loop goes on, learning in memory"
    warnings.warn(warning, RuntimeWarning, stacklevel=2)


def _summed(entries: Iterable[tuple[str, object]], step: _Step) -> Tallies:
    """The tallies of ``entries`` (one per loop), the step's loop as it is now."""
    loops: dict[str, object] = {}
    for key, tallies in entries:
        loops.setdefault(key, tallies)  # a loop found in two generations (a resume): once
    loops[step.key] = step.tallies
    counts: Tallies = {}
    for tallies in loops.values():
        for kind, pair in tallies.items() if isinstance(tallies, Mapping) else ():
            if isinstance(pair, list) and len(pair) == 2 and all(type(n) is int for n in pair):
                total = counts.setdefault(kind, [0, 0])
                total[0], total[1] = total[0] + max(pair[0], 0), total[1] + max(pair[1], 0)
    return counts


def _thread_of() -> str:
    """The running thread and graph (not its node's task: that changes every iteration)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return "-"
    graph = str(configurable.get("checkpoint_ns") or "").rpartition("|")[0]
    return f"{configurable.get('thread_id', '-')}/{graph}"


def _model_of(outcome: Outcome) -> str:
    """The model as the iteration's answers name it (``"unknown model"`` when they do not)."""
    answers = (judged.attempt.answer for judged in outcome.judged)
    names = (message_model(answer).strip() for answer in answers if answer is not None)
    return next((name for name in names if name), "unknown model")


def _unsafe(character: str) -> bool:
    """Whether a store may refuse ``character`` in a label (period, NUL, control, surrogate)."""
    return character == "." or character < " " or "\ud800" <= character <= "\udfff"


def _label(name: str) -> str:
    """``name`` as a label every store takes (``gpt-5.4``: ``gpt-5%2E4``), one name one label."""
    return "".join(f"%{ord(c):02X}" if c == "%" or _unsafe(c) else c for c in name)


def _checked_namespace(namespace: object) -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence) or not namespace:
        raise TypeError(
            f"Adaptive(namespace=) must be a non-empty list of str; got {namespace!r:.50}"
        )
    for position, label in enumerate(namespace):
        broken = (
            "is not a str" if not isinstance(label, str)
            else "is empty" if not label
            else "holds a period" if "." in label
            else "holds a NUL, control character or lone surrogate" if any(map(_unsafe, label))
            else "is 'langgraph' as the first label" if position == 0 and label == "langgraph"
            else ""
        )  # fmt: skip
        if broken:
            raise (ValueError if isinstance(label, str) else TypeError)(
                f"Adaptive(namespace=): label {label!r:.40} {broken}; LangGraph stores take "
                f"labels of printable text without periods, the first not 'langgraph'"
            )
    return tuple(namespace)


def _mapping(value: object, option: str, what: str) -> Mapping[Any, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(
            f"Adaptive({option}=) must map {what}; got {type(value).__name__} {value!r:.60}"
        )
    return value or {}


def _checked_kinds(kinds: object) -> dict[str, RetryKind]:
    chosen: dict[str, RetryKind] = dict(BUILTIN_KINDS)
    for name, build in _mapping(kinds, "kinds", "names to functions of a Retry, or None").items():
        if not isinstance(name, str) or not name.strip() or not (build is None or callable(build)):
            raise TypeError(
                f"Adaptive(kinds=): kind {name!r:.40} must be named by a non-empty str and be a "
                f"function of a Retry returning messages, or None to leave it out; got "
                f"{type(build).__name__} {build!r:.40}"
            )
        if build is None:
            chosen.pop(name, None)
        else:
            chosen[name] = build
    if not chosen:
        raise ValueError("Adaptive(kinds=) left no kind of retry to choose from; keep at least one")
    return chosen


def _checked_prior(prior: object, kinds: Mapping[str, RetryKind]) -> dict[str, tuple[float, float]]:
    chosen = {kind: REPAIR_PRIOR if kind == "repair" else DEFAULT_PRIOR for kind in kinds}
    for kind, pair in _mapping(prior, "prior", "kinds to pairs (alpha, beta)").items():
        if kind not in kinds:
            raise ValueError(
                f"Adaptive(prior=): {kind!r} is not a kind; the kinds: {', '.join(kinds)}"
            )
        numbers = isinstance(pair, Sequence) and {type(x) for x in pair} <= {int, float}
        if not numbers or len(pair) != 2:
            raise TypeError(
                f"Adaptive(prior=): {kind!r} must be two numbers (alpha, beta); got {pair!r:.40}"
            )
        if not all(math.isfinite(x) and 0 < x <= MAX_PSEUDO_COUNT for x in pair):
            raise ValueError(
                f"Adaptive(prior=): {kind!r} must be two finite numbers above 0 and at most "
                f"{MAX_PSEUDO_COUNT:g} (MAX_PSEUDO_COUNT); got {pair!r:.40}"
            )
        chosen[kind] = (float(pair[0]), float(pair[1]))
    return chosen
