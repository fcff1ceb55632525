"""configurable_loop (task, rubric, threshold, human review per run) and the served factories."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from loop_agents.controls import Budgets
from loop_agents_cli.models.settings import ModelSettings, SettingsError
from loop_agents_cli.serving import graphs as serve
from loop_agents_cli.serving.configurable import (
    DEFAULT_RUBRIC,
    DEFAULT_TASK,
    configurable_loop,
    loop_settings,
)
from tests.fakes import review
from tests.scripted_openai import ScriptedOpenAI, Structured

REQUEST = HumanMessage("Name our new ETL tool.")
TASK = "You name software products."
RUBRIC = "Score the name 0-100: short, memorable, unused."


def scripted(*replies):
    server = ScriptedOpenAI(replies)
    model = ModelSettings(api_key="sk-test").chat_model(
        http_client=server.client(), http_async_client=server.async_client()
    )
    return server, model


def roles_and_texts(request: dict) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in request["messages"]]


def test_task_rubric_and_threshold_from_the_run_context():
    server, model = scripted(
        "Pipely",
        Structured({"feedback": "Taken by another tool.", "score": 80}),
        "Streamwright",
        Structured({"feedback": "Good.", "score": 90}),
    )
    loop = configurable_loop(model)
    result = loop.invoke(
        {"messages": [REQUEST]}, context={"task": TASK, "rubric": RUBRIC, "threshold": 85}
    )
    agent_1, judge_1, agent_2, judge_2 = server.requests
    assert roles_and_texts(agent_1) == [("system", TASK), ("user", REQUEST.text)]
    assert roles_and_texts(judge_1) == [
        ("system", RUBRIC),
        ("user", REQUEST.text),
        ("assistant", "Pipely"),
    ]
    # 80 is below the run's threshold of 85: the feedback went back to the agent
    assert roles_and_texts(agent_2)[-1] == (
        "user",
        review("Taken by another tool.\n\nScore: 80", 1),
    )
    assert roles_and_texts(judge_2)[-1] == ("assistant", "Streamwright")
    assert result["stop_reason"] == "accepted"
    assert [r["score"] for r in result["records"]] == [80.0, 90.0]


async def test_settings_from_config_configurable_and_context_wins():
    server, model = scripted("Pipely", Structured({"feedback": "Fine.", "score": 60}))
    loop = configurable_loop(model)
    result = await loop.ainvoke(
        {"messages": [REQUEST]},
        {"configurable": {"task": TASK, "threshold": 95, "rubric": "from config"}},
        context={"rubric": RUBRIC, "threshold": 50},
    )
    agent, judge = server.requests
    assert agent["messages"][0] == {"role": "system", "content": TASK}
    assert judge["messages"][0] == {"role": "system", "content": RUBRIC}
    assert result["stop_reason"] == "accepted"  # 60 passes the context's 50


def test_defaults_when_the_run_sets_nothing():
    server, model = scripted("Pipely", Structured({"feedback": "Fine.", "score": 75}))
    result = configurable_loop(model).invoke({"messages": [REQUEST]})
    agent, judge = server.requests
    assert agent["messages"][0]["content"] == DEFAULT_TASK
    assert judge["messages"][0]["content"] == DEFAULT_RUBRIC
    assert result["stop_reason"] == "accepted"  # the default threshold is 75


def test_builder_defaults_and_cap():
    server, model = scripted(
        "a",
        Structured({"feedback": "no", "score": 10}),
        "b",
        Structured({"feedback": "no", "score": 10}),
    )
    loop = configurable_loop(model, max_iterations=2, defaults={"task": TASK, "threshold": 20})
    result = loop.invoke({"messages": [REQUEST]})
    assert server.requests[0]["messages"][0]["content"] == TASK
    assert result["stop_reason"] == "max_iterations"
    assert result["iteration"] == 2


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"threshold": 150}, r"'threshold' must be a number from 0 to 100 .*got 150"),
        ({"threshold": "80"}, r"'threshold' must be a number from 0 to 100 .*got '80'"),
        ({"threshold": True}, r"'threshold' must be a number"),
        ({"task": ""}, r"loop setting 'task' must be a non-empty string; got ''"),
        ({"rubric": 3}, r"loop setting 'rubric' must be a non-empty string; got 3"),
        ({"human_review": "yes"}, r"'human_review' must be true or false; got 'yes'"),
    ],
)
def test_bad_settings_name_the_setting(context, message):
    _, model = scripted("x", Structured({"feedback": "ok", "score": 90}))
    with pytest.raises(ValueError, match=message):
        configurable_loop(model).invoke({"messages": [REQUEST]}, context=context)


def test_bad_builder_defaults_fail_at_build_time():
    _, model = scripted("x")
    with pytest.raises(ValueError, match="'threshold' must be a number from 0 to 100"):
        configurable_loop(model, defaults={"threshold": -1})


def test_loop_settings_ignores_other_keys():
    settings = loop_settings({"configurable": {"thread_id": "t", "threshold": 90, "model": "x"}})
    assert settings == {
        "task": DEFAULT_TASK,
        "rubric": DEFAULT_RUBRIC,
        "threshold": 90.0,
        "human_review": False,
    }


def test_human_review_after_the_judge():
    server, model = scripted(
        "Pipely",
        Structured({"feedback": "Good.", "score": 90}),
        "Streamwright",
        Structured({"feedback": "Good.", "score": 92}),
    )
    loop = configurable_loop(model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "review", "human_review": True}}
    paused = loop.invoke({"messages": [REQUEST]}, config)
    (interrupt,) = paused["__interrupt__"]
    assert interrupt.value["answer"] == "Pipely"
    assert interrupt.value["judge"]["score"] == 90.0

    paused = loop.invoke(Command(resume="Too close to an existing product."), config)
    assert paused["__interrupt__"][0].value["answer"] == "Streamwright"
    assert server.requests[2]["messages"][-1] == {
        "role": "user",
        "content": review("Too close to an existing product.", 1),
        "name": "loop_feedback",  # the tag of an injected message
    }
    result = loop.invoke(Command(resume=True), config)
    assert result["stop_reason"] == "accepted"
    assert result["last_response"].text == "Streamwright"
    assert len(server.requests) == 4  # the judge was not called again on resume


# -- the served factories ------------------------------------------------------------


@pytest.fixture
def model_env(monkeypatch):
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "LOOP_AGENTS_MAX_ITERATIONS",
        "LOOP_AGENTS_FORM_CHECK",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir("/")  # no .env above the working directory
    return monkeypatch


def test_factories_build_from_the_environment_once(model_env):
    model_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model_env.setenv("LOOP_AGENTS_MAX_ITERATIONS", "4")
    song = serve.song_lyrics()
    assert song is serve.song_lyrics()
    assert set(song.get_graph().nodes) >= {"invoke_agent", "evaluate"}
    generic = serve.configurable_loop()
    assert generic is serve.configurable_loop()
    assert generic.name == "configurable_loop"
    model_env.setenv("LOOP_AGENTS_MAX_ITERATIONS", "2")
    assert serve.configurable_loop() is not generic


def test_factories_say_what_to_set(model_env):
    with pytest.raises(SettingsError, match=r"set OPENAI_API_KEY .* or OPENAI_BASE_URL"):
        serve.song_lyrics()
    model_env.setenv("OPENAI_API_KEY", "sk-test")
    model_env.setenv("LOOP_AGENTS_MAX_ITERATIONS", "zero")
    with pytest.raises(SettingsError, match=r"LOOP_AGENTS_MAX_ITERATIONS='zero' must be a whole"):
        serve.configurable_loop()


def test_show_criteria_puts_the_run_s_rubric_in_the_agent_s_prompt():
    from loop_agents.controls.criteria import criteria_note

    server, model = scripted("Pipely", Structured({"feedback": "Good.", "score": 90}))
    loop = configurable_loop(model, show_criteria=True, controls=[Budgets(request_budget=10)])
    loop.invoke({"messages": [REQUEST]}, context={"task": TASK, "rubric": RUBRIC})
    system = server.requests[0]["messages"][0]
    assert system == {"role": "system", "content": f"{TASK}\n\n{criteria_note(RUBRIC)}"}
    with pytest.raises(TypeError, match="show_criteria must be True or False"):
        configurable_loop(model, show_criteria="yes")  # type: ignore[arg-type]
