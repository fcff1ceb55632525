"""Stop policy and selection: best-of, plateau, token and time budgets, stop reasons, records."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent, llm_judge
from loop_agents.controls import AnswerSelection, Budgets, Plateau, budgets
from loop_agents.controls.budgets import tokens_used
from loop_agents.controls.plateau import plateaued
from loop_agents.loop import turns
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import choose, record_answer, selected_iteration_of
from tests.fakes import FakeChat
from tests.scripted_openai import ScriptedOpenAI, Structured

REQUEST = HumanMessage("Write a haiku about rain.")


def numbered(n: int = 20, tokens: tuple[int, int] | None = None) -> FakeChat:
    answers = []
    for i in range(1, n + 1):
        usage = None
        if tokens:
            usage = {
                "input_tokens": tokens[0],
                "output_tokens": tokens[1],
                "total_tokens": sum(tokens),
            }
        answers.append(AIMessage(f"answer {i}", usage_metadata=usage))
    return FakeChat.of(*answers)


def scored(*scores: float | None, accept_at: float = 1000):
    """An evaluator giving ``scores`` in turn (over loops too), accepting from ``accept_at``."""
    turns = iter(scores)

    def evaluate(context: LoopContext) -> LoopEvaluation:
        score = next(turns)
        verdict: LoopEvaluation = {
            "stop": score is not None and score >= accept_at,
            "feedback": f"scored {score}",
        }
        if score is not None:
            verdict["score"] = score
        return verdict

    return evaluate


def record(iteration: int, score: float | None) -> dict:
    return {"iteration": iteration, "score": score}


# -- best-of selection -------------------------------------------------------------------


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
async def test_best_of_chooses_iteration_2_of_3(call):
    loop = create_loop_agent(numbered(), scored(60, 90, 70), 3, controls=[AnswerSelection("best")])
    inputs = {"messages": [REQUEST]}
    result = loop.invoke(inputs) if call == "invoke" else await loop.ainvoke(inputs)
    assert result["stop_reason"] == "max_iterations"
    assert (result["selected_iteration"], result["selected_score"]) == (2, 90.0)
    # the loop's answer is attempt 2: last_response and the end of messages are a copy of it
    final = result["messages"][-1]
    assert result["last_response"] == final
    assert final.text == "answer 2"
    assert selected_iteration_of(final) == 2
    assert final.id != result["records"][1]["answer_id"]
    assert record_answer(result["records"][1], result).text == "answer 2"
    assert final.usage_metadata is None  # its tokens were counted when it was first made
    # every attempt stays in the history, in order
    assert [m.text for m in result["messages"] if isinstance(m, AIMessage)] == [
        "answer 1",
        "answer 2",
        "answer 3",
        "answer 2",
    ]
    assert record_answer(result["records"][2], result).text == "answer 3"


def test_best_of_when_the_last_is_best_appends_nothing():
    result = create_loop_agent(
        numbered(), scored(60, 70, 80), 3, controls=[AnswerSelection("best")]
    ).invoke({"messages": [REQUEST]})
    assert (result["selected_iteration"], result["selected_score"]) == (3, 80.0)
    assert [m.text for m in result["messages"] if isinstance(m, AIMessage)] == [
        "answer 1",
        "answer 2",
        "answer 3",
    ]
    assert selected_iteration_of(result["messages"][-1]) is None


def test_selection_ties_go_to_the_later_and_unscored_are_skipped():
    assert choose([record(1, 80), record(2, 80), record(3, 50)], "best")["iteration"] == 2
    assert choose([record(1, None), record(2, 40), record(3, None)], "best")["iteration"] == 2
    assert choose([record(1, None), record(2, None)], "best")["iteration"] == 2
    assert choose([record(1, 99), record(2, 10)], "last")["iteration"] == 2


def test_last_selection_reports_the_last_attempt():
    result = create_loop_agent(numbered(), scored(60, 90, 70), 3).invoke({"messages": [REQUEST]})
    assert (result["selected_iteration"], result["selected_score"]) == (3, 70.0)
    assert result["last_response"].text == "answer 3"


def test_best_of_with_last_message_output():
    loop = create_loop_agent(
        numbered(),
        scored(60, 90, 70),
        3,
        controls=[AnswerSelection("best")],
        output_mode="last_message",
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert [(m.type, m.text) for m in result["messages"]] == [
        ("human", REQUEST.text),
        ("ai", "answer 2"),
    ]


def test_a_second_run_after_best_of_starts_from_the_chosen_answer():
    agent = numbered()
    loop = create_loop_agent(
        agent,
        scored(60, 90, 70, 10, 20, 30),
        3,
        controls=[AnswerSelection("best")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    loop.invoke({"messages": [REQUEST]}, config)
    second = loop.invoke({"messages": [HumanMessage("Now one about snow.")]}, config)
    # the new loop's request is the new message; the agent saw the chosen answer before it
    assert [m.text for m in second["init_messages"]] == ["Now one about snow."]
    assert [m.text for m in agent.calls[3][-2:]] == ["answer 2", "Now one about snow."]
    assert second["iteration"] == 3
    assert [r["iteration"] for r in second["records"]] == [1, 2, 3]


# -- plateau ---------------------------------------------------------------------------------


def test_plateau_after_patience():
    # 70, then 72 and 71: neither gains 5 on 70, so after two iterations without gain it stops
    loop = create_loop_agent(
        numbered(), scored(70, 72, 71, 99), 10, controls=[Plateau(2, min_delta=5)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "plateau"
    assert result["iteration"] == 3
    assert not is_feedback(result["messages"][-1])  # no feedback after the last attempt


def test_plateau_counts_from_the_last_gain():
    # 50, 60 (gain), 60 (no gain), 65 (gain), 64, 63 -> stops at 6 with patience 2
    loop = create_loop_agent(
        numbered(), scored(50, 60, 60, 65, 64, 63, 99), 10, controls=[Plateau(2)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("plateau", 6)


def test_plateau_rule():
    def records(*scores):
        return [record(i, s) for i, s in enumerate(scores, 1)]

    assert not plateaued(records(None, None, None), patience=2, min_delta=0)
    assert not plateaued(records(None, 50, 55), patience=1, min_delta=0)
    assert plateaued(records(None, 50, None), patience=1, min_delta=0)
    assert plateaued(records(50, 50), patience=1, min_delta=0)  # equal is no gain
    assert not plateaued(records(50, 53), patience=1, min_delta=3)  # a gain of min_delta counts
    assert plateaued(records(50, 52.9), patience=1, min_delta=3)


# -- budgets ---------------------------------------------------------------------------------


def test_token_budget_hit_mid_loop():
    # each iteration: the agent 10 + 5 tokens, the judge 11 + 7 (the scripted server's usage)
    server = ScriptedOpenAI([Structured({"feedback": "More.", "score": 50})] * 10)
    judge = llm_judge(
        ChatOpenAI(model="m", api_key="sk-test", http_client=server.client()),
        "Score.",
        threshold=90,
    )
    loop = create_loop_agent(
        numbered(tokens=(10, 5)), judge, 10, controls=[Budgets(token_budget=80)]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "token_budget"
    assert result["iteration"] == 3  # 33, 66, 99 tokens: the third iteration crosses 80
    assert tokens_used(result["records"]) == 99
    assert [
        (
            r["input_tokens"],
            r["output_tokens"],
            r["evaluator_input_tokens"],
            r["evaluator_output_tokens"],
        )
        for r in result["records"]
    ] == [(10, 5, 11, 7)] * 3
    assert len(server.requests) == 3


async def test_evaluator_tokens_counted_without_config_passing():
    # a plain async evaluator that calls a model without passing any config
    model = FakeChat.of(
        AIMessage(
            "ok", usage_metadata={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        )
    )

    async def evaluate(context: LoopContext) -> LoopEvaluation:
        await model.ainvoke("judge this")
        return {"stop": False, "feedback": "again"}

    def sync_evaluate(context: LoopContext) -> LoopEvaluation:
        model.invoke("judge this")
        return {"stop": False, "feedback": "again"}

    result = await create_loop_agent(
        numbered(), evaluate, 5, controls=[Budgets(token_budget=200)]
    ).ainvoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("token_budget", 2)
    assert result["records"][0]["evaluator_input_tokens"] == 100
    result = create_loop_agent(
        numbered(), sync_evaluate, 5, controls=[Budgets(token_budget=200)]
    ).invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("token_budget", 2)


@pytest.fixture
def clock(monkeypatch):
    """A wall clock the test moves: 1000 s, then whatever the test sets."""
    now = {"t": 1000.0}
    monkeypatch.setattr(budgets, "wall_clock", lambda: now["t"])
    monkeypatch.setattr(turns, "wall_clock", lambda: now["t"])
    return now


def test_time_budget(clock):
    def slow_agent(messages):
        clock["t"] += 20  # each answer takes 20 s of the fake clock
        return "answer"

    loop = create_loop_agent(
        slow_agent, scored(*[10] * 10), 10, controls=[Budgets(time_budget=timedelta(seconds=50))]
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == ("time_budget", 3)  # 20, 40, 60 s


def test_time_budget_survives_a_resume(clock):
    calls = itertools.count(1)

    def flaky_agent(messages):
        if next(calls) == 2:
            raise ConnectionError("network down")
        return "answer"

    loop = create_loop_agent(
        flaky_agent,
        scored(*[10] * 10),
        10,
        controls=[Budgets(time_budget=100)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "resume"}}
    with pytest.raises(ConnectionError):
        loop.invoke({"messages": [REQUEST]}, config)
    clock["t"] += 150  # time passes before the resume; the loop's start is in the state
    result = loop.invoke(None, config)
    assert (result["stop_reason"], result["iteration"]) == ("time_budget", 2)


def test_a_new_loop_on_the_thread_restarts_budgets_and_selection(clock):
    loop = create_loop_agent(
        numbered(tokens=(30, 30)),
        scored(60, 90, 10, 70, 80, 75),
        3,
        controls=[Budgets(token_budget=150), AnswerSelection("best")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "again"}}
    first = loop.invoke({"messages": [REQUEST]}, config)
    assert (first["stop_reason"], first["iteration"]) == ("token_budget", 3)
    assert first["selected_iteration"] == 2
    clock["t"] += 10
    second = loop.invoke({"messages": [HumanMessage("Another.")]}, config)
    # 60 tokens per iteration again from zero; the records and selection are the new loop's
    assert (second["stop_reason"], second["iteration"]) == ("token_budget", 3)
    assert [r["score"] for r in second["records"]] == [70.0, 80.0, 75.0]
    assert (second["selected_iteration"], second["selected_score"]) == (2, 80.0)
    state = loop.get_state(config).values
    assert state["started_at"] == 1010.0


# -- stop reasons and records ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "scores", "reason", "iterations"),
    [
        ({}, (10, 95), "accepted", 2),
        ({}, (10, 20, 30), "max_iterations", 3),
        ({"controls": [Plateau(1)]}, (10, 5, 99), "plateau", 2),
        ({"controls": [Budgets(token_budget=1)]}, (10, 99), "token_budget", 1),
    ],
)
def test_stop_reason_is_always_set(options, scores, reason, iterations):
    loop = create_loop_agent(numbered(tokens=(1, 1)), scored(*scores, accept_at=90), 3, **options)
    result = loop.invoke({"messages": [REQUEST]})
    assert (result["stop_reason"], result["iteration"]) == (reason, iterations)


def test_records_hold_every_measurement():
    loop = create_loop_agent(numbered(tokens=(3, 4)), scored(10, 95, accept_at=90), 3)
    result = loop.invoke({"messages": [REQUEST]})
    first, second = result["records"]
    assert record_answer(first, result).text == "answer 1"
    assert (first["stop"], first["score"], first["feedback"]) == (False, 10.0, "scored 10")
    assert (first["input_tokens"], first["output_tokens"]) == (3, 4)
    assert (first["evaluator_input_tokens"], first["evaluator_output_tokens"]) == (0, 0)
    assert first["evaluator"] == "evaluate"
    assert first["decided_by"] == ["evaluate"]
    assert first["agent_seconds"] >= 0
    assert first["evaluation_seconds"] >= 0
    assert second["stop"] is True


def test_control_errors_name_the_control_and_its_parameter():
    agent, evaluate = numbered(), scored(1)
    with pytest.raises(ValueError, match=r"select must be 'last'.*got 'top'"):
        AnswerSelection("top")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Plateau\(patience=\) must be >= 1"):
        Plateau(0)
    with pytest.raises(ValueError, match=r"Plateau\(min_delta=\) must be a finite number >= 0"):
        Plateau(2, min_delta=-1)
    with pytest.raises(TypeError, match="token_budget must be an int"):
        Budgets(token_budget=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time_budget must be > 0 seconds"):
        Budgets(time_budget=0)
    with pytest.raises(TypeError, match="time_budget must be seconds"):
        Budgets(time_budget="1h")  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"removed in loop_agents 0.3; pass controls=\[Plateau\(N, min_delta=2\)\]"
    ):
        create_loop_agent(agent, evaluate, min_delta=2)
    assert Budgets(time_budget=timedelta(minutes=2)).time_budget == 120.0
