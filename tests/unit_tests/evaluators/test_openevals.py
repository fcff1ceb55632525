"""from_openevals: openevals evaluators (exact_match, an LLM-as-judge on a scripted model,
async variants, lists of results) as loop evaluators; their errors, at build time and at
the first call."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from loop_agents import create_loop_agent
from loop_agents.evaluators import from_openevals
from tests.scripted_openai import ScriptedOpenAI, Structured

openevals_exact = pytest.importorskip("openevals.exact")
openevals_llm = pytest.importorskip("openevals.llm")
exact_match = openevals_exact.exact_match
exact_match_async = openevals_exact.exact_match_async
create_llm_as_judge = openevals_llm.create_llm_as_judge
create_async_llm_as_judge = openevals_llm.create_async_llm_as_judge

QUESTION = HumanMessage("What is the capital of France? One word.")
PROMPT = "Question: {inputs}\nAnswer: {outputs}\nIs the answer right?"


def answers(*texts: str):
    """An agent that gives ``texts`` in turn and records what it was sent."""
    replies = iter(texts)
    sent: list[list] = []

    def agent(messages):
        sent.append(list(messages))
        return next(replies)

    agent.sent = sent  # type: ignore[attr-defined]
    return agent


def judge_model(server: ScriptedOpenAI) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge",
        api_key="sk-test",
        max_retries=0,
        http_client=server.client(),
        http_async_client=server.async_client(),
    )


def context(answer: str = "Paris"):
    reply = AIMessage(answer, id="a1")
    return {
        "iteration": 1,
        "init_messages": [SystemMessage("Be brief."), QUESTION],
        "last_response": reply,
        "feedback": [],
        "messages": [QUESTION, reply],
    }


# -- exact_match ---------------------------------------------------------------------------


def test_exact_match_stops_the_loop_at_the_reference_answer():
    agent = answers("Lyon", "Paris", "Nice")
    loop = create_loop_agent(agent, from_openevals(exact_match, reference_outputs="Paris"), 3)
    result = loop.invoke({"messages": [QUESTION]})
    assert result["iteration"] == 2
    assert result["last_response"].text == "Paris"
    assert result["stop_reason"] == "accepted"
    # exact_match has no comment: the default sentence names the evaluator
    assert result["feedback"][0] == "The answer did not pass the check 'exact_match'; revise it."
    assert "did not pass the check 'exact_match'" in agent.sent[1][-1].text


def test_the_reference_may_be_a_function_of_the_context():
    seen = []

    def reference(ctx):
        seen.append(ctx["iteration"])
        return "Paris"

    loop = create_loop_agent(
        answers("Lyon", "Paris"), from_openevals(exact_match, reference_outputs=reference), 3
    )
    assert loop.invoke({"messages": [QUESTION]})["iteration"] == 2
    assert seen == [1, 2]


def test_the_evaluator_is_given_the_request_the_answer_the_reference_and_the_keywords():
    calls = []

    def mine(*, inputs, outputs, reference_outputs=None, **kwargs):
        calls.append({"inputs": inputs, "outputs": outputs, "ref": reference_outputs} | kwargs)
        return {"key": "mine", "score": True, "comment": "Fine."}

    verdict = from_openevals(mine, reference_outputs={"city": "Paris"}, rubric="brief").invoke(
        context()
    )
    assert verdict == {"stop": True, "feedback": "Fine."}
    # the request's user messages (the system message is not part of the question)
    assert calls == [
        {
            "inputs": "What is the capital of France? One word.",
            "outputs": "Paris",
            "ref": {"city": "Paris"},
            "rubric": "brief",
        }
    ]


def test_exact_match_async_works_with_invoke_and_ainvoke():
    evaluator = from_openevals(exact_match_async, reference_outputs="Paris")
    loop = create_loop_agent(answers("Lyon", "Paris"), evaluator, 3)
    assert loop.invoke({"messages": [QUESTION]})["iteration"] == 2
    loop = create_loop_agent(answers("Lyon", "Lyon", "Paris"), evaluator, 3)
    result = asyncio.run(loop.ainvoke({"messages": [QUESTION]}))
    assert result["iteration"] == 3
    assert result["stop_reason"] == "accepted"


# -- an LLM-as-judge built by openevals, on a scripted model ----------------------------------


def test_an_llm_as_judge_with_a_boolean_score_gives_its_reasoning_as_feedback():
    server = ScriptedOpenAI(
        [
            Structured({"reasoning": "Lyon is not the capital; it is Paris.", "score": False}),
            Structured({"reasoning": "Correct.", "score": True}),
        ]
    )
    judge = create_llm_as_judge(prompt=PROMPT, judge=judge_model(server))
    agent = answers("Lyon", "Paris")
    result = create_loop_agent(agent, from_openevals(judge), 3).invoke({"messages": [QUESTION]})
    assert result["iteration"] == 2
    assert result["feedback"] == ["Lyon is not the capital; it is Paris.", "Correct."]
    assert "Lyon is not the capital" in agent.sent[1][-1].text
    # the judge was asked about the request and the answer, as openevals words it
    first = server.requests[0]["messages"][-1]["content"]
    assert first == f"Question: {QUESTION.text}\nAnswer: Lyon\nIs the answer right?"
    # its calls count as the evaluator's (the loop's records keep their tokens)
    assert [r["evaluator_input_tokens"] for r in result["records"]] == [11, 11]


def test_an_llm_as_judge_with_an_empty_comment_sends_a_default_sentence():
    server = ScriptedOpenAI([Structured({"reasoning": "  ", "score": False})])
    judge = create_llm_as_judge(prompt=PROMPT, judge=judge_model(server), feedback_key="right")
    verdict = from_openevals(judge).invoke(context("Lyon"))
    assert verdict == {
        "stop": False,
        "feedback": "The answer did not pass the check 'right'; revise it.",
    }


def test_a_numeric_score_is_compared_with_the_threshold_and_recorded():
    server = ScriptedOpenAI(
        [
            Structured({"reasoning": "Half right.", "score": 0.5}),
            Structured({"reasoning": "", "score": 0.25}),
            Structured({"reasoning": "Good.", "score": 0.8}),
        ]
    )
    judge = create_llm_as_judge(prompt=PROMPT, judge=judge_model(server), continuous=True)
    loop = create_loop_agent(answers("a", "b", "c"), from_openevals(judge, threshold=0.8), 4)
    result = loop.invoke({"messages": [QUESTION]})
    assert result["iteration"] == 3  # 0.8 >= 0.8 accepts
    assert [r["score"] for r in result["records"]] == [0.5, 0.25, 0.8]
    assert result["feedback"][1] == (
        "The answer scored 0.25 on 'score'; at least 0.8 is needed. Revise it."
    )


def test_a_numeric_score_without_a_threshold_names_the_fix_at_the_first_call():
    server = ScriptedOpenAI([Structured({"reasoning": "Fine.", "score": 0.9})])
    judge = create_llm_as_judge(prompt=PROMPT, judge=judge_model(server), continuous=True)
    loop = create_loop_agent(answers("Paris"), from_openevals(judge), 3)
    with pytest.raises(ValueError, match=r"score 0\.9, a number.*threshold=N"):
        loop.invoke({"messages": [QUESTION]})


async def test_an_async_llm_as_judge_runs_with_ainvoke_and_with_invoke():
    server = ScriptedOpenAI(
        [
            Structured({"reasoning": "No.", "score": False}),
            Structured({"reasoning": "Yes.", "score": True}),
            Structured({"reasoning": "Yes.", "score": True}),
        ]
    )
    judge = create_async_llm_as_judge(prompt=PROMPT, judge=judge_model(server))
    loop = create_loop_agent(answers("Lyon", "Paris"), from_openevals(judge), 3)
    result = await loop.ainvoke({"messages": [QUESTION]})
    assert (result["iteration"], result["feedback"]) == (2, ["No.", "Yes."])
    # the sync path runs the coroutine on the package's background event loop
    sync = await asyncio.to_thread(from_openevals(judge).invoke, context())
    assert sync == {"stop": True, "feedback": "Yes."}


# -- lists of results --------------------------------------------------------------------------


def several(*results):
    def evaluator(*, inputs, outputs, reference_outputs=None):
        return list(results)

    return evaluator


def test_a_list_of_results_accepts_only_when_every_result_passes():
    passing = {"key": "tone", "score": True, "comment": "Polite."}
    failing = {"key": "facts", "score": 0.4, "comment": "The date is wrong."}
    silent = {"key": "format", "score": False, "comment": None}
    verdict = from_openevals(several(passing, failing, silent), threshold=0.5).invoke(context())
    assert verdict == {
        "stop": False,
        "feedback": "[facts]\nThe date is wrong.\n\n[format]\n"
        "The answer did not pass the check 'format'; revise it.",
        "score": 0.4,
    }
    good = {"key": "facts", "score": 0.9, "comment": "Right."}
    verdict = from_openevals(several(passing, good), threshold=0.5).invoke(context())
    assert verdict == {"stop": True, "feedback": "[tone]\nPolite.\n\n[facts]\nRight.", "score": 0.9}


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("yes", r"returned 'yes'; expected an EvaluatorResult"),
        ({"key": "k", "comment": "no score"}, r"expected an EvaluatorResult"),
        ({"key": "k", "score": None}, r"score NoneType None; a score must be True/False"),
        ({"key": "k", "score": math.nan}, r"score nan; a score must be True/False"),
        ({"key": "k", "score": "0.9"}, r"score str '0.9'"),
        ([], r"returned an empty list"),
    ],
)
def test_a_malformed_result_is_an_error_naming_the_evaluator(result, message):
    def odd(*, inputs, outputs, reference_outputs=None):
        return result

    with pytest.raises((TypeError, ValueError), match=message) as raised:
        from_openevals(odd, threshold=0.5).invoke(context())
    assert "'odd'" in str(raised.value)


def test_bad_settings_are_refused_when_the_evaluator_is_built():
    with pytest.raises(ValueError, match=r"give from_openevals\(exact_match, reference_outputs"):
        from_openevals(exact_match)
    with pytest.raises(TypeError, match=r"call it and pass what it returns"):
        from_openevals(create_llm_as_judge, threshold=0.5)
    with pytest.raises(TypeError, match=r"takes an openevals evaluator"):
        from_openevals("exact_match")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"threshold must be a finite number"):
        from_openevals(exact_match, reference_outputs="x", threshold=True)
    with pytest.raises(TypeError, match=r"threshold must be a finite number"):
        from_openevals(exact_match, reference_outputs="x", threshold="0.8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"passes outputs itself"):
        from_openevals(exact_match, reference_outputs="x", outputs="Paris")


def test_the_evaluator_is_named_after_the_openevals_function():
    assert from_openevals(exact_match, reference_outputs="x").name == "exact_match"
    server = ScriptedOpenAI([])
    judge = create_llm_as_judge(prompt=PROMPT, judge=judge_model(server))
    evaluator = from_openevals(judge)
    assert evaluator.name == "openevals"
    assert evaluator.criteria is None


@pytest.mark.slow
def test_a_code_evaluator_sends_the_type_checkers_errors_back(monkeypatch):
    """openevals' mypy evaluator (it runs the mypy of this environment: about 1 s a call)."""
    mypy_evaluator = pytest.importorskip("openevals.code.mypy").create_mypy_evaluator
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    wrong = "```python\ndef twice(x: int) -> int:\n    return x + 'x'\n```"
    right = "```python\ndef twice(x: int) -> int:\n    return 2 * x\n```"
    agent = answers(wrong, right)
    evaluator = from_openevals(mypy_evaluator(code_extraction_strategy="markdown_code_blocks"))
    result = create_loop_agent(agent, evaluator, 3).invoke({"messages": [QUESTION]})
    assert result["iteration"] == 2
    assert "Unsupported operand types" in result["feedback"][0]
    assert "Unsupported operand types" in agent.sent[1][-1].text
