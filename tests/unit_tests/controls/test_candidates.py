"""Candidates per iteration: k concurrent answers, each judged, the best one kept."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AnswerSelection, Candidates
from loop_agents.controls.candidates import best_candidate
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import record_answer
from loop_agents.loop.tracing import candidate_of
from tests.fakes import FakeChat

REQUEST = HumanMessage("Name the release.")


def by_length(context: LoopContext) -> LoopEvaluation:
    """Scores an answer by its length; accepts 10 characters or more."""
    text = context["last_response"].text
    return {"stop": len(text) >= 10, "feedback": f"{len(text)} characters", "score": len(text)}


async def test_candidates_run_concurrently_and_the_best_is_kept():
    # each call waits until all three are in flight at once (a timeout fails, not hangs)
    k = 3
    in_flight = 0
    peak = 0
    all_in = asyncio.Event()
    texts = iter(["short", "a much longer answer", "medium one"])

    async def varied(messages: list[AnyMessage]) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        text = next(texts)
        if in_flight == k:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=5)
        return text

    evaluated_together = 0
    judging = 0

    async def evaluate(context: LoopContext) -> LoopEvaluation:
        nonlocal judging, evaluated_together
        judging += 1
        await asyncio.sleep(0.05)
        evaluated_together = max(evaluated_together, judging)
        judging -= 1
        return by_length(context)

    loop = create_loop_agent(varied, evaluate, 1, controls=[Candidates(k)])
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert peak == k
    assert evaluated_together == k  # the three evaluations overlapped too
    record = result["records"][0]
    assert record["candidate"] == 2
    assert result["last_response"].text == "a much longer answer"
    assert [c["score"] for c in record["candidates"]] == [5, 20, 10]
    assert [c["selected"] for c in record["candidates"]] == [False, True, False]
    # the others are kept in the record, not in messages
    assert [c["answer"].text for c in record["candidates"] if not c["selected"]] == [
        "short",
        "medium one",
    ]
    assert [m.text for m in result["messages"]] == ["Name the release.", "a much longer answer"]
    assert record_answer(record, result).text == "a much longer answer"


def test_sync_candidates_run_in_threads():
    barrier = threading.Barrier(3, timeout=5)  # breaks (and fails) unless 3 calls overlap
    answers = iter(["one", "three three", "two two"])
    lock = threading.Lock()

    def agent(messages: list[AnyMessage]) -> str:
        barrier.wait()
        with lock:
            return next(answers)

    loop = create_loop_agent(agent, by_length, 1, controls=[Candidates(3)])
    result = loop.invoke({"messages": [REQUEST]})
    assert result["last_response"].text == "three three"
    record = result["records"][0]
    # which thread took which answer is up to the scheduler; the best is the selected one
    (selected,) = (c for c in record["candidates"] if c["selected"])
    assert (selected["candidate"], selected["score"]) == (record["candidate"], 11)
    assert sorted(c["score"] for c in record["candidates"]) == [3, 7, 11]


def test_only_the_best_goes_back_to_the_agent_and_feedback_is_its_own():
    model = FakeChat.of("aa", "aaaa", "aaa", "aaaaaaaaaaaa", "b", "c")
    loop = create_loop_agent(model, by_length, 3, controls=[Candidates(3)])
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "accepted"
    first, second = result["records"]
    assert first["feedback"] == "4 characters"  # the selected candidate's feedback
    assert second["score"] == 12
    # the second iteration's three calls each saw the request, the best answer, its feedback
    sent = model.calls[3]
    assert [m.text for m in sent[:2]] == ["Name the release.", "aaaa"]
    assert is_feedback(sent[2])
    assert len(sent) == 3
    assert all(len(call) == 3 for call in model.calls[3:6])


def test_records_sum_every_candidate_s_tokens():
    usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    model = FakeChat.of(AIMessage("one", usage_metadata=usage))
    loop = create_loop_agent(model, by_length, 1, controls=[Candidates(4)])
    record = loop.invoke({"messages": [REQUEST]})["records"][0]
    assert (record["input_tokens"], record["output_tokens"]) == (40, 8)
    assert record["requests"] == 4
    assert [c["input_tokens"] for c in record["candidates"]] == [10] * 4


def test_one_candidate_is_exactly_the_loop_without_the_option():
    def run(**options: object) -> dict:
        model = FakeChat.of("a", "bb", "ccccccccccc")
        return create_loop_agent(model, by_length, 3, **options).invoke({"messages": [REQUEST]})

    plain, one = run(), run(controls=[Candidates(1)])

    def comparable(state: dict) -> dict:
        out = dict(state)
        out["messages"] = [(m.type, m.text) for m in state["messages"]]
        out["init_messages"] = [(m.type, m.text) for m in state["init_messages"]]
        out["last_response"] = state["last_response"].text
        out["records"] = [
            {
                k: v
                for k, v in r.items()
                if k not in ("answer_id", "agent_seconds", "evaluation_seconds")
            }
            for r in state["records"]
        ]
        return out

    assert comparable(plain) == comparable(one)
    assert "candidates" not in one["records"][0]


def test_ties_go_to_an_accepted_candidate_then_the_first():
    assert best_candidate([(1, {"stop": False, "score": 5}), (2, {"stop": True, "score": 5})]) == 2
    assert best_candidate([(1, {"stop": False}), (2, {"stop": False})]) == 1
    assert best_candidate([(1, {"stop": False}), (2, {"stop": True}), (3, {"stop": True})]) == 2
    assert best_candidate([(1, {"stop": True, "score": 1}), (2, {"stop": False, "score": 9})]) == 2


async def test_each_candidate_is_a_run_of_its_own_and_streams_with_its_number():
    model = FakeChat.of("first answer", "second answer")
    seen: list[LoopContext] = []

    def evaluate(context: LoopContext) -> LoopEvaluation:
        seen.append(context)
        return {"stop": True, "score": len(context["last_response"].text)}

    loop = create_loop_agent(model, evaluate, 1, controls=[Candidates(2)])
    tokens: dict[int | None, str] = {}
    events = []
    async for mode, chunk in loop.astream(
        {"messages": [REQUEST]}, stream_mode=["messages", "custom"]
    ):
        if mode == "messages":
            token, metadata = chunk
            number = candidate_of(metadata)
            tokens[number] = tokens.get(number, "") + token.text
        else:
            events.append(chunk)
    assert set(tokens) == {1, 2}
    assert sorted(tokens.values()) == ["first answer", "second answer"]
    assert sorted(c["candidate"] for c in seen) == [1, 2]
    assert {c["last_response"].text for c in seen} == {"first answer", "second answer"}
    judged = [e for e in events if e["type"] == "candidates_judged"]
    assert len(judged) == 1
    assert judged[0]["selected"] in (1, 2)
    assert len([e for e in events if e["type"] == "agent_finished"]) == 2


def test_candidate_calls_are_distinct_runs():
    runs: list[tuple[str, object, dict]] = []

    class Runs(BaseCallbackHandler):
        def on_chain_start(self, serialized, inputs, *, run_id, metadata=None, **kwargs):
            runs.append((kwargs.get("name") or "", run_id, metadata or {}))

    model = FakeChat.of("a", "b", "c")
    loop = create_loop_agent(model, by_length, 1, controls=[Candidates(3)])
    loop.invoke({"messages": [REQUEST]}, {"callbacks": [Runs()]})
    agent_runs = [r for r in runs if r[0].startswith("iteration 1: agent")]
    assert sorted(r[0] for r in agent_runs) == [
        f"iteration 1: agent (candidate {i})" for i in (1, 2, 3)
    ]
    assert len({r[1] for r in agent_runs}) == 3
    assert sorted(r[2]["loop_candidate"] for r in agent_runs) == [1, 2, 3]
    judge_runs = [r for r in runs if r[0].startswith("iteration 1: evaluator")]
    assert sorted(r[0] for r in judge_runs) == [
        f"iteration 1: evaluator (candidate {i})" for i in (1, 2, 3)
    ]


def test_candidate_temperature_binds_each_model():
    temperatures: list[float | None] = []

    class Tempered(FakeChat):
        temperature: float | None = None

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[override]
            temperatures.append(self.temperature)
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Tempered.of("a")
    loop = create_loop_agent(
        model, by_length, 1, controls=[Candidates(3, temperature=[0.0, 0.5, 1.0])]
    )
    loop.invoke({"messages": [REQUEST]})
    assert sorted(t for t in temperatures if t is not None) == [0.0, 0.5, 1.0]


def test_candidate_errors_name_the_control_and_its_parameter():
    model = FakeChat.of("a")
    with pytest.raises(TypeError, match=r"Candidates\(candidates=\) must be an int"):
        Candidates(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Candidates\(candidates=\) must be from 1 to 64"):
        Candidates(0)
    with pytest.raises(ValueError, match="got an int of 401 digits"):
        Candidates(10**400)
    with pytest.raises(ValueError, match=r"Candidates\(temperature=\) has 2 values for 3"):
        Candidates(3, temperature=[0.1, 0.2])
    with pytest.raises(ValueError, match=r"Candidates\(temperature=\) values must be finite"):
        Candidates(2, temperature=-1)
    with pytest.raises(TypeError, match=r"Candidates\(temperature=\) sets a chat model's"):
        create_loop_agent(lambda m: "x", by_length, controls=[Candidates(2, temperature=0.5)])
    with pytest.raises(TypeError, match=r"pass controls=\[Candidates\(k, temperature=0.7\)\]"):
        create_loop_agent(model, by_length, candidate_temperature=0.7)


def test_a_loop_that_failed_in_the_evaluator_resumes_without_calling_the_agent_again():
    from langgraph.checkpoint.memory import InMemorySaver

    model = FakeChat.of("one", "two two", "three")
    failures = iter([RuntimeError("judge down")])

    def flaky(context: LoopContext) -> LoopEvaluation:
        error = next(failures, None)
        if error is not None:
            raise error
        return by_length(context)

    loop = create_loop_agent(
        model, flaky, 1, controls=[Candidates(3)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "resume"}}
    with pytest.raises(RuntimeError, match="judge down"):
        loop.invoke({"messages": [REQUEST]}, config)
    assert len(model.calls) == 3
    result = loop.invoke(None, config)
    assert len(model.calls) == 3  # the three answers came from the checkpoint
    assert sorted(c["score"] for c in result["records"][0]["candidates"]) == [3, 5, 7]
    assert loop.get_state(config).values["candidate_runs"] == []


def test_best_of_an_earlier_iteration_keeps_the_latest_candidates_answer():
    model = FakeChat.of("a" * 9, "a" * 8, "bb", "b")
    loop = create_loop_agent(model, by_length, 2, controls=[Candidates(2), AnswerSelection("best")])
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["selected_iteration"], result["last_response"].text) == (1, "a" * 9)
    # the second iteration's selected answer is still in the conversation, before the copy
    assert record_answer(result["records"][1], result).text == "bb"
    assert [m.text for m in result["messages"] if m.type == "ai"] == ["a" * 9, "bb", "a" * 9]


def test_candidates_with_last_message_output():
    model = FakeChat.of("a", "bb", "ccccccccccc", "d")
    loop = create_loop_agent(
        model, by_length, 3, controls=[Candidates(2)], output_mode="last_message"
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert [m.text for m in result["messages"]] == ["Name the release.", "ccccccccccc"]


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_candidates_are_not_copies_from_an_llm_cache(call):
    # the same prompt k times: a cache would give every candidate the first one's answer
    # (before, a second run answered ["c", "c", "c"] from the cache with no model call)
    model = FakeChat.of("a", "bb", "ccc", "dddd", "eeeee", "ffffff")
    model.cache = InMemoryCache()
    loop = create_loop_agent(model, by_length, 1, controls=[Candidates(3)])

    async def run() -> None:
        inputs = {"messages": [REQUEST]}
        await loop.ainvoke(inputs) if call == "ainvoke" else loop.invoke(inputs)

    await run()
    assert len(model.calls) == 3
    await run()
    # the first candidate may answer from the cache; the others are asked again
    assert len(model.calls) == 5
    assert isinstance(model.cache, InMemoryCache)  # the user's model is left as it was
