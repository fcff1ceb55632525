"""Agents of your own as arms: a factory ``(task, model, settings) -> agent``.

The factory is called once per task with the task, the eval's chat model (at the arm's
temperature) and the `ArmSettings` (K is ``settings.iterations``), and returns a runnable
(a `create_loop_agent` graph, a ``create_agent`` graph, a chat model...). The agent is sent
`task_messages(task)`; its attempts are read from its output where they can be
(`read_output`: a loop's records, or feedback turns), else it is *opaque* (its final
answer only). docs/eval.md ("Arms of your own") says more.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import merge_configs
from langgraph.pregel import Pregel
from langgraph.pregel.protocol import PregelProtocol

from loop_agents.loop.agents import describe
from loop_agents.loop.feedback import feedback_text, is_feedback
from loop_agents_evals.arm_protocol import ArmRun, EvalArm, Ran, describe_value
from loop_agents_evals.arm_specs import check_factory
from loop_agents_evals.grading import SENT_KINDS, strategy_entry, task_messages
from loop_agents_evals.sampling import answer_text, was_cut_off
from loop_agents_evals.settings import ArmSettings
from loop_agents_evals.tasks import Task

__all__ = [
    "RECORD_KEYS",
    "ArmFactory",
    "ArmFactoryError",
    "FactoryArm",
    "ReadOutput",
    "read_output",
]

ArmFactory: TypeAlias = Callable[[Task, BaseChatModel, ArmSettings], Any]
"""``(task, model, settings) -> agent`` (or an awaitable of one)."""


class ArmFactoryError(TypeError):
    """An arm factory returned something that is not an agent."""


RECORD_KEYS = ("records", "loop_records")
"""Where a loop's records are in an output (`create_loop_agent`'s, `LoopMiddleware`'s)."""


@dataclass
class ReadOutput:
    """What an agent's output says: its answer, the answer after each step, its transcript."""

    answer: str
    steps: list[str] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    opaque: bool = False

    @property
    def cut_off(self) -> int:
        """Answers that ended at the token cap."""
        return sum(1 for made in self.transcript if made.get("cut_off") is True)


def _ai(value: object) -> AIMessage | None:
    return value if isinstance(value, AIMessage) else None


def _by_id(by_id: Mapping[str, AIMessage], made: Mapping[str, Any]) -> AIMessage | None:
    """The answer a record (or a candidate's record) points to by its ``answer_id``."""
    found = made.get("answer_id")
    return by_id.get(found) if isinstance(found, str) else None


def _made(
    message: AIMessage | None,
    *,
    iteration: int,
    verdict: Mapping[str, Any],
    candidate: object = None,
) -> dict[str, Any]:
    made: dict[str, Any] = {
        "answer": message.text if message is not None else None,
        "ok": verdict.get("stop") if isinstance(verdict.get("stop"), bool) else None,
        "feedback": verdict.get("feedback") if isinstance(verdict.get("feedback"), str) else None,
        "score": verdict.get("score") if isinstance(verdict.get("score"), int | float) else None,
        "iteration": iteration,
        "cut_off": was_cut_off(message),
        "sent": "first" if iteration == 1 else None,
    }
    if isinstance(candidate, int) and not isinstance(candidate, bool):
        made["candidate"] = candidate
    return made


def _from_records(records: Sequence[object], messages: Sequence[object]) -> ReadOutput | None:
    by_id = {m.id: m for m in messages if isinstance(m, AIMessage) and m.id}
    read = ReadOutput(answer="")
    for position, record in enumerate(records, start=1):
        if not isinstance(record, Mapping):
            return None
        number = record.get("iteration")
        iteration = number if isinstance(number, int) and not isinstance(number, bool) else position
        candidates = record.get("candidates")
        chosen: AIMessage | None = None
        if isinstance(candidates, list) and candidates:
            for candidate in candidates:
                if not isinstance(candidate, Mapping):
                    return None
                message = _ai(candidate.get("answer")) or _by_id(by_id, candidate)
                read.transcript.append(
                    _made(
                        message,
                        iteration=iteration,
                        verdict=candidate,
                        candidate=candidate.get("candidate"),
                    )
                )
                if candidate.get("selected") is True:
                    chosen = message
        else:
            chosen = _ai(record.get("answer")) or _by_id(by_id, record)
            read.transcript.append(_made(chosen, iteration=iteration, verdict=record))
        strategy = strategy_entry(record.get("strategy"))  # an Adaptive loop's choice
        if strategy is not None:
            for made in read.transcript:
                if made["iteration"] == iteration:
                    made["strategy"] = strategy
                    if strategy["kind"] in SENT_KINDS:
                        made["sent"] = strategy["kind"]
        if chosen is not None:
            read.steps.append(chosen.text)
    return read if read.steps else None


def _from_feedback_turns(messages: Sequence[object]) -> ReadOutput | None:
    read = ReadOutput(answer="")
    current: AIMessage | None = None
    for message in messages:
        if isinstance(message, AIMessage):
            current = message
        elif isinstance(message, BaseMessage) and is_feedback(message) and current is not None:
            iteration = len(read.steps) + 1
            verdict = {"stop": False, "feedback": feedback_text(message)}
            read.transcript.append(_made(current, iteration=iteration, verdict=verdict))
            read.steps.append(current.text)
            current = None
    if not read.steps:
        return None
    if current is not None:
        read.transcript.append(_made(current, iteration=len(read.steps) + 1, verdict={}))
        read.steps.append(current.text)
    return read


def _final(output: Mapping[str, Any], messages: Sequence[object]) -> AIMessage | None:
    last = _ai(output.get("last_response"))
    if last is not None:
        return last
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def read_output(output: object, *, arm: str) -> ReadOutput:
    """The final answer of an agent's output, and its attempts where they can be read.

    Raises:
        TypeError: the output holds no answer (the message names the arm ``arm``).

    Example:
        ```python
        read = read_output({"messages": [HumanMessage("Hi"), AIMessage("Hello")]}, arm="a")
        assert (read.answer, read.opaque) == ("Hello", True)
        ```
    """
    if isinstance(output, AIMessage | str):
        return _opaque(answer_text(output), _ai(output))
    if not isinstance(output, Mapping):
        raise TypeError(
            f"the agent of arm {arm!r} returned {type(output).__name__} {output!r:.60}; an "
            f"agent must return an AIMessage, a string, or a state with 'messages' (a graph)"
        )
    found = output.get("messages")
    messages: list[object] = list(found) if isinstance(found, list | tuple) else []
    final = _final(output, messages)
    if final is None:
        raise TypeError(
            f"the agent of arm {arm!r} returned a state without an answer (no "
            f"'last_response' and no AIMessage in 'messages'; keys {sorted(map(str, output))})"
        )
    read: ReadOutput | None = None
    for key in RECORD_KEYS:
        records = output.get(key)
        if isinstance(records, list) and records:
            read = _from_records(records, messages)
            break
    if read is None:
        read = _from_feedback_turns(messages)
    if read is None:
        return _opaque(final.text, final)
    read.answer = final.text
    return read


def _opaque(answer: str, message: AIMessage | None) -> ReadOutput:
    made = _made(message, iteration=1, verdict={}) | {"answer": answer}
    return ReadOutput(answer=answer, steps=[answer], transcript=[made], opaque=True)


class FactoryArm(EvalArm):
    """An arm whose agent a factory ``(task, model, settings) -> agent`` (sync or async) builds.

    Raises:
        TypeError: ``factory`` cannot be called that way.

    Example:
        ```python
        arm = FactoryArm(lambda task, model, settings: model)  # one answer, opaque
        ```
    """

    takes_first_answer = False  # the agent sends its own first request

    def __init__(self, factory: ArmFactory) -> None:
        check_factory(factory)
        self.factory = factory

    def identity(self) -> dict[str, Any]:
        """``{"kind": "factory", "factory": "module:qualname"}`` (see `describe_value`)."""
        return {"kind": "factory", "factory": describe_value(self.factory)}

    async def build(
        self, task: Task, model: BaseChatModel, settings: ArmSettings, *, name: str
    ) -> Runnable[Any, Any]:
        """Call the factory (`ArmFactoryError` if it raises or returns no agent)."""
        try:  # a sync factory in a worker thread: a hang never blocks its event loop
            made = await asyncio.to_thread(self.factory, task, model, settings)
            if inspect.isawaitable(made):
                made = await made
        except Exception as exc:
            raise ArmFactoryError(
                f"the factory {describe(self.factory)!r} of arm {name!r} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(made, Runnable):
            raise ArmFactoryError(
                f"the factory {describe(self.factory)!r} of arm {name!r} returned "
                f"{type(made).__name__} {made!r:.60}; it must return an agent: a "
                f"create_loop_agent graph, a create_agent graph or any Runnable (e.g. the "
                f"model it was given)"
            )
        return made

    async def run(self, run: ArmRun) -> Ran:
        """Build the agent, send it the task, read its answer and its attempts."""
        agent = await self.build(run.task, run.model, run.settings, name=run.name)
        messages = task_messages(run.task)
        graph = isinstance(agent, Pregel | PregelProtocol)
        config = merge_configs(
            run.config, {"configurable": {"thread_id": f"eval-{run.name}-{uuid.uuid4().hex}"}}
        )
        output = await agent.ainvoke({"messages": messages} if graph else messages, config)
        read = read_output(output, arm=run.name)
        run.attempts.answers[:] = read.steps
        run.attempts.transcript[:] = read.transcript
        run.attempts.cut_off = read.cut_off
        written = sum(1 for made in read.transcript if made.get("answer") is not None)
        steps = 1 if read.opaque else max(run.settings.iterations, len(read.steps))
        return Ran(read.answer, written, steps=steps, opaque=read.opaque)
