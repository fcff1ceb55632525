"""Arms of your own: a loop built from options (`loop`), a factory returning a
`create_loop_agent` graph, a ``create_agent`` graph or a plain runnable, and an output
shaped as a loop middleware's; each graded, journaled, resumed, compared and drawn as
the built-in arms are, on scripted OpenAI-compatible models."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from loop_agents import create_loop_agent
from loop_agents.controls import (
    Adaptive,
    Advice,
    AnswerSelection,
    Candidates,
    DiverseFirst,
    FeedbackStyle,
    History,
    Repair,
    Restart,
    Stagnation,
)
from loop_agents.loop.feedback import feedback_message
from loop_agents_evals import (
    EvalSettings,
    JournalError,
    arun_eval,
    eval_page,
    loop,
    render_report,
    task_messages,
    visible_checks,
)
from loop_agents_evals.arm_protocol import describe_value
from loop_agents_evals.arms import BUILTIN_ARMS
from loop_agents_evals.factory_arm import ArmFactoryError
from loop_agents_evals.journal import journal_path
from loop_agents_evals.tasks import parse_task
from tests.eval_models import ReactiveOpenAI
from tests.fakes import FakeChat
from tests.html_pages import Page


def shout_tasks(count: int):
    return [
        parse_task(
            {
                "id": f"t{i}",
                "kind": "instructions",
                "prompt": f"Task t{i}: reply OK in capitals.",
                "checks": [{"check": "case", "case": "upper"}],
            }
        )
        for i in range(count)
    ]


def copies_unless_fresh(body: dict) -> str:
    """Copies its old answer when it sees it; right when told the failures without it."""
    messages = body["messages"]
    if any(m["role"] == "assistant" for m in messages):
        return "ok"
    return "OK" if sum(m["role"] == "user" for m in messages) > 1 else "ok"


FRESH_LOG = [History("feedback_log"), FeedbackStyle("{feedback}")]


def always(text: str):
    return lambda body: text


async def test_a_loop_built_from_options_is_graded_compared_journaled_and_drawn(tmp_path):
    server = ReactiveOpenAI(copies_unless_fresh)
    out = tmp_path / "r.json"
    arms = {
        "single": "single",
        "loop": "loop",
        "resample": "resample",
        "fresh-log": loop(controls=FRESH_LOG),
    }
    report = await arun_eval(shout_tasks(3), server.chat_model(), arms=arms, iterations=3, out=out)
    assert {a: (s.passed, s.tasks) for a, s in report.arms.items()} == {
        "single": (0, 3),
        "loop": (0, 3),
        "resample": (0, 3),
        "fresh-log": (3, 3),
    }
    assert report.by_attempt["fresh-log"] == [0.0, 1.0, 1.0]
    assert report.arms["fresh-log"].model_calls == 2
    assert report.arms["fresh-log"].budget == 3
    comparisons = {(c.arm, c.baseline): (c.won, c.lost, c.tied) for c in report.comparisons}
    assert comparisons[("fresh-log", "resample")] == (3, 0, 0)
    assert comparisons[("fresh-log", "single")] == (3, 0, 0)
    assert ("fresh-log", "loop") not in comparisons
    result = next(r for r in report.results if r.arm == "fresh-log")
    assert [(e["answer"], e["ok"], e["passed"], e["iteration"]) for e in result.transcript] == [
        ("ok", False, False, 1),
        ("OK", True, True, 2),
    ]
    assert "uppercase" in result.transcript[0]["feedback"]
    # the request the option-built loop sent: the system message, the task, the feedback
    # log, and never its old answer
    fresh = [b for b in server.requests if copies_unless_fresh(b) == "OK"]
    assert len(fresh) == 3
    assert all(b["messages"][0]["role"] == "system" for b in fresh)
    # what the arm is, in the report's settings and declared in the journal
    identity = report.settings["arms"]["fresh-log"]
    assert (identity["kind"], identity["evaluator"]) == ("loop", "tests")
    history, style = identity["controls"]
    assert history["type"] == "loop_agents.controls.history:History"
    assert history["policy"] == "feedback_log"
    assert style == {
        "type": "loop_agents.controls.feedback_format:FeedbackStyle",
        "format": "{feedback}",
    }
    assert report.settings["arms"] == {"fresh-log": identity}
    assert report.settings["temperatures"]["fresh-log"] == 1.0
    lines = [json.loads(line) for line in journal_path(out).read_text().splitlines()]
    declared = [line for line in lines if "loop_agents_eval_arm" in line]
    assert declared == [
        {"loop_agents_eval_arm": "fresh-log", "arm": {"identity": identity, "temperature": 1.0}}
    ]
    assert "fresh-log" not in json.dumps(lines[0])  # the header is the built-in arms' own
    # resumed: nothing runs again, the same results
    asked = len(server.requests)
    again = await arun_eval(shout_tasks(3), server.chat_model(), arms=arms, iterations=3, out=out)
    assert len(server.requests) == asked
    assert [r.transcript for r in again.results] == [r.transcript for r in report.results]
    # the tables and the page show it like any arm
    page = Page(eval_page(report.to_json()))
    assert "fresh-log vs resample" in page.text
    assert "Answer 2 (a repair: sent its earlier answers and their feedback)" in page.text


async def test_another_arm_under_the_same_name_is_refused_and_a_new_arm_resumes(tmp_path):
    server = ReactiveOpenAI(copies_unless_fresh)
    out = tmp_path / "r.json"
    tasks = shout_tasks(2)
    first = {"resample": "resample", "mine": loop(controls=[History("feedback_log")])}
    await arun_eval(tasks, server.chat_model(), arms=first, iterations=2, out=out)
    asked = len(server.requests)
    other = {"resample": "resample", "mine": loop(controls=[History("last_attempt")])}
    with pytest.raises(
        JournalError,
        match=r"another arm named 'mine' \(identity.controls.0.policy 'feedback_log' there, "
        r"'last_attempt' now\)",
    ):
        await arun_eval(tasks, server.chat_model(), arms=other, iterations=2, out=out)

    def mine(task, model, settings):
        return model

    with pytest.raises(JournalError, match=r"identity.factory .*test_eval_custom_arms:"):
        await arun_eval(tasks, server.chat_model(), arms={"mine": mine}, iterations=2, out=out)
    with pytest.raises(JournalError, match=r"identity.kind 'loop' there, 'factory' now"):
        await arun_eval(tasks, server.chat_model(), arms={"mine": mine}, iterations=2, out=out)
    assert len(server.requests) == asked  # no refused eval called the model
    # another temperature for the arm is another arm
    with pytest.raises(JournalError, match=r"temperature 1.0 there, 0.5 now"):
        await arun_eval(tasks, server.chat_model(), arms=first, iterations=2, out=out, settings=EvalSettings(arm_temperatures={'mine': 0.5}))  # fmt: skip
    # an arm added to the eval: its pairs run, the others resume
    more = first | {"stagnant": loop(controls=[Stagnation()])}
    report = await arun_eval(tasks, server.chat_model(), arms=more, iterations=2, out=out)
    assert len(server.requests) - asked == 2 * 2  # two tasks, two answers each (no pass)
    assert set(report.arms) == {"resample", "mine", "stagnant"}
    assert report.settings["arms"]["stagnant"]["controls"][0]["type"] == (
        "loop_agents.controls.stagnation:Stagnation"
    )


def loop_factory(task, model, settings):
    """An arm of one's own: a create_loop_agent loop judged by the task's visible checks.

    A repair loop (the default): the scripted model below is right only when it is shown
    its answer.
    """
    return create_loop_agent(
        model, visible_checks(task), settings.iterations, controls=[Candidates(2)]
    )


async def test_a_factory_loop_is_read_attempt_by_attempt_from_its_records():
    def right_after_feedback(body):
        return "OK" if any(m["role"] == "assistant" for m in body["messages"]) else "ok"

    server = ReactiveOpenAI(right_after_feedback)
    report = await arun_eval(
        shout_tasks(2), server.chat_model(), arms={"mine": loop_factory}, iterations=3
    )
    assert (report.arms["mine"].passed, report.arms["mine"].opaque) == (2, False)
    result = report.results[0]
    # 3 iterations of 2 candidates: the second iteration passed, the loop stopped there
    assert result.iterations == 4
    assert result.by_attempt == (False, True, True)
    assert [(e["iteration"], e["candidate"], e["answer"]) for e in result.transcript] == [
        (1, 1, "ok"),
        (1, 2, "ok"),
        (2, 1, "OK"),
        (2, 2, "OK"),
    ]
    assert [e["sent"] for e in result.transcript] == ["first", "first", None, None]
    assert [e["ok"] for e in result.transcript] == [False, False, True, True]
    assert report.settings["arms"]["mine"] == {
        "kind": "factory",
        "factory": "test_eval_custom_arms:loop_factory",
    }
    # the agent was sent what every arm is sent: the system message and the task
    first = server.requests[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[0]["content"] == task_messages(shout_tasks(1)[0])[0].text


def adaptive_loop_factory(task, model, settings):
    """A loop whose `Adaptive` chooses each retry's kind."""
    return create_loop_agent(
        model, visible_checks(task), settings.iterations, controls=[Adaptive(seed=0)]
    )


async def test_a_factory_loop_with_adaptive_has_its_choices_read():
    server = ReactiveOpenAI(always("ok"))  # never passes: every answer after the first is a retry
    report = await arun_eval(
        shout_tasks(2), server.chat_model(), arms={"mine": adaptive_loop_factory}, iterations=3
    )
    assert report.arms["mine"].model_calls == 3
    for result in report.results:
        first, *retries = result.transcript
        assert (first["sent"], "strategy" in first) == ("first", False)
        assert len(retries) == 2
        # what the factory built chose (its records say so)
        assert all(e["sent"] == e["strategy"]["kind"] for e in retries)
        assert {e["sent"] for e in retries} <= {"repair", "fresh", "informed"}
    assert set(report.retry_kinds) == {"mine"}


def test_an_eval_loop_repairs_unless_a_control_chooses_the_kind_of_retry():
    assert loop().controls == []  # a loop repairs by default
    assert [type(c) for c in loop(controls=FRESH_LOG).controls] == [History, FeedbackStyle]
    restart, adaptive = loop(controls=[Restart()]), loop(controls=[Adaptive()])
    assert [type(c) for c in restart.controls] == [Restart]
    assert ([type(c) for c in adaptive.controls], adaptive.learns) == ([Adaptive], True)
    assert not loop().learns
    # the built-in loops are loop(...) arms: loop() is the built-in loop
    assert BUILTIN_ARMS["loop"].identity() == loop().identity()
    assert BUILTIN_ARMS["judge-loop"].identity() == loop(evaluator="judge").identity()
    # a Repair (deprecated) is left out of what the arm is: a journal written when the
    # built-in loops held one resumes
    assert loop().identity()["controls"] == []
    with pytest.warns(DeprecationWarning, match="Repair"):
        explicit = loop(controls=[*FRESH_LOG, Repair()]).identity()
    assert explicit == loop(controls=FRESH_LOG).identity()
    assert [c["type"] for c in explicit["controls"]] == [
        "loop_agents.controls.history:History",
        "loop_agents.controls.feedback_format:FeedbackStyle",
    ]
    assert restart.identity() != loop().identity()


def agent_factory(task, model, settings):
    from langchain.agents import create_agent

    return create_agent(model)


def model_factory(task, model, settings):
    return model


async def test_a_create_agent_graph_and_a_plain_runnable_are_opaque_and_said_so(capsys):
    server = ReactiveOpenAI(always("OK"))
    report = await arun_eval(
        shout_tasks(2),
        server.chat_model(),
        arms={"single": "single", "agent": agent_factory, "model": model_factory},
        iterations=3,
    )
    for arm in ("agent", "model"):
        summary = report.arms[arm]
        assert (summary.passed, summary.opaque, summary.model_calls) == (2, True, 1)
        assert report.by_attempt[arm] == [1.0]
        result = next(r for r in report.results if r.arm == arm)
        assert result.opaque
        assert [e["answer"] for e in result.transcript] == ["OK"]
    assert not report.arms["single"].opaque
    render_report(report)
    shown = " ".join(capsys.readouterr().out.split())
    assert "agent, model: attempts not readable (the agent is not a loop)" in shown
    page = Page(eval_page(report.to_json()))
    assert "agent, model: the agent's attempts cannot be read" in page.text
    assert "The agent's attempts cannot be read (not a loop): its final answer only." in page.text


def middleware_output(messages):
    """What a loop run as create_agent middleware returns: loop_-prefixed records."""
    request = [m for m in messages if isinstance(m, HumanMessage)]
    first, second = AIMessage("ok", id="a1"), AIMessage("OK", id="a2")
    feedback = feedback_message("Use capitals.", iteration=1)
    return {
        "messages": [*request, first, feedback, second],
        "loop_records": [
            {"iteration": 1, "answer_id": "a1", "stop": False, "feedback": "Use capitals.",
             "score": 0.0},
            {"iteration": 2, "answer_id": "a2", "stop": True, "feedback": "", "score": 100.0},
        ],
    }  # fmt: skip


def feedback_turns_only(messages):
    output = middleware_output(messages)
    del output["loop_records"]
    return output


@pytest.mark.parametrize("shape", [middleware_output, feedback_turns_only])
async def test_a_loop_s_output_is_read_from_its_loop_records_or_its_feedback_turns(shape):
    def factory(task, model, settings):
        return RunnableLambda(shape)  # not a graph: it is given the list of messages

    report = await arun_eval(
        shout_tasks(1), FakeChat.of("unused"), arms={"mw": factory}, iterations=3
    )
    (result,) = report.results
    assert not result.opaque
    assert result.by_attempt == (False, True, True)
    assert [(e["answer"], e["ok"], e["feedback"]) for e in result.transcript[:1]] == [
        ("ok", False, "Use capitals.")
    ]
    assert [e["answer"] for e in result.transcript] == ["ok", "OK"]
    assert result.transcript[1]["passed"] is True


@pytest.mark.parametrize(
    ("arms", "options", "error", "phrase"),
    [
        ({"loop": loop()}, {}, ValueError, "'loop' is a built-in arm's name"),
        ({"mine": "resample"}, {}, ValueError, "a built-in arm keeps its name"),
        ({"mine": "best-of"}, {}, ValueError, "arm 'mine': unknown arm 'best-of'"),
        ({"mine": "resampel"}, {}, ValueError, r"arm 'resampel' \(did you mean 'resample'\?\)"),
        (["single", "resampel"], {}, ValueError, r"'resampel' \(did you mean 'resample'\?\)"),
        ({"my arm": loop()}, {}, ValueError, "the arm name 'my arm' is not usable"),
        ({"mine": 42}, {}, TypeError, "arm 'mine' is int 42"),
        ({}, {}, ValueError, "empty mapping"),
        ({"mine": lambda task: task}, {}, TypeError, r"cannot be called as \(task, model"),
        (
            {"mine": loop(controls=[Candidates(2)])},
            {},
            ValueError,
            "budget K must be even; got K=3",
        ),
        ({"mine": loop()}, {"arm_temperatures": {"yours": 0.5}}, ValueError, "unknown arm"),
        (["loop", "mine"], {}, ValueError, "for one of your own, give arms="),
        ({"mine": lambda t, m, s: None}, {}, ArmFactoryError, "returned NoneType None"),
        ({"mine": lambda t, m, s: 1 / 0}, {}, ArmFactoryError, "raised ZeroDivisionError"),
    ],
)
async def test_a_bad_arm_is_refused_before_any_model_call(arms, options, error, phrase):
    server = ReactiveOpenAI(always("OK"))
    settings = EvalSettings(**options)
    with pytest.raises(error, match=phrase):
        await arun_eval(
            shout_tasks(1), server.chat_model(), arms=arms, iterations=3, settings=settings
        )
    assert server.requests == []


@pytest.mark.parametrize(
    ("options", "error", "phrase"),
    [
        (
            {"histroy": "full"},
            TypeError,
            r"^loop\(\) got an unexpected keyword argument 'histroy'$",
        ),
        ({"agent": object()}, TypeError, "does not take agent="),
        ({"max_iterations": 3}, TypeError, "the eval's budget K"),
        ({"output_mode": "last_message"}, TypeError, "does not take output_mode="),
        ({"candidate_temperature": 0.5}, TypeError, "every arm samples at the eval's"),
        (
            {"history": "nope"},
            TypeError,
            r"'history': removed .* pass controls=\[History\('nope'\)\]",
        ),
        ({"evaluator": "rules"}, ValueError, "must be 'tests'"),
        ({"patience": 0}, TypeError, r"'patience': removed in loop_agents 0.3; .*\[Plateau\(0\)\]"),
    ],
)
def test_loop_refuses_what_the_eval_sets_and_what_create_loop_agent_refuses(options, error, phrase):
    with pytest.raises(error, match=phrase):
        loop(**options)


def test_loop_s_old_option_keywords_are_refused_naming_the_control_each_became():
    with pytest.raises(TypeError) as raised:
        loop(history="feedback_log", controls=[Stagnation()])
    assert str(raised.value) == (
        "loop() got an unexpected keyword argument 'history': removed in loop_agents 0.3; "
        "pass controls=[History('feedback_log')]"
    )
    with pytest.raises(TypeError, match=r"pass controls=\[AnswerSelection\('best'\)\]$"):
        loop(select="best")
    arm = loop(controls=[History("feedback_log"), AnswerSelection("best"), Stagnation()])
    assert [type(c) for c in arm.controls] == [History, AnswerSelection, Stagnation]
    with pytest.raises(ValueError, match=r"loop\(\): controls .* cannot work together"):
        loop(controls=[Candidates(2), DiverseFirst(2)])


async def test_arms_of_your_own_do_not_run_on_a_server():
    with pytest.raises(ValueError, match=r"arms of your own \(mine\) run here"):
        await arun_eval(
            shout_tasks(1),
            arms={"mine": loop()},
            settings=EvalSettings(server="http://127.0.0.1:9"),
        )


def test_a_loop_arm_never_writes_a_secret_in_its_identity():
    from langchain_openai import ChatOpenAI

    advisor = ChatOpenAI(model="gpt-x", api_key="sk-very-secret", base_url="http://127.0.0.1:9")
    identity = loop(controls=[Advice(50, model=advisor)]).identity()
    assert "sk-very-secret" not in json.dumps(identity)
    assert identity["controls"][0]["model"]["model_name"] == "gpt-x"


def test_identity_is_the_same_from_one_run_to_the_next():
    def build():
        return loop(controls=[History("feedback_log"), Stagnation()]).identity()

    assert build() == build()
    assert json.loads(json.dumps(build())) == build()
    assert describe_value(loop_factory) == "test_eval_custom_arms:loop_factory"
    assert describe_value(lambda task, model, settings: model) == (
        "test_eval_custom_arms:test_identity_is_the_same_from_one_run_to_the_next.<locals>.<lambda>"
    )


async def test_a_judged_loop_of_your_own_runs_as_judge_loop_does():
    from tests.eval_models import after_feedback, is_judge, verdict

    def respond(body):
        if is_judge(body):
            good = body["messages"][-1]["content"] == "OK"
            return verdict(95, "Good.") if good else verdict(30, "Make it louder.")
        return "OK" if after_feedback(body) else "ok"

    server = ReactiveOpenAI(respond)
    report = await arun_eval(
        shout_tasks(2),
        server.chat_model(),
        arms={"judge-loop": "judge-loop", "judged": loop(evaluator="judge")},
        iterations=3,
        settings=EvalSettings(judge_method="function_calling", judge_temperature=0.25),
    )
    mine, builtin = report.arms["judged"], report.arms["judge-loop"]
    assert (mine.passed, mine.model_calls) == (builtin.passed, builtin.model_calls) == (2, 4)
    assert report.by_attempt["judged"] == report.by_attempt["judge-loop"] == [0.0, 1.0, 1.0]
    assert {b["temperature"] for b in server.requests if is_judge(b)} == {0.25}
    result = next(r for r in report.results if r.arm == "judged")
    assert [(e["ok"], e["score"], e["feedback"].splitlines()[0]) for e in result.transcript] == [
        (False, 30.0, "Make it louder."),
        (True, 95.0, "Good."),
    ]


async def test_arun_arm_runs_one_task_under_a_factory_by_its_name():
    from loop_agents_evals import ArmSettings, arun_arm

    server = ReactiveOpenAI(always("OK"))
    outcome = await arun_arm(
        shout_tasks(1)[0],
        model_factory,
        server.chat_model(),
        name="mine",
        settings=ArmSettings(iterations=2, arm_temperatures={"mine": 0.3}),
    )
    assert (outcome.passed, outcome.opaque, outcome.by_attempt) == (True, True, (True,))
    assert [b["temperature"] for b in server.requests] == [0.3]
