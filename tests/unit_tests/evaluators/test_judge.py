"""llm_judge: structured verdicts, an enforced scale, retries, templates, both call paths."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from loop_agents import JudgeError, create_loop_agent, llm_judge
from loop_agents.evaluators.verdict_schema import default_schema, with_scale
from loop_agents.loop.feedback import is_feedback
from tests.fakes import FakeChat, review
from tests.scripted_openai import ScriptedOpenAI, Structured

REQUEST = HumanMessage("Write a haiku about rain.")


def judge_model(server: ScriptedOpenAI) -> ChatOpenAI:
    return ChatOpenAI(
        model="m",
        api_key="sk-test",
        http_client=server.client(),
        http_async_client=server.async_client(),
    )


def context(answer: str = "rain on the roof", iteration: int = 1):
    reply = AIMessage(answer, id=f"a{iteration}")
    return {
        "iteration": iteration,
        "init_messages": [REQUEST],
        "last_response": reply,
        "feedback": [],
        "messages": [REQUEST, reply],
    }


def roles(request: dict) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in request["messages"]]


# -- verdicts ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
async def test_judge_scores_and_formats_feedback(method):
    server = ScriptedOpenAI(
        [
            Structured({"feedback": "Vivid.", "score": 82}),
            Structured({"feedback": "Flat.", "score": 40}),
        ]
    )
    judge = llm_judge(judge_model(server), "Score the haiku.", threshold=75, method=method)
    assert judge.invoke(context()) == {
        "stop": True,
        "feedback": "Vivid.\n\nScore: 82",
        "score": 82.0,
    }
    assert await judge.ainvoke(context()) == {
        "stop": False,
        "feedback": "Flat.\n\nScore: 40",
        "score": 40.0,
    }
    for request in server.requests:
        # the judge sees its instructions, the original request and the latest answer
        assert roles(request) == [
            ("system", "Score the haiku."),
            ("user", REQUEST.text),
            ("assistant", "rain on the roof"),
        ]
        if method == "json_schema":
            assert request["response_format"]["type"] == "json_schema"
            assert request["response_format"]["json_schema"]["name"] == "Verdict"
            assert "tools" not in request
        else:
            assert request["tools"][0]["function"]["name"] == "Verdict"
            assert "response_format" not in request


def test_score_outside_the_scale_is_asked_again():
    server = ScriptedOpenAI(
        [
            Structured({"feedback": "Superb!", "score": 160}),
            Structured({"feedback": "Good.", "score": 80}),
        ]
    )
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    assert judge.invoke(context()) == {
        "stop": True,
        "feedback": "Good.\n\nScore: 80",
        "score": 80.0,
    }
    assert len(server.requests) == 2
    correction = server.requests[1]["messages"][-1]
    assert correction["role"] == "user"
    assert "160 is outside the scale 0-100" in correction["content"]
    assert roles(server.requests[1])[:3] == roles(server.requests[0])


def test_score_of_160_never_passes():
    server = ScriptedOpenAI([Structured({"feedback": "Superb!", "score": 160})] * 3)
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, retries=2)
    with pytest.raises(JudgeError, match=r"score 160 is outside the scale 0-100") as caught:
        judge.invoke(context())
    assert len(server.requests) == 3  # one try and two retries, then an error
    assert len(caught.value.problems) == 3
    assert "after 3 attempts" in str(caught.value)


async def test_unparseable_verdict_is_retried_then_an_error():
    server = ScriptedOpenAI(
        ["I liked it a lot, 9/10", Structured({"feedback": "Fine.", "score": 77})]
    )
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    assert (await judge.ainvoke(context()))["score"] == 77.0
    assert "did not parse" in server.requests[1]["messages"][-1]["content"]

    server = ScriptedOpenAI(["no json here"] * 2)
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, retries=1)
    with pytest.raises(JudgeError, match=r"did not parse.*'no json here'"):
        await judge.ainvoke(context())
    assert len(server.requests) == 2


def test_function_calling_reply_without_a_call_is_retried():
    server = ScriptedOpenAI(["Score: 80", Structured({"feedback": "Ok.", "score": 80})])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, method="function_calling")
    assert judge.invoke(context())["score"] == 80.0
    assert "held no verdict" in server.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("verdict", "problem"),
    [
        ({"feedback": "x"}, "has no 'score'"),
        ({"feedback": "x", "score": "high"}, "'score' is 'high', not a number"),
        ({"feedback": "x", "score": True}, "not a number"),
        ({"feedback": "x", "score": -1}, "score -1 is outside the scale 0-100"),
        ({"score": 50}, "'feedback' is None, not a text"),
    ],
)
def test_bad_verdicts_are_errors(verdict, problem):
    server = ScriptedOpenAI([Structured(verdict)])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, retries=0)
    with pytest.raises(JudgeError, match=problem):
        judge.invoke(context())


NOT_FINITE = [
    ('{"feedback": "Superb!", "score": 1e400}', "'score' is inf, not a finite number"),
    ('{"feedback": "Superb!", "score": Infinity}', "'score' is inf, not a finite number"),
    ('{"feedback": "Superb!", "score": NaN}', "'score' is nan, not a finite number"),
    ('{"feedback": "Superb!", "score": ' + "9" * 400 + "}", "an int of 400 digits, not a finite"),
    ('{"feedback": "Superb!", "score": "1e400"}', "'score' is inf, not a finite number"),
]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
@pytest.mark.parametrize(("reply", "problem"), NOT_FINITE)
def test_a_score_that_is_not_a_finite_number_is_asked_again_and_never_passes(
    method, reply, problem
):
    server = ScriptedOpenAI([Structured(reply), Structured({"feedback": "Good.", "score": 80})])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, method=method)
    assert judge.invoke(context())["score"] == 80.0
    assert problem in server.requests[1]["messages"][-1]["content"]

    server = ScriptedOpenAI([Structured(reply)] * 2)
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, method=method, retries=1)
    with pytest.raises(JudgeError, match=problem):
        judge.invoke(context())
    assert len(server.requests) == 2


async def test_a_huge_score_in_a_loop_is_a_judge_error_not_an_overflow():
    reply = Structured('{"feedback": "Superb!", "score": ' + "9" * 400 + "}")
    server = ScriptedOpenAI([reply] * 3)
    loop = create_loop_agent(
        FakeChat.of("rain"), llm_judge(judge_model(server), "Score it.", threshold=75), 2
    )
    with pytest.raises(JudgeError, match="not a finite number"):
        await loop.ainvoke({"messages": [REQUEST]})


def test_a_score_just_over_the_top_is_reported_exactly_as_out_of_range():
    server = ScriptedOpenAI(
        [
            Structured({"feedback": "Superb!", "score": 100.0000001}),
            Structured({"feedback": "Good.", "score": 80}),
        ]
    )
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    assert judge.invoke(context())["score"] == 80.0
    correction = server.requests[1]["messages"][-1]["content"]
    assert "the score 100.0000001 is outside the scale 0-100" in correction
    assert "out of range: it must be from 0 to 100" in correction


def test_numeric_text_score_is_read():
    server = ScriptedOpenAI([Structured({"feedback": "Ok.", "score": " 85 "})])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75)
    assert judge.invoke(context())["score"] == 85.0


# -- schema, scale, template, view -------------------------------------------------------


class Review(BaseModel):
    """评估结果"""

    feedback: str = Field(description="评语")
    rhyme: str = Field(description="押韵评价")
    grade: int = Field(description="分数（十分制）")


def test_user_schema_scale_and_template():
    server = ScriptedOpenAI([Structured({"feedback": "意境清婉。", "rhyme": "押尤韵", "grade": 7})])
    judge = llm_judge(
        judge_model(server),
        "请评价这首词。",
        threshold=8,
        scale=(0, 10),
        schema=Review,
        score_key="grade",
        template="{feedback}\n{rhyme}\n\n综合得分：{score}/{high}（及格 {threshold}）",
    )
    assert judge.invoke(context()) == {
        "stop": False,
        "feedback": "意境清婉。\n押尤韵\n\n综合得分：7/10（及格 8）",
        "score": 7.0,
    }
    assert server.requests[0]["response_format"]["json_schema"]["name"] == "Review"


def test_template_format_specs():
    server = ScriptedOpenAI([Structured({"feedback": "Ok.", "score": 72.5})])
    judge = llm_judge(
        judge_model(server),
        "Score.",
        threshold=70,
        template="{feedback} [{score:.0f}/{high}; {score}]",
    )
    assert judge.invoke(context())["feedback"] == "Ok. [72/100; 72.5]"


def test_whole_conversation_is_shown_when_asked():
    server = ScriptedOpenAI([Structured({"feedback": "Better.", "score": 90})])
    judge = llm_judge(judge_model(server), "Score it.", threshold=75, whole_conversation=True)
    first, second = AIMessage("draft one", id="a1"), AIMessage("draft two", id="a2")
    ctx = {
        "iteration": 2,
        "init_messages": [REQUEST],
        "last_response": second,
        "feedback": ["Too dry."],
        "messages": [REQUEST, first, HumanMessage("Too dry."), second],
    }
    judge.invoke(ctx)
    assert roles(server.requests[0]) == [
        ("system", "Score it."),
        ("user", REQUEST.text),
        ("assistant", "draft one"),
        ("user", "Too dry."),
        ("assistant", "draft two"),
    ]


# -- in a loop: invoke and ainvoke ------------------------------------------------------


def script() -> ScriptedOpenAI:
    return ScriptedOpenAI(
        [
            Structured({"feedback": "More rain.", "score": 55}),
            Structured({"feedback": "Yes.", "score": 91}),
        ]
    )


def test_judge_in_a_loop_with_invoke():
    server = script()
    loop = create_loop_agent(
        FakeChat.of("dry haiku", "wet haiku"),
        llm_judge(judge_model(server), "Score.", threshold=75),
        3,
    )
    result = loop.invoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "accepted"
    assert [r["score"] for r in result["records"]] == [55.0, 91.0]
    assert result["messages"][2].text == review("More rain.\n\nScore: 55", 1)
    assert is_feedback(result["messages"][2])
    assert [r["decided_by"] for r in result["records"]] == [["llm_judge"], ["llm_judge"]]
    # the judge's tokens (the scripted server reports 11 in, 7 out) are recorded
    assert [
        (r["evaluator_input_tokens"], r["evaluator_output_tokens"]) for r in result["records"]
    ] == [
        (11, 7),
        (11, 7),
    ]


async def test_judge_in_a_loop_with_ainvoke():
    server = script()
    loop = create_loop_agent(
        FakeChat.of("dry haiku", "wet haiku"),
        llm_judge(judge_model(server), "Score.", threshold=75),
        3,
    )
    result = await loop.ainvoke({"messages": [REQUEST]})
    assert result["stop_reason"] == "accepted"
    assert result["last_response"].text == "wet haiku"
    assert result["records"][1]["evaluator_input_tokens"] == 11


@pytest.mark.parametrize("structured_output", ["native", "text"])
def test_the_judge_sends_the_rubric_and_the_request_first_and_unchanged(structured_output):
    """A provider can cache the judge's rubric and request: only the attempt changes."""
    if structured_output == "native":
        verdicts = [Structured({"feedback": "Wetter.", "score": s}) for s in (40, 160, 45, 50)]
    else:
        verdicts = ["Score: 40\nFeedback: Wetter.", "Score: 160\nFeedback: Wetter."]
        verdicts += ["Score: 45\nFeedback: Wetter.", "Score: 50\nFeedback: Wetter."]
    server = ScriptedOpenAI(verdicts)
    judge = llm_judge(
        judge_model(server), "Score.", threshold=75, structured_output=structured_output
    )
    drafts = ["draft one", "draft two", "draft three"]
    create_loop_agent(FakeChat.of(*drafts), judge, 3).invoke({"messages": [REQUEST]})
    sent = [roles(request) for request in server.requests]
    assert len(sent) == 4  # iteration 2's verdict was off the scale and asked for again
    rubric = sent[0][0]
    assert rubric[0] == "system"
    assert rubric[1].startswith("Score.")
    for prompt, draft in zip(sent, [drafts[0], drafts[1], drafts[1], drafts[2]], strict=True):
        assert prompt[:3] == [rubric, ("user", REQUEST.text), ("assistant", draft)]
    # asking again changes only the end: the native form adds a message after the
    # attempt, the text form rewrites its last message (the form to reply in)
    if structured_output == "native":
        assert sent[2][:-1] == sent[1]
    else:
        assert sent[2][:-1] == sent[1][:-1]
        assert sent[2][-1] != sent[1][-1]


def test_judge_error_stops_the_loop_loudly():
    server = ScriptedOpenAI([Structured({"feedback": "!", "score": 160})] * 2)
    loop = create_loop_agent(
        FakeChat.of("haiku"), llm_judge(judge_model(server), "Score.", threshold=75, retries=1), 3
    )
    with pytest.raises(JudgeError, match="at iteration 1 after 2 attempts"):
        loop.invoke({"messages": [REQUEST]})


# -- construction errors -----------------------------------------------------------------


def test_construction_errors():
    model = judge_model(ScriptedOpenAI([]))
    with pytest.raises(ValueError, match="threshold 120 is outside the scale 0-100"):
        llm_judge(model, "x", threshold=120)
    with pytest.raises(ValueError, match="low < high"):
        llm_judge(model, "x", threshold=5, scale=(10, 0))
    with pytest.raises(ValueError, match="no field 'score'"):
        llm_judge(model, "x", threshold=5, schema=Review)
    with pytest.raises(ValueError, match=r"uses \['stars'\]"):
        llm_judge(model, "x", threshold=5, template="{feedback} {stars}")
    with pytest.raises(ValueError, match="method must be"):
        llm_judge(model, "x", threshold=5, method="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        llm_judge(model, "x", threshold=5, retries=-1)
    with pytest.raises(TypeError, match="with_structured_output"):
        llm_judge(object(), "x", threshold=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="instructions must be"):
        llm_judge(model, 42, threshold=5)  # type: ignore[arg-type]


def test_huge_or_non_finite_scales_and_thresholds_are_value_errors():
    model = judge_model(ScriptedOpenAI([]))
    with pytest.raises(ValueError, match="low < high, both finite"):
        llm_judge(model, "x", threshold=5, scale=(0, 10**400))
    with pytest.raises(ValueError, match="low < high, both finite"):
        llm_judge(model, "x", threshold=5, scale=(0, float("inf")))
    with pytest.raises(ValueError, match="threshold an int of 401 digits is outside the scale"):
        llm_judge(model, "x", threshold=10**400)
    with pytest.raises(ValueError, match="threshold nan is outside the scale"):
        llm_judge(model, "x", threshold=float("nan"))


# -- the scale in the schema (what a constraining server enforces) ----------------------


class TypedReview(TypedDict):
    """评估结果"""

    score: int
    feedback: str


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_the_scale_is_sent_as_the_score_fields_bounds(method):
    server = ScriptedOpenAI(
        [
            Structured({"feedback": "Vivid.", "score": 82}),
            Structured({"score": 7, "feedback": "意境清婉。"}),
        ]
    )
    llm_judge(judge_model(server), "Score it.", threshold=75, method=method).invoke(context())
    llm_judge(
        judge_model(server),
        "Score it.",
        threshold=8,
        scale=(1, 10),
        schema=TypedReview,
        method=method,
    ).invoke(context())
    sent = []
    for request in server.requests:
        if method == "json_schema":
            sent.append(request["response_format"]["json_schema"]["schema"])
        else:
            sent.append(request["tools"][0]["function"]["parameters"])
    assert sent[0]["properties"]["score"] | {"description": ""} == {
        "type": "number",
        "minimum": 0,
        "maximum": 100,
        "description": "",
    }
    assert sent[1]["properties"]["score"] == {"type": "integer", "minimum": 1, "maximum": 10}
    if method == "json_schema":
        assert server.requests[1]["response_format"]["json_schema"]["name"] == "TypedReview"
    else:
        assert server.requests[1]["tools"][0]["function"]["name"] == "TypedReview"


def test_with_scale_keeps_bounds_given_and_leaves_what_is_not_a_number():
    given = {
        "title": "V",
        "type": "object",
        "properties": {"score": {"type": "number", "maximum": 10}, "note": {"type": "string"}},
    }
    bounded = with_scale(given, "score", (0, 100))
    assert bounded["properties"]["score"] == {"type": "number", "maximum": 10, "minimum": 0}
    assert "minimum" not in given["properties"]["score"]  # the caller's dict is not changed
    assert with_scale(given, "note", (0, 100))["properties"]["note"] == {"type": "string"}
    assert with_scale(Review, "grade", (0, 10)) is Review  # pydantic: Field(ge=, le=) instead
    assert default_schema((0.5, 2.5))["properties"]["score"]["minimum"] == 0.5
