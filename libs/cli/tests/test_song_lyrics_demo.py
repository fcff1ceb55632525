"""The Song-lyrics demo end to end: real ChatOpenAI, scripted OpenAI transport."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import song_lyrics
from langchain_core.messages import HumanMessage
from prompts import composer_system_message, prompt, reviewer_system_message

from loop_agents import JudgeError
from loop_agents.loop.feedback import is_feedback
from loop_agents.loop.records import record_answer
from loop_agents_cli.console.loop_console import section_header
from loop_agents_cli.models.settings import ModelSettings
from tests.conftest import ROOT, env_without_model_settings
from tests.fakes import CI_1, CI_2, review
from tests.scripted_openai import ScriptedOpenAI, Structured

DRAFT_1, DRAFT_2 = CI_1, CI_2  # drafts with the form of 相见欢: the form check passes them on
FORM_RIGHT = "《相见欢》格式正确：上片6、3、9字，下片3、3、3、9字，共36字。"
REVIEW_1 = {"score": 70, "feedback": "格律功夫明显欠缺。"}
REVIEW_2 = {"score": 81, "feedback": "情绪线索尚明。"}


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
async def test_demo_two_iterations(method, capsys):
    server = ScriptedOpenAI([DRAFT_1, Structured(REVIEW_1), DRAFT_2, Structured(REVIEW_2)])
    settings = ModelSettings(api_key="sk-test", structured_output_method=method)
    result = await song_lyrics.run(settings, http_async_client=server.async_client())

    # transcript: request, draft 1, review 1 as feedback, draft 2 (accepted, no feedback)
    kinds = [(m.type, m.text) for m in result["messages"]]
    assert kinds == [
        ("human", prompt),
        ("ai", DRAFT_1),
        ("human", review("格律功夫明显欠缺。\n\n综合得分：70", 1)),
        ("ai", DRAFT_2),
    ]
    assert is_feedback(result["messages"][2])
    assert result["feedback"] == [
        "格律功夫明显欠缺。\n\n综合得分：70",  # the form was right: the reviewer decided
        f"[xiangjianhuan_form]\n{FORM_RIGHT}\n\n[evaluate]\n情绪线索尚明。\n\n综合得分：81",
    ]
    assert result["iteration"] == 2
    assert result["stop_reason"] == "accepted"
    assert [r["score"] for r in result["records"]] == [70.0, 81.0]

    # four requests: composer, reviewer, composer, reviewer
    composer_1, review_1, composer_2, review_2 = server.requests
    assert composer_1["messages"] == [
        {"role": "system", "content": composer_system_message.content},
        {"role": "user", "content": prompt},
    ]
    assert [m["content"] for m in composer_2["messages"]] == [
        composer_system_message.content,
        prompt,
        DRAFT_1,
        review("格律功夫明显欠缺。\n\n综合得分：70", 1),
    ]
    for request, draft in ((review_1, DRAFT_1), (review_2, DRAFT_2)):
        # the reviewer sees its rubric, the original request and the latest draft only
        assert [(m["role"], m["content"]) for m in request["messages"]] == [
            ("system", reviewer_system_message.content),
            ("user", prompt),
            ("assistant", draft),
        ]
        if method == "json_schema":
            assert request["response_format"]["type"] == "json_schema"
            assert "tools" not in request
        else:
            assert request["tools"][0]["function"]["name"] == "Review"
            assert "response_format" not in request

    # the console: each draft under ----Agent----, each review under ----Evaluator----,
    # in the loop's order, then the summary and the verdict
    out = capsys.readouterr().out
    assert out.count(section_header("Agent")) == 2
    assert out.count(section_header("Evaluator")) == 2
    positions = [
        out.index(text)
        for text in (
            "iteration 1 of 3",
            f"{section_header('Agent')}\n{DRAFT_1}\n",
            f"{section_header('Evaluator')}\n格律功夫明显欠缺。\n\n综合得分：70\n",
            "iteration 2 of 3",
            f"{section_header('Agent')}\n{DRAFT_2}\n",
            f"{section_header('Evaluator')}\n[xiangjianhuan_form]\n{FORM_RIGHT}\n",
            "[evaluate]\n情绪线索尚明。\n\n综合得分：81\n",
            "stopped: accepted after 2 of 3 iterations",
            section_header("Verdict"),
            "answer: the draft of iteration 2 (the best, score 81)",
            f"{section_header('Answer')}\n{DRAFT_2}\n",  # the selected draft, at the end
        )
    ]
    assert positions == sorted(positions)
    assert "\x1b" not in out  # captured output is not a terminal: plain lines
    assert "iterations: 2 of 3" in out
    assert "scores: #1: 70, #2: 81" in out
    assert "stopped: the reviewer accepted the ci (score >= 75)" in out


async def test_demo_cap_and_token_limit(capsys):
    server = ScriptedOpenAI([DRAFT_1, Structured(REVIEW_1)] * 3)
    settings = ModelSettings(
        base_url="http://127.0.0.1:9/v1",
        structured_output_method="function_calling",
        max_tokens=64,
    )
    result = await song_lyrics.run(settings, http_async_client=server.async_client())
    assert result["iteration"] == 3
    assert result["stop_reason"] == "max_iterations"
    assert len(server.requests) == 6
    for request in server.requests:
        assert request["max_completion_tokens"] == 64
        assert request["max_tokens"] == 64  # honoured by llama.cpp-style servers
    out = capsys.readouterr().out
    assert "stopped: the cap of 3 iterations was reached" in out
    # all three scored 70: the best is the later on a tie, the last draft
    assert "answer: the draft of iteration 3 (the best, score 70)" in out
    assert result["selected_iteration"] == 3


def test_demo_without_endpoint_exits_with_instructions(tmp_path):
    # no endpoint and no `local` extra: a llama_cpp package without its server shadows
    # the real one (if installed), so the demo must name the one install command; the
    # run on the installed local model is libs/cli/tests/test_local_model.py (slow)
    shadow = tmp_path / "shadow" / "llama_cpp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = env_without_model_settings()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "song_lyrics.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "OPENAI_API_KEY" in proc.stderr
    assert "OPENAI_BASE_URL" in proc.stderr
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in proc.stderr
    assert "pip install" in proc.stderr
    assert "[local]" in proc.stderr
    assert proc.stdout == ""


def test_demo_rejects_bad_setting(tmp_path):
    env = env_without_model_settings()
    env |= {"OPENAI_API_KEY": "sk-test", "LOOP_AGENTS_MAX_TOKENS": "lots"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "song_lyrics.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "LOOP_AGENTS_MAX_TOKENS='lots'" in proc.stderr


def test_settings_from_env():
    settings = ModelSettings.from_env(
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1",
            "LOOP_AGENTS_MODEL": "smol",
            "LOOP_AGENTS_STRUCTURED_OUTPUT": "function_calling",
            "LOOP_AGENTS_MAX_TOKENS": "200",
        }
    )
    assert settings == ModelSettings(
        None, "http://127.0.0.1:8080/v1", "smol", "function_calling", 200
    )
    assert json.dumps(settings.chat_model().extra_body) == '{"max_tokens": 200}'
    with pytest.raises(ValueError, match="LOOP_AGENTS_STRUCTURED_OUTPUT='xml'"):
        ModelSettings.from_env({"LOOP_AGENTS_STRUCTURED_OUTPUT": "xml"})


@pytest.mark.parametrize(
    "bad",
    [
        Structured("not json"),
        Structured({"score": 2018.73, "feedback": "绝妙！"}),
        Structured('{"score": 1e400, "feedback": "绝妙！"}'),
    ],
    ids=["unparseable", "off-scale", "1e400"],
)
async def test_a_review_that_stays_unusable_stops_the_loop(bad):
    # the judge policy of `loop-agents run`: asked again twice, then JudgeError
    server = ScriptedOpenAI([DRAFT_1, bad, bad, bad, DRAFT_2, Structured(REVIEW_2)])
    settings = ModelSettings(api_key="sk-test")
    loop = song_lyrics.build_loop(settings, http_async_client=server.async_client())
    with pytest.raises(JudgeError, match="gave no usable verdict at iteration 1 after 3"):
        await loop.ainvoke({"messages": [HumanMessage(prompt)]})
    assert len(server.requests) == 4  # the composer, the reviewer three times; no draft 2
    assert "Your verdict could not be used" in server.requests[2]["messages"][-1]["content"]


async def test_a_usable_review_after_a_bad_one_goes_on():
    server = ScriptedOpenAI(
        [DRAFT_1, Structured({"score": 2018.73, "feedback": "?"}), Structured(REVIEW_2)]
    )
    loop = song_lyrics.build_loop(
        ModelSettings(api_key="sk-test"), http_async_client=server.async_client()
    )
    result = await loop.ainvoke({"messages": [HumanMessage(prompt)]})
    assert result["stop_reason"] == "accepted"
    assert result["feedback"][0].endswith("[evaluate]\n情绪线索尚明。\n\n综合得分：81")
    assert [r["decided_by"] for r in result["records"]] == [["xiangjianhuan_form", "evaluate"]]


@pytest.mark.slow
def test_the_example_program_exits_1_when_the_reviewer_stays_unusable(tmp_path):
    server = ScriptedOpenAI([DRAFT_1, *[Structured({"score": 2018.73, "feedback": "?"})] * 3])
    with server.serve() as base_url:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "song_lyrics.py")],
            cwd=tmp_path,
            env=env_without_model_settings(OPENAI_BASE_URL=base_url),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        "song_lyrics: the run failed: the reviewer gave no usable review after 3 attempts "
        "(last: the score 2018.73 is outside the scale 0-100"
    )
    # what a `make demo` user can do, not a library developer's advice
    assert "song_lyrics: hint: for better drafts and reviews run the same demo on a stronger " in (
        proc.stderr
    )
    assert "demo song-lyrics --gguf PATH.gguf" in proc.stderr
    assert "raise `retries`" not in proc.stderr
    # what it did is printed: the summary, the verdict and the draft so far
    assert "stopped: the reviewer gave no usable review" in proc.stdout
    assert proc.stdout.rstrip().endswith(DRAFT_1)
    assert len(server.requests) == 4


def test_the_text_judge_form_is_refused_by_the_structured_reviewer():
    from loop_agents_cli.demos.song_lyrics import reviewer
    from loop_agents_cli.models.settings import SettingsError

    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", structured_output_method="text")
    with pytest.raises(SettingsError, match="needs structured output: set --structured-output"):
        reviewer(settings)


async def test_the_best_draft_is_the_answer_when_a_later_one_scores_lower(capsys):
    server = ScriptedOpenAI(
        [DRAFT_1, Structured({"score": 60, "feedback": "好。"}), DRAFT_2,
         Structured({"score": 20, "feedback": "差。"}), DRAFT_2,
         Structured({"score": 30, "feedback": "差。"})]
    )  # fmt: skip
    settings = ModelSettings(api_key="sk-test")
    result = await song_lyrics.run(settings, http_async_client=server.async_client())
    assert (result["selected_iteration"], result["last_response"].text) == (1, DRAFT_1)
    out = capsys.readouterr().out
    assert "answer: the draft of iteration 1 (the best, score 60)" in out
    assert out.rstrip().endswith(DRAFT_1)


async def test_a_failed_demo_prints_what_it_did_then_raises_demo_failed(capsys):
    from loop_agents_cli.demos.song_lyrics import DemoFailed

    server = ScriptedOpenAI([DRAFT_1, *[Structured({"score": 2018.73, "feedback": "?"})] * 3])
    with pytest.raises(DemoFailed) as raised:
        await song_lyrics.run(
            ModelSettings(api_key="sk-test"), http_async_client=server.async_client()
        )
    assert raised.value.stop_reason == "judge_invalid"
    assert str(raised.value).startswith("the reviewer gave no usable review after 3 attempts")
    out = capsys.readouterr().out
    assert "stopped: the reviewer gave no usable review" in out
    assert out.rstrip().endswith(DRAFT_1)  # the draft so far


# -- the form check, on by default ------------------------------------------------------------

SOURCE_COPY = "相见欢\n\n" + prompt.split("原文如下：", 1)[1].strip()
"""What Qwen2.5-Coder-1.5B wrote: the source poem 《氓》 under the tune's name."""


async def test_a_copy_of_the_source_poem_never_reaches_the_reviewer(monkeypatch, capsys):
    # the article's reviewer alone scored such a copy 90 and accepted it at iteration 1
    monkeypatch.delenv("LOOP_AGENTS_FORM_CHECK", raising=False)
    server = ScriptedOpenAI([SOURCE_COPY, DRAFT_1, Structured({"score": 90, "feedback": "好。"})])
    result = await song_lyrics.run(
        ModelSettings(api_key="sk-test"), http_async_client=server.async_client()
    )
    assert len(server.requests) == 3  # composer, composer, reviewer: the copy was not reviewed
    first, second = result["records"]
    assert (first["stop"], first["decided_by"]) == (False, ["xiangjianhuan_form"])
    assert first["score"] < 10  # far from the form: it never beats a draft that has it
    assert result["feedback"][0].startswith("《相见欢》格式不合")
    assert (second["stop"], result["last_response"].text) == (True, DRAFT_1)


async def test_without_the_form_the_nearest_draft_is_the_answer(capsys):
    li_yu = "无言独上西楼，月如钩。寂寞梧桐深院锁清秋。剪不断，理还乱，是离愁。别是一般滋味在心头。"
    near = li_yu.replace("月如钩。", "")  # a phrase missing
    far = near.replace("在心头", "在心头里")  # and one too long
    server = ScriptedOpenAI([far, near, far])
    result = await song_lyrics.run(
        ModelSettings(api_key="sk-test"), http_async_client=server.async_client()
    )
    assert len(server.requests) == 3  # no reviewer call: no draft had the form
    assert [r["score"] for r in result["records"]] == [63.0, 70.0, 63.0]
    assert (result["selected_iteration"], result["last_response"].text) == (2, near)
    assert "answer: the draft of iteration 2 (the best, score 70)" in capsys.readouterr().out


def test_an_unscored_pick_is_never_called_the_best():
    records = [{"iteration": i, "score": None, "stop": False} for i in (1, 2, 3)]
    text = song_lyrics.verdict({"records": records, "iteration": 3}, stop_reason="error")
    assert "answer: the draft of iteration 3 (the last one: no draft has a score)" in text
    assert "the best" not in text


# -- what the demo shows of a small model's text ----------------------------------------------


async def test_the_console_shows_drafts_and_reviews_tidied_and_stores_them_as_written(capsys):
    fenced = f"```\n{DRAFT_1}\n```\x07"  # the form check reads through the fence
    gibberish = {"score": 40, "feedback": "mopbeznbla;gwjrldh6,"}
    server = ScriptedOpenAI(
        [fenced, Structured(gibberish), DRAFT_2, Structured(REVIEW_2)]
    )  # fmt: skip
    result = await song_lyrics.run(
        ModelSettings(api_key="sk-test"), http_async_client=server.async_client()
    )
    out = capsys.readouterr().out
    assert "```" not in out
    assert "\x07" not in out
    assert "mopbeznbla" not in out
    assert f"{section_header('Agent')}\n{DRAFT_1}\n" in out
    assert "(the judge gave no readable feedback)\n\n综合得分：40" in out
    # what the loop keeps is what the models wrote
    assert record_answer(result["records"][0], result).text == fenced
    assert result["feedback"][0] == "mopbeznbla;gwjrldh6,\n\n综合得分：40"


@pytest.mark.parametrize("model", ["bundled", "gguf"])
def test_only_the_bundled_model_gets_its_banner_and_the_commands_for_a_stronger_one(
    model, fake_llama, tmp_path
):
    env = env_without_model_settings(
        LOOP_AGENTS_OLLAMA_URL="off", PYTHONPATH=os.environ["PYTHONPATH"]
    )
    gguf = ["--gguf", str(fake_llama)] if model == "gguf" else []
    proc = subprocess.run(
        [sys.executable, "-m", "loop_agents_cli", "demo", "song-lyrics", *gguf],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.rstrip().splitlines()[-1]
    if model == "gguf":  # the user's own model: no word of the 135M one
        assert proc.stdout.startswith("model: model · server: the bundled llama.cpp server on ")
        assert "135M" not in proc.stdout
        assert not last.startswith("hint:")
        return
    assert proc.stdout.startswith("No OPENAI_API_KEY or OPENAI_BASE_URL is set")
    assert last.startswith("hint: the bundled model has 135M parameters; ")
    assert "demo song-lyrics --gguf PATH.gguf" in last
    assert "demo song-lyrics --base-url http://HOST:PORT/v1 --model NAME" in last
