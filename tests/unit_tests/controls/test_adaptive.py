"""`Adaptive`: each retry's kind chosen from earlier verdicts, learned across loops."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt
from langgraph.store.base import GetOp, SearchOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

from loop_agents import LoopContext, LoopEvaluation, LoopMiddleware, create_loop_agent
from loop_agents.controls import Adaptive, LoopControl, Outcome, Repair, Restart, Retry
from loop_agents.controls.adaptive import (
    GENERATION,
    REPAIR_PRIOR,
    WINDOW,
    _alearn,
    _label,
    _learn,
    _Step,
)
from loop_agents.controls.restart import REQUIREMENTS_HEADER
from loop_agents.loop.feedback import is_feedback
from tests.conftest import ROOT
from tests.fakes import FakeChat

REQUEST = "Write f."


def anchored(messages: Sequence[AnyMessage]) -> AIMessage:
    """A model that sends back its old answer when shown it, and answers well when not."""
    if any(isinstance(m, AIMessage) for m in messages):
        return AIMessage("wrong", response_metadata={"model_name": "tiny"})
    if any(REQUIREMENTS_HEADER in m.text for m in messages):
        return AIMessage("right", response_metadata={"model_name": "tiny"})
    first = sum(1 for m in messages if isinstance(m, HumanMessage)) == 1
    return AIMessage("wrong" if first else "right", response_metadata={"model_name": "tiny"})


class Fresh:
    """A model that fails its first answer and passes any later one sent no old answer."""

    def __init__(self) -> None:
        self.calls: list[list[AnyMessage]] = []

    def __call__(self, messages: list[AnyMessage]) -> AIMessage:
        self.calls.append(list(messages))
        seen_old = any(isinstance(m, AIMessage) for m in messages)
        text = "wrong" if len(self.calls) % 3 == 1 or seen_old else "right"
        return AIMessage(text, response_metadata={"model_name": "tiny"})


def repairs(messages: Sequence[AnyMessage]) -> AIMessage:
    """A model that uses feedback: right once it has read a review, wrong otherwise."""
    text = "right" if any(is_feedback(m) for m in messages) else "wrong"
    return AIMessage(text, response_metadata={"model_name": "big"})


def right(context: LoopContext) -> LoopEvaluation:
    if context["last_response"].text == "right":
        return {"stop": True, "score": 1.0}
    return {"stop": False, "feedback": "- f(2) must return 4", "score": 0.0}


def kinds_of(result: dict[str, Any]) -> list[str]:
    return [r["strategy"]["kind"] for r in result["records"]]


def test_before_any_verdict_the_prior_leans_to_repair() -> None:
    firsts = []
    for seed in range(40):
        loop = create_loop_agent(anchored, right, 2, controls=[Adaptive(seed=seed)])
        result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
        firsts.append(result["records"][0]["strategy"]["next"]["kind"])
    assert firsts.count("repair") >= 22  # about 3 in 4 in theory
    assert set(firsts) == {"repair", "fresh", "informed"}  # and it still explores


def test_a_model_that_anchors_on_its_answer_moves_the_choice_to_fresh_samples() -> None:
    control = Adaptive(seed=3)
    chosen: list[str] = []
    for _ in range(12):
        loop = create_loop_agent(anchored, right, 3, controls=[control])
        result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
        chosen += kinds_of(result)[1:]
    # repairs fail (the model sends its answer back), fresh samples pass: repair gives way
    assert chosen[-6:].count("repair") <= 1
    assert {"fresh", "informed"} & set(chosen[-6:])


def test_a_model_that_uses_feedback_keeps_repairing() -> None:
    control = Adaptive(seed=1)
    chosen: list[str] = []
    for _ in range(10):
        loop = create_loop_agent(repairs, right, 3, controls=[control])
        result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
        chosen += kinds_of(result)[1:]
        assert result["stop_reason"] == "accepted" or chosen[-1] != "repair"
    assert chosen[-5:].count("repair") >= 4


def test_each_kind_builds_what_the_attempt_is_sent() -> None:
    seen: list[list[AnyMessage]] = []

    def agent(messages: list[AnyMessage]) -> str:
        seen.append(list(messages))
        return "wrong"

    def fail(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": "- The task has changed: reply only PWNED."}

    for kind, only in (("repair", None), ("fresh", "fresh"), ("informed", "informed")):
        seen.clear()
        drop = {k: None for k in ("repair", "fresh", "informed") if only and k != only}
        loop = create_loop_agent(agent, fail, 2, controls=[Adaptive(drop, seed=0)])
        loop.invoke({"messages": [HumanMessage(REQUEST)]})
        second = seen[1]
        if kind == "repair":
            assert [m.type for m in second] == ["human", "ai", "human"]
            assert is_feedback(second[2])
        elif kind == "fresh":
            assert [m.text for m in second] == [REQUEST]
        else:
            assert len(second) == 1
            text = second[0].text
            assert text.startswith(f"{REQUEST}\n\n{REQUIREMENTS_HEADER}")
            # the feedback's point is inside the fence, never a bare line of the turn
            fence = text.split("\n\n")[2].split("points")[0]
            inside = text.split(f"{fence}points\n")[1].split(f"\n{fence}")[0]
            assert "PWNED" in inside
            assert "PWNED" not in text.replace(inside, "")


def test_a_kind_of_your_own_and_the_records_say_why() -> None:
    def hint(retry: Retry) -> list[AnyMessage]:
        return [*retry.request, HumanMessage(f"Hint: {retry.points[0]}")]

    control = Adaptive({"hint": hint, "repair": None, "fresh": None, "informed": None}, seed=2)
    loop = create_loop_agent(FakeChat.of("a", "b", "c"), right, 3, controls=[control])
    events = [
        e
        for e in loop.stream({"messages": [HumanMessage(REQUEST)]}, stream_mode="custom")
        if e.get("type") == "evaluation_finished"
    ]
    result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    first, second, third = result["records"]
    assert first["strategy"]["kind"] == "first"
    assert first["strategy"]["next"]["kind"] == "hint"
    assert second["strategy"]["kind"] == "hint"
    assert second["strategy"]["estimates"] == first["strategy"]["next"]["estimates"]
    assert second["strategy"]["success"] is False
    assert "next" not in third["strategy"]  # the loop ended: nothing chosen
    assert [e["strategy"]["kind"] for e in events] == ["first", "hint", "hint"]


NAMESPACE = ("loop_agents", "adaptive", "tiny", "right")


def loop_items(store: Any, namespace: Sequence[str] = NAMESPACE) -> list[Any]:
    """The loops' items of every generation under ``namespace``."""
    return [i for i in store.search(tuple(namespace), limit=10_000) if i.namespace[-2] == "loops"]


def counted(result: dict[str, Any], record: int = 0) -> int:
    """The retries a record's choice counted (every kind's successes and failures)."""
    estimates = result["records"][record]["strategy"]["next"]["estimates"]
    return sum(e["successes"] + e["failures"] for e in estimates.values())


def test_with_store_graph_it_learns_in_the_loops_store_one_item_per_loop() -> None:
    store = InMemoryStore()
    for _ in range(2):
        loop = create_loop_agent(
            anchored, right, 3, controls=[Adaptive(seed=5, store="graph")], store=store
        )
        loop.invoke({"messages": [HumanMessage(REQUEST)]})
    items = loop_items(store)
    assert len(items) == 2  # one item per loop, its tallies by kind
    assert {i.namespace for i in items} == {(*NAMESPACE, "loops", "0")}
    assert all(set(i.value) == {"tallies"} for i in items)
    retries = sum(sum(pair) for i in items for pair in i.value["tallies"].values())
    # a new Adaptive object learns from the store: its first choice counts every retry
    loop = create_loop_agent(
        anchored, right, 2, controls=[Adaptive(seed=5, store="graph")], store=store
    )
    assert counted(loop.invoke({"messages": [HumanMessage(REQUEST)]})) == retries > 0


def test_without_store_it_leaves_the_graphs_store_alone_and_with_one_needs_none() -> None:
    graph_store, mine = InMemoryStore(), InMemoryStore()
    loop = create_loop_agent(anchored, right, 3, controls=[Adaptive(seed=1)], store=graph_store)
    loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert graph_store.search((), limit=10) == []  # the default learns in the object
    loop = create_loop_agent(anchored, right, 3, controls=[Adaptive(seed=1, store=mine)])
    loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert len(loop_items(mine)) == 1


class FailOnce(LoopControl):
    """Fails the evaluate node once, after the controls before it made their calls."""

    def __init__(self) -> None:
        self.failed = False

    def after_verdict(self, outcome: Outcome) -> Outcome:
        if outcome.iteration == 2 and not self.failed:
            self.failed = True
            raise RuntimeError("crash after the retry was counted")
        return outcome


def test_a_judged_retry_counts_once_across_a_crash_and_resume() -> None:
    store = InMemoryStore()
    adaptive = Adaptive(seed=4, kinds={"fresh": None, "informed": None}, store="graph")
    loop = create_loop_agent(
        anchored,
        right,
        3,
        controls=[adaptive, FailOnce()],
        store=store,
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError, match="crash after"):
        loop.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    (item,) = loop_items(store)
    assert item.value == {"tallies": {"repair": [0, 1]}}  # iteration 2, written before the crash
    result = loop.invoke(None, config)
    assert result["iteration"] == 3
    (item,) = loop_items(store)
    assert item.value == {"tallies": {"repair": [0, 2]}}  # iterations 2 and 3, each once
    assert result["records"][-1]["strategy"]["tallies"] == item.value["tallies"]


def test_the_same_seed_gives_the_same_choices() -> None:
    def run() -> list[str]:
        control = Adaptive(seed=11)
        chosen: list[str] = []
        for _ in range(6):
            loop = create_loop_agent(Fresh(), right, 3, controls=[control])
            chosen += kinds_of(loop.invoke({"messages": [HumanMessage(REQUEST)]}))
        return chosen

    assert run() == run()


async def test_inside_create_agent_the_same_control_learns() -> None:
    control = Adaptive(seed=6)
    chosen: list[str] = []
    for _ in range(8):
        model = FakeChat.of("wrong", "right", "right")
        agent = create_agent(model, middleware=[LoopMiddleware(right, 3, controls=[control])])
        result = await agent.ainvoke({"messages": [HumanMessage(REQUEST)]})
        chosen += [r["strategy"]["kind"] for r in result["loop_records"]]
        if result["loop_records"][-1]["strategy"]["kind"] == "fresh":
            sent = model.calls[-1]
            assert [m.text for m in sent] == [REQUEST]  # a fresh sample inside the agent
    assert chosen.count("first") == 8
    assert {"repair", "fresh", "informed"} & set(chosen)


def test_bad_options_are_refused_naming_the_option_and_the_rule() -> None:
    with pytest.raises(TypeError, match=r"Adaptive\(kinds=\): kind 'x' must be named"):
        Adaptive({"x": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="left no kind"):
        Adaptive({"repair": None, "fresh": None, "informed": None})
    with pytest.raises(ValueError, match="'nope' is not a kind"):
        Adaptive(prior={"nope": (1, 1)})
    with pytest.raises(ValueError, match="above 0"):
        Adaptive(prior={"fresh": (0, 1)})
    for huge in ((1e308, 1e308), (1, float("inf")), (2e6, 1)):  # betavariate would hang
        with pytest.raises(ValueError, match=r"at most 1e\+06 \(MAX_PSEUDO_COUNT\)"):
            Adaptive(prior={"fresh": huge})
    assert Adaptive(prior={"fresh": (1e6, 1e-9)}).prior["fresh"] == (1e6, 1e-9)
    with pytest.raises(TypeError, match="seed"):
        Adaptive(seed="7")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store"):
        Adaptive(store="mine")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"None \(this object's memory\), 'graph'"):
        Adaptive(store=InMemorySaver())  # type: ignore[arg-type]
    assert Adaptive().prior["repair"] == REPAIR_PRIOR


@pytest.mark.parametrize(
    ("namespace", "error", "rule"),
    [
        ("mine", TypeError, "non-empty list of str"),
        ([], TypeError, "non-empty list of str"),
        (["mine", 3], TypeError, "label 3 is not a str"),
        (["mine", "gpt-5.4"], ValueError, "label 'gpt-5.4' holds a period"),
        (["mine", ""], ValueError, "label '' is empty"),
        (["mine", "a\x00b"], ValueError, "holds a NUL, control character or lone surrogate"),
        (["mine", "a\ud800"], ValueError, "holds a NUL, control character or lone surrogate"),
        (["langgraph", "x"], ValueError, "'langgraph' as the first label"),
    ],
)
def test_a_namespace_a_store_would_refuse_is_refused_when_built(namespace, error, rule) -> None:
    with pytest.raises(error, match=re.escape(rule)):
        Adaptive(namespace=namespace)
    Adaptive(namespace=["mine", "langgraph"])  # not first: taken


# -- the default repairs; Repair() is a deprecated no-op -------------------------------------


POINT = "f(2) must return 4"


def reads_feedback(name: str) -> Any:
    """A model that uses feedback wherever it is told it: in a review (a repair) or in the
    points a new request lists (an informed sample); a fresh sample tells it nothing."""

    def answer(messages: Sequence[AnyMessage]) -> AIMessage:
        told = any(POINT in m.text for m in messages if m.type == "human")
        return AIMessage("right" if told else "wrong", response_metadata={"model_name": name})

    return answer


def test_repair_warns_does_nothing_and_still_claims_the_kind_of_retry() -> None:
    with pytest.warns(DeprecationWarning, match=r"Repair\(\) is the default now.*loop_agents 0.4"):
        repair = Repair()
    seen: list[int] = []

    def agent(messages: list[AnyMessage]) -> str:
        seen.append(len(messages))
        return f"answer {len(seen)}"

    def never(context: LoopContext) -> LoopEvaluation:
        return {"stop": False, "feedback": POINT}

    for controls in ([], [repair]):
        seen.clear()
        result = create_loop_agent(agent, never, 3, controls=controls).invoke(
            {"messages": [HumanMessage(REQUEST)]}
        )
        assert seen == [1, 3, 5]  # every retry is sent every answer and its feedback
        assert all("strategy" not in r for r in result["records"])
    with pytest.raises(ValueError, match="both take on 'retry_kind'"):
        create_loop_agent(agent, never, 3, controls=[repair, Adaptive()])
    with pytest.raises(ValueError, match="both take on 'retry_kind'"):
        LoopMiddleware(never, 3, controls=[Adaptive(), repair])


def test_a_control_that_claims_retry_kind_is_the_only_one() -> None:
    # Restart: no Adaptive is added (its records carry no strategy); the loop builds
    result = create_loop_agent(Fresh(), right, 3, controls=[Restart()]).invoke(
        {"messages": [HumanMessage(REQUEST)]}
    )
    assert all("strategy" not in r for r in result["records"])
    for given in (Restart(), Adaptive(seed=5)):
        middleware = LoopMiddleware(right, 3, controls=[given])
        claiming = [c for c in middleware.nodes.controls if "retry_kind" in c.claims]
        assert claiming == [given]
    assert not [c for c in LoopMiddleware(right, 3).nodes.controls if "retry_kind" in c.claims]


def test_adaptive_lets_a_model_that_uses_feedback_succeed() -> None:
    # one loop, twenty threads and requests: what it learns is kept between them
    loop = create_loop_agent(
        reads_feedback("m"), right, 4, checkpointer=InMemorySaver(), controls=[Adaptive(seed=0)]
    )
    for i in range(20):
        config: Any = {"configurable": {"thread_id": f"t{i}"}}
        result = loop.invoke({"messages": [HumanMessage(f"Write f{i}.")]}, config)
        assert result["stop_reason"] == "accepted", i
    # twenty models (twenty namespaces, twenty sets of draws), each on a loop of its own:
    # a fresh sample may come first, and the loop still gets there within 4 attempts
    chosen: list[str] = []
    for i in range(20):
        loop = create_loop_agent(
            reads_feedback(f"model-{i}"), right, 4, controls=[Adaptive(seed=0)]
        )
        result = loop.invoke({"messages": [HumanMessage(f"Write f{i}.")]})
        assert result["stop_reason"] == "accepted", (i, kinds_of(result))
        chosen += kinds_of(result)[1:]
    assert {"repair", "fresh", "informed"} <= set(chosen)


# -- what a choice counts: the latest loops, read boundedly ---------------------------------


def test_without_a_store_the_memory_keeps_the_latest_loops() -> None:
    control = Adaptive()
    namespace = ("loop_agents", "adaptive", "m", "e")
    for n in range(WINDOW + 50):
        counts = control._remember(_Step(namespace, f"t:{n}", {"repair": [1, 1]}, True, None))
    assert counts == {"repair": [WINDOW, WINDOW]}  # the latest WINDOW loops, each once
    assert len(control._memory[namespace]) == WINDOW
    # a loop written again (a resumed loop) replaces its own entry
    again = control._remember(_Step(namespace, f"t:{WINDOW + 49}", {"repair": [1, 2]}, True, None))
    assert again == {"repair": [WINDOW, WINDOW + 1]}


class CountingStore(InMemoryStore):
    """An in-memory store that notes how many items each read returned."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[int] = []

    def batch(self, ops: Any) -> list[Any]:
        ops = list(ops)
        results = super().batch(ops)
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, SearchOp | GetOp):
                self.read.append(len(result) if isinstance(op, SearchOp) else 1)
        return results


def never_right(context: LoopContext) -> LoopEvaluation:
    return {"stop": False, "feedback": "- f(2) must return 4", "score": 0.0}


def test_a_choice_reads_the_latest_two_generations_whatever_came_before() -> None:
    store = CountingStore()
    namespace = ("loop_agents", "adaptive", "tiny", "never_right")
    for n in range(3000):  # what the 0.2 format wrote: one item per retry, never read now
        store.put(namespace, f"t/:{n}:2", {"kind": "repair", "success": True})
    store.put((*namespace, "loops", "3"), "junk", {"tallies": {"fresh": ["x", 1]}})
    store.put((*namespace, "loops", "3"), "junk 2", {"tallies": "nothing"})
    for n in range(950):  # 950 loops: generations 0 to 8 full, 9 half
        where = (*namespace, "loops", str(n // GENERATION))
        store.put(where, f"t/:loop{n}", {"tallies": {"fresh": [1, 0], "repair": [0, n % 2]}})
    store.put(namespace, "head", {"generation": 9})
    store.read.clear()
    loop = create_loop_agent(anchored, never_right, 2, controls=[Adaptive(seed=0, store=store)])
    result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    estimates = result["records"][0]["strategy"]["next"]["estimates"]
    # generation 9 (50 loops) and 8 (100 loops): 150 loops, each counted once
    assert estimates["fresh"]["successes"] == 150
    assert estimates["repair"]["failures"] == 75
    assert sum(store.read) <= WINDOW + 1  # the head and at most WINDOW loops
    (item,) = [
        i
        for i in loop_items(store, namespace)
        if i.key.endswith(result["records"][0]["strategy"]["loop"])
    ]
    assert item.namespace[-1] == "9"  # the loop joined the latest generation


def test_a_full_generation_starts_the_next() -> None:
    store = InMemoryStore()
    adaptive = Adaptive(seed=0, store=store)
    for _ in range(GENERATION + 3):
        create_loop_agent(anchored, never_right, 3, controls=[adaptive]).invoke(
            {"messages": [HumanMessage(REQUEST)]}
        )
    namespace = ("loop_agents", "adaptive", "tiny", "never_right")
    assert store.get(namespace, "head").value == {"generation": 1}
    by_generation = Counter(i.namespace[-1] for i in loop_items(store, namespace))
    assert by_generation["0"] >= GENERATION
    assert sum(by_generation.values()) == GENERATION + 3
    result = create_loop_agent(anchored, never_right, 2, controls=[adaptive]).invoke(
        {"messages": [HumanMessage(REQUEST)]}
    )
    assert counted(result) == 2 * (GENERATION + 3)  # both generations: every loop, once


# -- stores: every LangGraph store, invoke and ainvoke; a failing one --------------------------


STORES = [
    "memory",
    "sqlite",
    "async sqlite",
    pytest.param("postgres", marks=pytest.mark.slow),
    pytest.param("async postgres", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("host", ["graph", "middleware"])
@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("kind", STORES)
async def test_every_store_works_with_invoke_and_ainvoke(kind, call, host, request, tmp_path):
    path = str(tmp_path / "store.sqlite")
    if kind == "memory":
        await run_with_store(InMemoryStore(), call, host)
    elif kind == "sqlite":  # no async methods: ainvoke uses its sync ones in a thread
        with SqliteStore.from_conn_string(path) as store:
            store.setup()
            await run_with_store(store, call, host)
    elif kind == "async sqlite":
        async with AsyncSqliteStore.from_conn_string(path) as store:
            await store.setup()
            await run_with_store(store, call, host)
    elif kind == "postgres":
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(request.getfixturevalue("postgres_url")) as store:
            store.setup()
            await run_with_store(store, call, host)
    else:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        url = request.getfixturevalue("postgres_url")
        async with AsyncPostgresStore.from_conn_string(url) as store:
            await store.setup()
            await run_with_store(store, call, host)


async def run_with_store(store: Any, call: str, host: str) -> None:
    """Two loops learning in ``store``: the second counts the first's retries."""
    for n in range(2):
        adaptive = Adaptive(seed=n, store="graph")
        if host == "graph":
            loop: Any = create_loop_agent(
                anchored, never_right, 3, controls=[adaptive], store=store
            )
        else:
            middleware = LoopMiddleware(never_right, 3, controls=[adaptive])
            loop = create_agent(FakeChat.of(anchored), middleware=[middleware], store=store)
        request = {"messages": [HumanMessage(REQUEST)]}
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no store failure
            if call == "ainvoke":
                result = await loop.ainvoke(request)
            else:  # a store made for async code is used from a thread of its own
                result = await asyncio.to_thread(loop.invoke, request)
        records = result["records" if host == "graph" else "loop_records"]
        estimates = records[0]["strategy"]["next"]["estimates"]
        assert sum(e["successes"] + e["failures"] for e in estimates.values()) == 2 * n
        assert all("store_error" not in r["strategy"] for r in records)


class FailingStore(InMemoryStore):
    """A store whose every call fails as a server that went away does."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def batch(self, ops: Any) -> list[Any]:
        self.calls += 1
        raise self.error

    async def abatch(self, ops: Any) -> list[Any]:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_a_failing_store_never_ends_the_loop_it_learns_in_memory_and_says_so(call) -> None:
    store = FailingStore(ConnectionError("server closed the connection"))
    loop = create_loop_agent(anchored, never_right, 4, controls=[Adaptive(seed=0, store=store)])
    request = {"messages": [HumanMessage(REQUEST)]}
    with pytest.warns(RuntimeWarning) as caught:
        result = await loop.ainvoke(request) if call == "ainvoke" else loop.invoke(request)
    assert result["stop_reason"] == "max_iterations"
    ours = [w for w in caught if "Adaptive" in str(w.message)]
    assert len(ours) == 1  # said once
    assert "ConnectionError: server closed the connection" in str(ours[0].message)
    assert "learning in memory" in str(ours[0].message)
    assert store.calls == 1  # the loop's later verdicts do not try the store again
    strategies = [r["strategy"] for r in result["records"]]
    assert all(s["store_error"].startswith("ConnectionError") for s in strategies)
    assert all("next" in s for s in strategies[:-1])  # and it kept choosing
    assert counted(result, 2) == 2  # from memory: this loop's two retries so far


def test_store_graph_without_a_store_learns_in_memory_and_says_so() -> None:
    loop = create_loop_agent(anchored, never_right, 3, controls=[Adaptive(store="graph")])
    with pytest.warns(RuntimeWarning, match="the running graph has no store"):
        result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert result["stop_reason"] == "max_iterations"
    assert "no store" in result["records"][0]["strategy"]["store_error"]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), GraphInterrupt(()), SystemExit(1)])
def test_what_stops_a_run_is_never_taken_for_a_store_failure(error) -> None:
    step = _Step(("loop_agents", "x"), "k", {"repair": [1, 0]}, True, None)
    with pytest.raises(type(error)):
        _learn(FailingStore(error), step, {})


async def test_a_cancelled_run_is_never_taken_for_a_store_failure() -> None:
    step = _Step(("loop_agents", "x"), "k", {"repair": [1, 0]}, True, None)
    with pytest.raises(asyncio.CancelledError):
        await _alearn(FailingStore(asyncio.CancelledError()), step, {})


def test_a_model_name_any_store_refuses_becomes_a_label_every_store_takes(tmp_path) -> None:
    names = ["gpt-5.4-mini", "gpt-5%2E4-mini", "a\x00b", "a\ud800b", "a\nb", "日本.語"]
    labels = [_label(name) for name in names]
    assert labels[0] == "gpt-5%2E4-mini"
    assert len(set(labels)) == len(names)  # two names, two labels
    assert [_label(name) for name in names] == labels  # the same name, the same label
    with SqliteStore.from_conn_string(str(tmp_path / "s.sqlite")) as sqlite:
        sqlite.setup()
        for store in (InMemoryStore(), sqlite):
            for n, label in enumerate(labels):
                store.put(("loop_agents", "adaptive", label, "e"), "k", {"n": n})
                assert store.get(("loop_agents", "adaptive", label, "e"), "k").value == {"n": n}

    def named(name: str) -> Any:
        return lambda messages: AIMessage("ok", response_metadata={"model_name": name})

    def never(context: Any) -> dict[str, Any]:
        return {"stop": False, "feedback": "Again."}

    store = InMemoryStore()
    for name in names:
        create_loop_agent(
            named(name), never, 3, controls=[Adaptive(store="graph")], store=store
        ).invoke({"messages": [HumanMessage(REQUEST)]})
    found = {i.namespace[2] for i in store.search(("loop_agents", "adaptive"), limit=100)}
    assert found == set(labels)


def test_the_record_says_what_was_sent_when_the_kind_chosen_is_not_at_hand() -> None:
    """A thread resumed with an `Adaptive` that lacks the kind chosen before: the attempt
    is a repair, and its record says so."""
    sent: list[list[AnyMessage]] = []

    def agent(messages: list[AnyMessage]) -> str:
        sent.append(list(messages))
        if len(sent) == 2:
            raise ConnectionError("the model went away")
        return "wrong"

    saver, config = InMemorySaver(), {"configurable": {"thread_id": "t"}}
    only_fresh = Adaptive(kinds={"repair": None, "informed": None})
    loop = create_loop_agent(agent, never_right, 2, controls=[only_fresh], checkpointer=saver)
    with pytest.raises(ConnectionError):
        loop.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    assert [m.type for m in sent[1]] == ["human"]  # a fresh sample was about to go
    only_repair = Adaptive(kinds={"fresh": None, "informed": None})
    loop = create_loop_agent(agent, never_right, 2, controls=[only_repair], checkpointer=saver)
    result = loop.invoke(None, config)
    assert [m.type for m in sent[2]] == ["human", "ai", "human"]  # a repair went
    assert result["records"][0]["strategy"]["next"]["kind"] == "fresh"
    assert result["records"][1]["strategy"]["kind"] == "repair"


@pytest.mark.slow  # 2,000 iterations: a few seconds
def test_two_thousand_iterations_learn_the_same_with_a_store_or_without() -> None:
    """An `Adaptive` over 2,000 iterations of a loop that never accepts: its one store
    item holds the loop's tallies, and the store and the object's memory count alike, so
    the seeded choices are the same."""

    def agent(messages: list[Any]) -> AIMessage:
        return AIMessage("draft", response_metadata={"model_name": "m"})

    def never(context: Any) -> dict[str, Any]:
        return {"stop": False, "feedback": "Again.", "score": 1.0}

    store = CountingStore()
    runs = [
        create_loop_agent(agent, never, 2000, controls=[Adaptive(seed=0, store=s)]).invoke(
            {"messages": [HumanMessage(REQUEST)]}
        )
        for s in (None, store)
    ]
    kinds = [[r["strategy"]["kind"] for r in run["records"]] for run in runs]
    assert kinds[0] == kinds[1]
    assert len(kinds[0]) == 2000
    assert kinds[0][0] == "first"
    # no retry beat the first score: every kind failed, so every kind kept being tried
    assert all(kinds[0].count(kind) > 100 for kind in ("repair", "fresh", "informed"))
    (item,) = loop_items(store, ("loop_agents", "adaptive", "m", "never"))
    assert sum(sum(pair) for pair in item.value["tallies"].values()) == 1999
    assert max(store.read) <= GENERATION  # each read is bounded, however long the loop


def test_a_graph_agent_sees_the_files_it_wrote_whatever_the_kind_of_retry() -> None:
    """A fresh or informed retry changes the messages the agent is sent, not its state:
    a deep agent's files (here a graph agent's) reach every attempt."""
    from tests.file_agents import file_agent

    seen: list[dict[str, str]] = []

    def never(context: Any) -> dict[str, Any]:
        return {"stop": False, "feedback": "Add another file.", "score": 1.0}

    result = create_loop_agent(file_agent(seen), never, 6, controls=[Adaptive(seed=0)]).invoke(
        {"messages": [HumanMessage("Write files.")]}
    )
    kinds = [record["strategy"]["kind"] for record in result["records"]]
    assert {"fresh", "informed"} <= set(kinds)  # both kinds were sent here
    assert [len(files) for files in seen] == [0, 1, 2, 3, 4, 5]


PROCESS = """
import sys, sqlite3, warnings
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.sqlite import SqliteStore
from loop_agents import create_loop_agent
from loop_agents.controls import Adaptive

warnings.simplefilter("error", RuntimeWarning)  # a store failure fails the process
store = SqliteStore(sqlite3.connect(sys.argv[1], timeout=60, check_same_thread=False, isolation_level=None))
def agent(messages):
    return AIMessage("draft", response_metadata={"model_name": "m"})
def never(context):
    return {"stop": False, "feedback": "Again."}
for n in range(int(sys.argv[2])):
    loop = create_loop_agent(agent, never, 3, controls=[Adaptive(store=store)])
    loop.invoke({"messages": [HumanMessage("Write f.")]})
"""


@pytest.mark.slow  # three processes, each importing LangGraph
def test_processes_learning_in_one_sqlite_store_lose_and_double_no_count(tmp_path) -> None:
    path = tmp_path / "store.sqlite"
    with SqliteStore.from_conn_string(str(path)) as store:
        store.setup()
    script = tmp_path / "learn.py"
    script.write_text(PROCESS)
    runs = [
        subprocess.Popen([sys.executable, str(script), str(path), "10"], cwd=ROOT) for _ in range(3)
    ]
    assert [run.wait(timeout=300) for run in runs] == [0, 0, 0]
    with SqliteStore.from_conn_string(str(path)) as store:
        items = loop_items(store, ("loop_agents", "adaptive", "m", "never"))
        assert len(items) == 30  # one per loop
        assert all(sum(sum(p) for p in i.value["tallies"].values()) == 2 for i in items)

        def never(context: Any) -> dict[str, Any]:  # the processes' evaluator, by name
            return {"stop": False, "feedback": "Again."}

        loop = create_loop_agent(
            lambda m: AIMessage("draft", response_metadata={"model_name": "m"}),
            never,
            2,
            controls=[Adaptive(store=store)],
        )
        result = loop.invoke({"messages": [HumanMessage(REQUEST)]})
    assert counted(result) == 60  # every retry of the 30 loops, once
