"""as_openevals / as_openevals_async: loop evaluators as openevals / LangSmith evaluators,
called directly, by ``langsmith.evaluation.evaluate`` and ``aevaluate`` offline (no
upload, every non-loopback connection refused), and round-tripped through
``from_openevals``."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langsmith import Client
from langsmith.evaluation import aevaluate, evaluate
from langsmith.schemas import Example

from loop_agents import create_loop_agent
from loop_agents.evaluators import (
    all_of,
    as_openevals,
    as_openevals_async,
    from_openevals,
    rule,
    text_rule,
)
from loop_agents.evaluators.openevals import loop_context

openevals_exact = pytest.importorskip("openevals.exact")


def capitals(text: str) -> bool:
    return text.isupper()


shout = text_rule(capitals, "Write it in capitals.", name="Shout Check")


async def scored(context):
    """An async evaluator with a score: the share of capital letters, 0 to 100."""
    text = context["last_response"].text
    letters = [c for c in text if c.isalpha()]
    share = 100.0 * sum(c.isupper() for c in letters) / max(1, len(letters))
    if share == 100:
        return {"stop": True, "score": share}
    return {"stop": False, "score": share, "feedback": f"{share:g}% capitals."}


@pytest.fixture
def offline(monkeypatch):
    """Refuse every connection that is not to loopback; no tracing."""
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("LANGCHAIN_TRACING_V2", "false")
    connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"the test is offline: no connection to {address!r}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return Client(api_key="offline", api_url="http://127.0.0.1:9", auto_batch_tracing=False)


def test_the_result_has_openevals_keys_and_types():
    result = as_openevals(shout)(inputs="Say hi.", outputs="HI")
    reference = openevals_exact.exact_match(outputs="HI", reference_outputs="HI")
    assert set(result) == set(reference) == {"key", "score", "comment", "metadata"}
    assert result == {
        "key": "shout_check",
        "score": True,
        "comment": None,
        "metadata": {"loop_stop": True},
    }
    failed = as_openevals(shout, key="capitals")(inputs="Say hi.", outputs="hi")
    assert failed["key"] == "capitals"
    assert failed["score"] is False
    assert failed["comment"] == "Write it in capitals."
    numbered = as_openevals(scored, score="number")(outputs="Hi")
    assert numbered["score"] == 50.0
    assert numbered["metadata"] == {"loop_stop": False, "loop_score": 50.0}
    assert numbered["comment"] == "50% capitals."
    both = all_of(shout, rule(lambda context: {"stop": True}, name="fine"))
    assert as_openevals(both)(outputs="hi")["metadata"]["decided_by"] == ["Shout Check"]


def test_async_twin_and_sync_wrapper_of_an_async_evaluator_agree():
    sync_result = as_openevals(scored)(inputs="x", outputs="HI there")
    async_result = asyncio.run(as_openevals_async(scored)(inputs="x", outputs="HI there"))
    assert sync_result == async_result
    assert sync_result["score"] is False
    assert asyncio.iscoroutinefunction(as_openevals_async(shout))
    assert not asyncio.iscoroutinefunction(as_openevals(scored))


def test_inputs_and_outputs_become_a_loop_context():
    context = loop_context(
        [{"role": "system", "content": "Be loud."}, {"role": "user", "content": "Greet."}],
        {"messages": [HumanMessage("Greet."), AIMessage("HELLO")], "files": {"/a.txt": "1"}},
    )
    assert [m.type for m in context["init_messages"]] == ["system", "human"]
    assert context["last_response"].text == "HELLO"
    assert [m.text for m in context["messages"]] == ["Greet.", "HELLO"]
    assert context["agent_state"] == {"files": {"/a.txt": "1"}}
    assert (context["iteration"], context["feedback"]) == (1, [])
    # LangSmith's shapes: a dataset's inputs mapping, a target's {"output": ...}
    asked = loop_context({"question": "Greet."}, {"output": "HI", "tokens": 3})
    assert asked["init_messages"][0].text == "Greet."
    assert (asked["last_response"].text, asked["agent_state"]) == ("HI", {"tokens": 3})
    several = loop_context({"question": "Greet.", "tone": "loud"}, AIMessage("HI"))
    assert several["init_messages"][0].text == '{"question": "Greet.", "tone": "loud"}'
    # a loop's own output: its agent_state, and the request read from its messages
    looped = loop_context(
        None,
        {"messages": [HumanMessage("Greet."), AIMessage("HI")], "agent_state": {"todos": []},
         "iteration": 1, "records": []},
    )  # fmt: skip
    assert looped["agent_state"] == {"todos": []}
    assert [m.text for m in looped["init_messages"]] == ["Greet."]


@pytest.mark.parametrize(
    ("call", "error", "phrase"),
    [
        (lambda: as_openevals(42), TypeError, "evaluator must be a function"),
        (lambda: as_openevals(shout, score="bool"), ValueError, "score must be 'verdict'"),
        (lambda: as_openevals(shout, key=""), TypeError, "key must be a non-empty string"),
        (lambda: as_openevals(shout)(outputs={"a": 1}), ValueError, "outputs holds no answer"),
        (
            lambda: as_openevals(shout, score="number")(outputs="HI"),
            ValueError,
            "gave no score; use as_openevals\\(..., score='verdict'\\)",
        ),
        (
            lambda: as_openevals(lambda context: 42.0)(outputs="HI"),
            ValueError,
            "without a verdict; use as_openevals\\(..., score='number'\\)",
        ),
        (
            lambda: as_openevals(lambda context: {"stop": "yes"})(outputs="HI"),
            ValueError,
            "'stop' must be True or False",
        ),
    ],
)
def test_mistakes_are_named(call, error, phrase):
    with pytest.raises(error, match=phrase):
        call()


def examples() -> list[Example]:
    dataset = uuid.uuid4()
    return [
        Example(id=uuid.uuid4(), dataset_id=dataset, inputs={"question": q}, outputs=None)
        for q in ("say hi", "SAY BYE")
    ]


def target(inputs: dict) -> dict:
    """An app that echoes the question: right (capitals) for the second example only."""
    question = inputs["question"]
    return {"messages": [HumanMessage(question), AIMessage(question)]}


def test_langsmith_evaluate_runs_them_as_its_own(offline):
    results = evaluate(
        target,
        data=examples(),
        evaluators=[as_openevals(shout), as_openevals(scored, key="share", score="number")],
        client=offline,
        upload_runs=False,
        disable_evaluator_tracing=True,
    )
    rows = {
        row["example"].inputs["question"]: {
            r.key: (r.score, r.comment) for r in row["evaluation_results"]["results"]
        }
        for row in results
    }
    assert rows == {
        "say hi": {
            "shout_check": (False, "Write it in capitals."),
            "share": (0.0, "0% capitals."),
        },
        "SAY BYE": {"shout_check": (True, None), "share": (100.0, None)},
    }


def test_langsmith_aevaluate_runs_the_async_twin(offline):
    async def atarget(inputs: dict) -> dict:
        return target(inputs)

    async def run() -> dict:
        results = await aevaluate(
            atarget,
            data=examples(),
            evaluators=[as_openevals_async(scored, key="loud")],
            client=offline,
            upload_runs=False,
            disable_evaluator_tracing=True,
        )
        found = {}
        async for row in results:
            (result,) = row["evaluation_results"]["results"]
            found[row["example"].inputs["question"]] = (result.key, result.score)
        return found

    assert asyncio.run(run()) == {"say hi": ("loud", False), "SAY BYE": ("loud", True)}


def test_a_round_trip_through_from_openevals_gives_the_same_loop():
    def run(evaluator):
        answers = iter(["hi", "Hi", "HI"])
        loop = create_loop_agent(lambda messages: next(answers), evaluator, 3)
        result = loop.invoke({"messages": [HumanMessage("Greet.")]})
        return result["iteration"], result["feedback"], [r["stop"] for r in result["records"]]

    assert run(from_openevals(as_openevals(shout))) == run(shout)
    assert run(shout) == (3, ["Write it in capitals.", "Write it in capitals.", ""], [
        False, False, True])  # fmt: skip
