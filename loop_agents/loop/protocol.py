"""The control protocol: `LoopControl`, its hooks, and what they are given.

A control overrides the hooks it needs; the loop calls only those, in `Stage` order. The
guide is ``docs/loop-control.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any, Literal, Protocol, TypeAlias, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from loop_agents.loop.agent_state import frozen, thawed
from loop_agents.loop.feedback import DEFAULT_FEEDBACK_FORMAT, FeedbackFormat
from loop_agents.loop.state import FeedbackSource, IterationRecord, LoopState
from loop_agents.runtime.steps import Call, Fanout, Measured, RetryPolicies
from loop_agents.runtime.usage import CallUsage

NO_USAGE = CallUsage()

CallName: TypeAlias = Literal["agent", "evaluator"]
"""The two calls of an iteration a control may set retries and time limits for."""


class Stage(IntEnum):
    """Where a control stands in the loop's order (the table: ``docs/loop-control.md``).

    Controls are sorted by stage, stably; a control of your own stands at ``CUSTOM``.
    """

    CRITERIA = 100
    HISTORY = 200
    CANDIDATES = 300
    AGENT_ERRORS = 400
    VERDICT = 500
    FEEDBACK = 600
    STRATEGY = 650
    STOP = 700
    CHOICE = 800
    CALLS = 900
    CUSTOM = 1000


@dataclass(frozen=True)
class LoopSpec:
    """The loop a control is bound to when the loop is built (`LoopControl.bind`).

    Attributes:
        agent: The loop's agent; ``None`` inside ``create_agent`` (`LoopMiddleware`).
        evaluator: The loop's evaluator.
        max_iterations: The loop's cap.
        host: ``"graph"`` (`create_loop_agent`) or ``"middleware"`` (`LoopMiddleware`).
    """

    agent: Any
    evaluator: Any
    max_iterations: int
    host: Literal["graph", "middleware"] = "graph"


class Pricing(Protocol):
    """What prices the loop's model calls (``Budgets(prices=...)``)."""

    def cost(self, usage: CallUsage) -> float | None:
        """The cost of ``usage``, or ``None`` when a call cannot be priced."""
        ...


@dataclass(frozen=True)
class Turn:
    """An iteration as it starts: what `LoopControl.shape_input` reads.

    Its fields are described in ``docs/loop-control.md`` (what the hooks are given).
    """

    iteration: int
    messages: list[AnyMessage]
    agent_state: Mapping[str, Any]
    config: RunnableConfig
    state: LoopState
    opened: dict[str, Any]
    feedback_format: FeedbackFormat = DEFAULT_FEEDBACK_FORMAT
    retry_kind: str = "repair"
    memory_kept: dict[str, Any] = field(default_factory=dict, repr=False)
    _config: Callable[[str], RunnableConfig] | None = field(default=None, repr=False)

    def config_for(self, role: str) -> RunnableConfig:
        """The run config for a model call a hook makes as ``role`` (``"compaction"``)."""
        return self.config if self._config is None else self._config(role)

    @property
    def new_loop(self) -> bool:
        """Whether this iteration starts a new loop (on a thread, a new request)."""
        return "init_messages" in self.opened

    @property
    def request(self) -> list[AnyMessage]:
        """The loop's request (``init_messages``)."""
        return list((self.opened if self.new_loop else self.state).get("init_messages") or [])

    @property
    def feedback(self) -> list[str]:
        """This loop's feedback so far, oldest first (the evaluator's raw texts)."""
        return [] if self.new_loop else list(self.state.get("feedback") or [])

    @property
    def records(self) -> list[IterationRecord]:
        """This loop's records so far."""
        return [] if self.new_loop else list(self.state.get("records") or [])

    def add_to_request(self, message: AnyMessage) -> None:
        """Make ``message`` part of a new loop's request, sent on every iteration.

        Raises:
            ValueError: the iteration does not start a loop (`new_loop` is false).
        """
        if not self.new_loop:
            raise ValueError(
                "add_to_request() adds to a new loop's request; this iteration continues a "
                "loop (check turn.new_loop first)"
            )
        opened = self.opened
        opened["init_messages"] = [*opened["init_messages"], message]
        opened["loop_init_ids"] = [*opened.get("loop_init_ids", []), message.id]
        opened["messages"] = [*opened.get("messages", []), message]

    @property
    def memory(self) -> dict[str, Any] | None:
        """What the history policy kept at the previous iteration of this loop."""
        if "memory" in self.memory_kept:
            return cast(dict[str, Any] | None, self.memory_kept["memory"])
        if self.new_loop:
            return None
        memory = self.state.get("history_memory")
        return memory if isinstance(memory, dict) else None

    def keep_memory(self, memory: dict[str, Any] | None) -> None:
        """Keep ``memory`` for the history policy's next iteration (saved in the state)."""
        self.memory_kept["memory"] = memory


@dataclass(frozen=True)
class AgentCall:
    """One call of the agent, as `LoopControl.around_agent` sees and changes it."""

    messages: list[AnyMessage]
    agent_state: Mapping[str, Any]
    iteration: int
    candidate: int | None = None
    agent: Any = None
    timeout: float | None = None

    def but(self, **changes: Any) -> AgentCall:
        """A copy with ``changes`` (``call.but(messages=[...])``)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Attempt:
    """What one agent call gave: its messages (its answer last), or the error it failed with."""

    produced: list[AnyMessage] | None
    error: str | None = None
    agent_state: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    usage: CallUsage = NO_USAGE
    candidate: int | None = None

    @property
    def answer(self) -> AIMessage | None:
        """The answer: the last AI message produced (``None`` for a failed call)."""
        return next((m for m in reversed(self.produced or []) if isinstance(m, AIMessage)), None)

    def stored(self) -> dict[str, Any]:
        """A plain form a checkpointer stores (a candidate task's result)."""
        return {
            "produced": self.produced,
            "error": self.error,
            "agent_state": frozen(dict(self.agent_state)),
            "seconds": self.seconds,
            "usage": self.usage.stored(),
            "candidate": self.candidate,
        }

    @classmethod
    def of_stored(cls, stored: Mapping[str, Any]) -> Attempt:
        """The attempt `stored` gave."""
        return cls(
            stored["produced"],
            stored["error"],
            thawed(dict(stored.get("agent_state") or {})),
            stored["seconds"],
            CallUsage.of_stored(stored["usage"]),
            stored.get("candidate"),
        )


@dataclass
class Verdict:
    """The evaluation of one attempt, as the loop reads it (changed by controls)."""

    stop: bool | None
    feedback: str | None
    score: float | None
    decided_by: list[str]
    feedback_from: FeedbackSource = "evaluator"
    seconds: float = 0.0
    usage: CallUsage = NO_USAGE


@dataclass
class Judged:
    """One attempt of the iteration and its verdict (``None``: the attempt failed)."""

    attempt: Attempt
    verdict: Verdict | None


@dataclass
class Outcome:
    """An iteration's outcome while `LoopControl.after_verdict` hooks work on it.

    ``stop``, ``feedback``, ``score`` and ``feedback_from`` read and write the selected
    attempt's verdict; every field is described in ``docs/loop-control.md``.
    """

    iteration: int
    judged: list[Judged]
    selected: int | None = None
    error: str | None = None
    failure_feedback: str | None = None
    counted: bool = True
    usage: dict[str, CallUsage] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    message: BaseMessage | None = None
    request: list[AnyMessage] = field(default_factory=list)
    records: Sequence[IterationRecord] = ()
    evaluator: str = ""
    _config: Callable[[str], RunnableConfig] | None = field(default=None, repr=False)
    _ends: Callable[[Outcome], bool] | None = field(default=None, repr=False)

    def config(self, role: str) -> RunnableConfig:
        """The run config for a model call a hook makes as ``role`` (e.g. ``"advisor"``)."""
        return {} if self._config is None else self._config(role)

    def ends_loop(self) -> bool:
        """Whether the loop would end with the outcome as it stands (acceptance, rules, cap)."""
        return True if self._ends is None else self._ends(self)

    @property
    def verdict(self) -> Verdict | None:
        """The selected attempt's verdict (``None`` when no attempt answered)."""
        return None if self.selected is None else self.judged[self.selected].verdict

    @property
    def attempt(self) -> Attempt | None:
        """The selected attempt (``None`` when no attempt answered)."""
        return None if self.selected is None else self.judged[self.selected].attempt

    @property
    def answer(self) -> AIMessage | None:
        """The iteration's answer."""
        return None if self.attempt is None else self.attempt.answer

    @property
    def stop(self) -> bool | None:
        """The selected verdict's ``stop`` (``False`` for a failed iteration)."""
        return False if self.verdict is None else self.verdict.stop

    @stop.setter
    def stop(self, value: bool | None) -> None:
        self._verdict().stop = value

    @property
    def feedback(self) -> str | None:
        """The selected verdict's feedback."""
        return None if self.verdict is None else self.verdict.feedback

    @feedback.setter
    def feedback(self, value: str | None) -> None:
        self._verdict().feedback = value

    @property
    def score(self) -> float | None:
        """The selected verdict's score."""
        return None if self.verdict is None else self.verdict.score

    @property
    def feedback_from(self) -> FeedbackSource:
        """Where the selected verdict's feedback came from."""
        return "agent_error" if self.verdict is None else self.verdict.feedback_from

    @feedback_from.setter
    def feedback_from(self, value: FeedbackSource) -> None:
        self._verdict().feedback_from = value

    def _verdict(self) -> Verdict:
        if self.verdict is None:
            raise ValueError(
                f"iteration {self.iteration} has no judged answer (every attempt failed); "
                f"check outcome.selected before changing its verdict"
            )
        return self.verdict

    def add_usage(self, role: str, usage: CallUsage) -> None:
        """Count the model calls of ``role`` (e.g. ``"advisor"``) into the iteration."""
        self.usage[role] = self.usage.get(role, NO_USAGE) + usage

    @property
    def feedback_text(self) -> str:
        """The feedback the agent reads next: the verdict's, or the failure's."""
        if self.selected is None:
            return self.failure_feedback or ""
        return self.feedback or ""

    @property
    def total_usage(self) -> CallUsage:
        """Every model call of the iteration: agents, evaluations, the rest."""
        verdicts = [j.verdict.usage for j in self.judged if j.verdict is not None]
        agents = [j.attempt.usage for j in self.judged]
        return sum([*agents, *verdicts, *self.usage.values()], NO_USAGE)


@dataclass(frozen=True)
class Progress:
    """Where the loop stands after an evaluation: what `LoopControl.stop_reason` reads."""

    iteration: int
    records: Sequence[IterationRecord]
    accepted: bool
    started_at: float | None
    out_of_steps: bool = False

    @property
    def latest(self) -> IterationRecord:
        """The latest iteration's record."""
        return self.records[-1]


class LoopControl:
    """A part of the loop: override the hooks you need, declare what the loop needs to know.

    The hooks and the declarations (``name``, ``stage``, ``claims``, ``calls_models``,
    ``fans_out`` and the methods below the hooks) are described in ``docs/loop-control.md``.
    """

    name: str = ""
    stage: int = Stage.CUSTOM
    claims: frozenset[str] = frozenset()
    calls_models: bool = False
    fans_out: bool = False

    def retry_kind(self, turn: Turn) -> str | None:
        """The attempt's kind, from a control that claims ``"retry_kind"`` (``None``: no say).

        Example:
            ```python
            def retry_kind(self, turn):
                return "fresh" if turn.iteration > 1 else None
            ```
        """
        return None

    def shape_input(
        self, messages: list[AnyMessage], turn: Turn
    ) -> Sequence[BaseMessage] | Generator[Call | Fanout, Measured[Any], Sequence[BaseMessage]]:
        """What the agent is sent: ``messages`` (the previous controls' choice) or others."""
        return messages

    def around_agent(self, call: AgentCall) -> Generator[Any, Any, Any]:
        """Around the agent call: yield the call to make, receive its `Attempt`, return one.

        Example:
            ```python
            def around_agent(self, call):
                attempt = yield call.but(timeout=60)
                return attempt
            ```
        """
        attempt = yield call
        return attempt

    def after_verdict(
        self, outcome: Outcome
    ) -> Outcome | Generator[Call | Fanout, Measured[Any], Outcome]:
        """After the verdicts of an iteration: change the `Outcome` and return it."""
        return outcome

    def stop_reason(self, progress: Progress) -> str | None:
        """Whether to stop: a stop reason, or ``None`` to go on."""
        return None

    def choose(self, records: Sequence[IterationRecord]) -> IterationRecord | None:
        """Which attempt wins when the loop ends: its record, or ``None`` to keep the choice."""
        return None

    def agent_calls_at_most(self, max_iterations: int) -> int:
        """The most agent calls a loop can make under this control (for the step limit)."""
        return max_iterations

    def bind(self, loop: LoopSpec) -> LoopControl:
        """The control for ``loop``, when the loop is built: ``self``, a bound copy, or an error."""
        return self

    def retry_policy(self, call: CallName) -> RetryPolicies | None:
        """The LangGraph retry policy of ``call`` (``"agent"`` or ``"evaluator"``), if any."""
        return None

    def time_limit(self, call: CallName) -> float | None:
        """The time limit, in seconds, of each ``call``, if any."""
        return None

    def pricing(self) -> Pricing | None:
        """What prices the loop's model calls (each record then carries its ``cost``)."""
        return None

    def feedback_format(self) -> FeedbackFormat | None:
        """How the loop puts feedback to the agent, if this control sets it."""
        return None

    def describe(self) -> str:
        """The control's name for messages: ``name``, or its class name."""
        return self.name or type(self).__name__


def check_controls(controls: object) -> list[LoopControl]:
    """``controls=`` as a list, checked: a sequence of `LoopControl` objects (or one)."""
    if isinstance(controls, LoopControl):
        controls = [controls]
    if isinstance(controls, str | bytes) or not isinstance(controls, Sequence):
        raise TypeError(
            f"controls must be a list of LoopControl objects (e.g. controls=[AnswerSelection("
            f"'best'), Plateau(2)]); got {type(controls).__name__} {controls!r:.60}"
        )
    wrong = [c for c in controls if not isinstance(c, LoopControl)]
    if wrong:
        hint = " (a class: call it, e.g. Stagnation())" if isinstance(wrong[0], type) else ""
        raise TypeError(
            f"controls must hold LoopControl objects (subclass "
            f"loop_agents.controls.LoopControl); got {type(wrong[0]).__name__} "
            f"{wrong[0]!r:.60}{hint}"
        )
    return list(controls)


def assemble_controls(controls: object, loop: LoopSpec) -> list[LoopControl]:
    """A loop's controls as it runs them: checked, bound to ``loop``, in stage order.

    Raises:
        TypeError: ``controls`` is not a list of `LoopControl` objects.
        ValueError: two controls claim the same part of the loop, or a control cannot
            work with ``loop`` (its `bind`).
    """
    given = check_controls(controls)
    claimed: dict[str, LoopControl] = {}
    for control in given:
        for claim in sorted(control.claims):
            other = claimed.get(claim)
            if other is not None:
                same = type(other) is type(control)
                raise ValueError(
                    f"controls {other.describe()!r} ({type(other).__name__}) and "
                    f"{control.describe()!r} ({type(control).__name__}) cannot work together: "
                    + (
                        f"a loop takes one {type(control).__name__}; keep one"
                        if same
                        else f"both take on {claim!r} in the loop; keep one of them"
                    )
                )
            claimed[claim] = control
    bound: list[LoopControl] = []
    for control in given:
        made = control.bind(loop)
        if not isinstance(made, LoopControl):
            raise TypeError(
                f"control {control.describe()!r}: bind returned {type(made).__name__} "
                f"{made!r:.60}; it must return the control (self, or a copy)"
            )
        bound.append(made)
    return sorted(bound, key=lambda control: int(control.stage))


def overrides(control: LoopControl, hook: str) -> bool:
    """Whether ``control`` overrides ``hook`` (the loop calls only overridden hooks)."""
    return getattr(type(control), hook) is not getattr(LoopControl, hook)
