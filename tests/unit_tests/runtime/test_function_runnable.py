"""FunctionRunnable: the runnable behind the loop's nodes, router and named calls."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langchain_core.tracers.langchain import LangChainTracer
from langgraph.config import get_config
from langsmith import Client
from langsmith.run_helpers import get_current_run_tree

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.runtime._function_runnable import FunctionRunnable
from tests.fakes import FakeChat


class Runs(BaseCallbackHandler):
    """Records chain runs: (event, name, run_id, parent_run_id)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, UUID, UUID | None]] = []

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs):
        self.events.append(("start", kwargs.get("name"), run_id, parent_run_id))

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kwargs):
        self.events.append(("end", None, run_id, parent_run_id))

    def on_chain_error(self, error, *, run_id, parent_run_id=None, **kwargs):
        self.events.append(("error", type(error).__name__, run_id, parent_run_id))


def seen_config() -> tuple[FunctionRunnable[int, int], list[RunnableConfig]]:
    configs: list[RunnableConfig] = []

    def double(x: int, config: RunnableConfig) -> int:
        configs.append(config)
        return 2 * x

    async def adouble(x: int, config: RunnableConfig) -> int:
        configs.append(config)
        return 2 * x

    return FunctionRunnable(double, adouble, name="double"), configs


@pytest.mark.parametrize("style", ["sync", "async"])
def test_a_call_is_one_named_run_and_the_function_gets_its_child_config(style: str):
    runnable, configs = seen_config()
    runs = Runs()
    run_id = uuid.uuid4()
    config: RunnableConfig = {"callbacks": [runs], "tags": ["mine"], "run_id": run_id}
    if style == "sync":
        assert runnable.invoke(21, config) == 42
    else:
        assert asyncio.run(runnable.ainvoke(21, config)) == 42
    assert [(e, n, r) for e, n, r, _ in runs.events] == [
        ("start", "double", run_id),
        ("end", None, run_id),
    ]
    child = configs[0]
    assert "run_id" not in child
    assert "run_name" not in child
    assert child["tags"] == ["mine"]
    assert child["callbacks"].parent_run_id == run_id  # type: ignore[union-attr]


def test_run_name_comes_from_the_config():
    runnable, _ = seen_config()
    runs = Runs()
    runnable.invoke(1, {"callbacks": [runs], "run_name": "iteration 3: agent"})
    assert runs.events[0][1] == "iteration 3: agent"


def test_the_current_config_inside_is_the_child_config():
    inside: list[RunnableConfig] = []

    def read(x: int, config: RunnableConfig) -> int:
        inside.append(ensure_config())
        return x

    async def aread(x: int, config: RunnableConfig) -> int:
        inside.append(ensure_config())
        return x

    runnable = FunctionRunnable(read, aread, name="read")
    runs = Runs()
    runnable.invoke(1, {"callbacks": [runs], "metadata": {"k": 1}})
    asyncio.run(runnable.ainvoke(1, {"callbacks": [runs], "metadata": {"k": 2}}))
    starts = [r for e, _, r, _ in runs.events if e == "start"]
    assert [c["metadata"]["k"] for c in inside] == [1, 2]
    assert [c["callbacks"].parent_run_id for c in inside] == starts  # type: ignore[union-attr]


@pytest.mark.parametrize("style", ["sync", "async"])
def test_an_error_ends_the_run_and_propagates(style: str):
    def fail(x: int, config: RunnableConfig) -> int:
        raise KeyError("boom")

    async def afail(x: int, config: RunnableConfig) -> int:
        raise KeyError("boom")

    runnable = FunctionRunnable(fail, afail, name="fail")
    runs = Runs()

    def call() -> object:
        if style == "sync":
            return runnable.invoke(1, {"callbacks": [runs]})
        return asyncio.run(runnable.ainvoke(1, {"callbacks": [runs]}))

    with pytest.raises(KeyError, match="boom"):
        call()
    assert [(e, n) for e, n, _, _ in runs.events] == [("start", "fail"), ("error", "KeyError")]


def test_without_trace_there_is_no_run_and_the_config_is_passed_as_is():
    runnable, configs = seen_config()
    untraced = FunctionRunnable(runnable.func, runnable.afunc, name="double", trace=False)
    runs = Runs()
    config = ensure_config({"callbacks": [runs], "run_name": "kept"})
    assert untraced.invoke(2, config) == 4
    assert asyncio.run(untraced.ainvoke(3, config)) == 6
    assert runs.events == []
    assert configs == [config, config]


def test_a_loop_makes_one_run_per_node_and_names_its_calls():
    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": context["iteration"] >= 2, "feedback": "again"}

    runs = Runs()
    loop = create_loop_agent(FakeChat.of("a", "b"), evaluate, 3, name="poet")
    loop.invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [runs]})
    starts = [(name, run, parent) for event, name, run, parent in runs.events if event == "start"]
    names = {run: name for name, run, _ in starts}
    assert [(name, names.get(parent)) for name, _, parent in starts] == [
        ("poet", None),
        ("invoke_agent", "poet"),
        ("iteration 1: agent", "invoke_agent"),
        ("evaluate", "poet"),
        ("iteration 1: evaluator", "evaluate"),
        ("invoke_agent", "poet"),
        ("iteration 2: agent", "invoke_agent"),
        ("evaluate", "poet"),
        ("iteration 2: evaluator", "evaluate"),
    ]


def test_config_given_partially_is_completed():
    runnable, configs = seen_config()
    runnable.invoke(1, {"tags": ["t"]})
    asyncio.run(runnable.ainvoke(1, None))
    assert all("configurable" in c and "callbacks" in c for c in configs)


class OfflineTracer(LangChainTracer):
    """A LangSmith tracer that records run names (in `posted`) instead of sending them."""

    posted: ClassVar[list[str]] = []  # shared with the copies LangChain makes of the tracer

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "client",
            Client(api_key="offline", api_url="http://127.0.0.1:9", auto_batch_tracing=False),
        )
        super().__init__(**kwargs)

    def _persist_run_single(self, run: Any) -> None:
        self.posted.append(run.name)

    @staticmethod
    def _update_run_single(run: Any) -> None:
        return None


@pytest.mark.parametrize("style", ["sync", "async"])
def test_under_langsmith_tracing_traceable_code_attaches_to_the_iteration_run(style: str):
    parents: list[str | None] = []

    def record_parent() -> None:
        tree = get_current_run_tree()
        parents.append(tree.name if tree is not None else None)

    def evaluate(context: LoopContext) -> LoopEvaluation:
        record_parent()
        return {"stop": context["iteration"] >= 2, "feedback": "again"}

    async def aevaluate(context: LoopContext) -> LoopEvaluation:
        return evaluate(context)

    OfflineTracer.posted.clear()
    tracer = OfflineTracer(project_name="offline")
    judge = evaluate if style == "sync" else aevaluate
    loop = create_loop_agent(FakeChat.of("a", "b"), judge, 3)
    request = {"messages": [HumanMessage("hi")]}
    if style == "sync":
        loop.invoke(request, {"callbacks": [tracer]})
    else:
        asyncio.run(loop.ainvoke(request, {"callbacks": [tracer]}))
    assert parents == ["iteration 1: evaluator", "iteration 2: evaluator"]
    assert "iteration 2: agent" in OfflineTracer.posted


class ChainBlind(BaseCallbackHandler):
    """A handler that does not receive chain events (like the evaluator's token counter)."""

    def __init__(self) -> None:
        self.starts: list[str | None] = []

    @property
    def ignore_chain(self) -> bool:
        return True

    def on_chain_start(self, serialized, inputs, **kwargs):
        self.starts.append(kwargs.get("name"))


@pytest.mark.parametrize("style", ["sync", "async"])
def test_without_an_observer_no_run_is_made_and_the_config_still_arrives(style: str):
    inside: list[RunnableConfig] = []

    def read(x: int, config: RunnableConfig) -> int:
        inside.append(ensure_config())
        return x + 1

    async def aread(x: int, config: RunnableConfig) -> int:
        return read(x, config)

    runnable = FunctionRunnable(read, aread, name="read")
    blind = ChainBlind()
    config: RunnableConfig = {"callbacks": [blind], "run_name": "named", "metadata": {"k": 1}}
    if style == "sync":
        assert runnable.invoke(1, config) == 2
    else:
        assert asyncio.run(runnable.ainvoke(1, config)) == 2
    assert blind.starts == []
    assert inside[0]["metadata"] == {"k": 1}
    assert "run_name" not in inside[0]
    callbacks = inside[0]["callbacks"]
    handlers = callbacks if isinstance(callbacks, list) else callbacks.handlers  # type: ignore[union-attr]
    assert blind in handlers


def test_a_loop_agent_sees_the_iteration_config_without_callbacks():
    seen: list[tuple[int, str]] = []

    def agent(messages: list[Any]) -> str:
        metadata = get_config()["metadata"]
        seen.append((metadata["loop_iteration"], metadata["loop_role"]))
        return "ok"

    def evaluate(context: LoopContext) -> LoopEvaluation:
        return {"stop": context["iteration"] >= 2, "feedback": "again"}

    create_loop_agent(agent, evaluate, 3).invoke({"messages": [HumanMessage("hi")]})
    asyncio.run(create_loop_agent(agent, evaluate, 3).ainvoke({"messages": [HumanMessage("hi")]}))
    assert seen == [(1, "agent"), (2, "agent")] * 2
