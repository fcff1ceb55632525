"""Benchmark 8: the loop inside ``create_agent`` (`LoopMiddleware`) against the loop around it.

Every contender runs the same loop (every retry a repair, the default) on the same
instant fake chat model and the same async evaluator (it accepts the last allowed answer):

- ``create_agent + LoopMiddleware``: one agent graph; the loop's hooks run in its steps
  (``before_agent``, ``wrap_model_call`` around each model call, ``after_agent``).
- ``create_loop_agent(create_agent(...))``: the loop's own graph, which calls the agent
  graph once per iteration (a subgraph run each time).
- ``create_agent + a 15-line after_agent hook``: the least a loop inside ``create_agent``
  can be: a hook that asks the evaluator and jumps back to the model with its feedback
  (no records, no budgets, no streaming events, no resume of an evaluation).
- the same hook beside a pass-through ``awrap_model_call``: what ``create_agent`` adds to
  every model call of an agent with a model-call hook (it runs each hook as a LangSmith
  ``traceable``, tracing on or off), which `LoopMiddleware` has to name and count its calls.

The middleware and the hook run once more each with an ``InMemorySaver`` (every run on a
thread of its own). What is measured is the framework around the model: CPU time of this
process per iteration, interleaved rounds, the baselines measured in the same run.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from benchmarks.contenders import FakeChat, accept_at
from benchmarks.measure import Samples, interleaved, paired_ratio, table
from loop_agents import LoopMiddleware, create_loop_agent

INSIDE = "create_agent + LoopMiddleware"
AROUND = "create_loop_agent(create_agent(...))"
HOOK = "create_agent + a 15-line after_agent hook"
HOOK_WRAPPED = HOOK + " + a pass-through awrap_model_call"
SAVED = " (InMemorySaver)"
INSIDE_SAVED = INSIDE + SAVED
HOOK_SAVED = HOOK + SAVED


class JumpBack(AgentMiddleware[Any, Any, Any]):
    """The least loop inside ``create_agent``: judge, then jump back with the feedback."""

    def __init__(self, evaluator: Any, cap: int) -> None:
        super().__init__()
        self.evaluator, self.cap = evaluator, cap

    @hook_config(can_jump_to=["model"])
    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        answers = [m for m in messages if isinstance(m, AIMessage)]
        context = {"iteration": len(answers), "last_response": answers[-1]}
        verdict = await self.evaluator(context)
        if verdict["stop"] or len(answers) >= self.cap:
            return None
        return {"messages": [HumanMessage(verdict["feedback"])], "jump_to": "model"}


class PassThrough(AgentMiddleware[Any, Any, Any]):
    """A model-call hook that does nothing: the cost of having one."""

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def contenders(iterations: int) -> dict[str, Callable[[], Awaitable[object]]]:
    """One ``ainvoke`` of each, ``iterations`` iterations long."""
    model = FakeChat()
    evaluator = accept_at(iterations)

    def loop() -> LoopMiddleware:
        return LoopMiddleware(evaluator, iterations)

    inside: Any = create_agent(model, middleware=[loop()])
    around = create_loop_agent(create_agent(model), evaluator, iterations)
    hook: Any = create_agent(model, middleware=[JumpBack(evaluator, iterations)])
    wrapped: Any = create_agent(model, middleware=[JumpBack(evaluator, iterations), PassThrough()])
    inside_saved: Any = create_agent(model, middleware=[loop()], checkpointer=InMemorySaver())
    hook_saved: Any = create_agent(
        model, middleware=[JumpBack(evaluator, iterations)], checkpointer=InMemorySaver()
    )

    def request() -> dict[str, list[AnyMessage]]:
        return {"messages": [HumanMessage("Write a haiku about rain.")]}

    def thread() -> dict[str, Any]:
        return {"configurable": {"thread_id": str(uuid.uuid4())}}

    return {
        INSIDE: lambda: inside.ainvoke(request()),
        AROUND: lambda: around.ainvoke(request()),
        HOOK: lambda: hook.ainvoke(request()),
        HOOK_WRAPPED: lambda: wrapped.ainvoke(request()),
        INSIDE_SAVED: lambda: inside_saved.ainvoke(request(), thread()),
        HOOK_SAVED: lambda: hook_saved.ainvoke(request(), thread()),
    }


@dataclass
class InsideAgent:
    """Per-iteration times of every contender at one loop length."""

    iterations: int
    samples: dict[str, Samples]
    ratio: float  # the middleware / the wrapped loop, CPU, median of paired rounds
    hook_ratio: float  # the middleware / the 15-line hook, CPU, median of paired rounds
    saved_hook_ratio: float  # the same, both with a checkpointer
    wrap_ratio: float  # the hook beside a pass-through model-call hook / the hook alone
    wrapped_hook_ratio: float  # the middleware / the hook beside a pass-through one

    def per_iteration_us(self, name: str) -> float:
        return self.samples[name].median_cpu() / self.iterations * 1e6

    def wall_per_iteration_us(self, name: str) -> float:
        return self.samples[name].median_wall() / self.iterations * 1e6


async def measure(iterations: int, rounds: int) -> InsideAgent:
    """Time every contender over ``rounds`` interleaved rounds."""
    samples = await interleaved(contenders(iterations), rounds)
    return InsideAgent(
        iterations,
        samples,
        paired_ratio(samples, INSIDE, AROUND),
        paired_ratio(samples, INSIDE, HOOK),
        paired_ratio(samples, INSIDE_SAVED, HOOK_SAVED),
        paired_ratio(samples, HOOK_WRAPPED, HOOK),
        paired_ratio(samples, INSIDE, HOOK_WRAPPED),
    )


def middleware_table(results: list[InsideAgent]) -> str:
    """Benchmark 8's table: per-iteration CPU and wall time, the middleware's ratios."""
    rows = []
    for result in results:
        around = {INSIDE: f"{result.ratio:.2f}x", AROUND: "1.00x"}
        hook = {
            INSIDE: f"{result.hook_ratio:.2f}x",
            HOOK: "1.00x",
            HOOK_WRAPPED: f"{result.wrap_ratio:.2f}x",
            INSIDE_SAVED: f"{result.saved_hook_ratio:.2f}x",
            HOOK_SAVED: "1.00x",
        }
        for name in (INSIDE, AROUND, HOOK, HOOK_WRAPPED, INSIDE_SAVED, HOOK_SAVED):
            rows.append(
                [
                    result.iterations,
                    name,
                    f"{result.per_iteration_us(name):,.0f} µs",
                    f"{result.wall_per_iteration_us(name):,.0f} µs",
                    around.get(name, ""),
                    hook.get(name, ""),
                    len(result.samples[name].cpu),
                ]
            )
    headers = ["iterations", "agent", "CPU / iteration", "wall / iteration", "vs around"]
    return table([*headers, "vs hook", "runs"], rows)
