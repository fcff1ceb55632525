"""A server that refuses a way of asking for structured output: the command says what to pass.

llama-cpp-python answers ``response_format`` ``json_schema`` with HTTP 500 and pydantic's
``Input should be 'text' or 'json_object'``; Ollama refuses tools to a model without them
(``does not support tools``). `llm_judge` moves on to a method the server takes and warns
once; the command says so in its own terms (``--structured-output ...``, and for a saved
run the ``resume`` command with it), never as a Python warning. When no method is left,
or a refusal reaches the command, the error names the option to pass, and ``resume``
takes it. In process, against a scripted server on loopback HTTP.
"""

from __future__ import annotations

import json
import warnings

import httpx
import openai
import pytest

from loop_agents_cli import main
from loop_agents_cli.errors import judge_switches
from loop_agents_cli.failures import explain
from loop_agents_cli.models.endpoints import Endpoint, EndpointSpec
from loop_agents_cli.store import saved_runs
from tests.cli_helpers import clear_model_settings
from tests.fakes import CI_1
from tests.scripted_openai import LLAMA_CPP_REFUSAL, Fail, ScriptedOpenAI, Structured

TASK = "Write a limerick about LangGraph."
RUBRIC = "Five lines, rhymed AABBA, and funny."
DRAFT = "A graph with a loop\nwent round in a hoop."
ACCEPTED = {"score": 90, "feedback": "Five lines, AABBA."}
NO_TOOLS = "registry.ollama.ai/library/gemma:2b does not support tools"
URL = "http://127.0.0.1:1/v1"


def _status_error(status: int, body: dict) -> openai.APIStatusError:
    request = httpx.Request("POST", f"{URL}/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    return openai.OpenAI(api_key="-", base_url=URL)._make_status_error_from_response(response)


@pytest.mark.parametrize(
    ("method", "error", "fix"),
    [
        ("json_schema", _status_error(500, LLAMA_CPP_REFUSAL), "function_calling"),
        ("function_calling", _status_error(400, {"error": {"message": NO_TOOLS}}), "json_mode"),
    ],
    ids=["llama-cpp-python", "ollama"],
)
def test_a_refusal_that_reaches_the_command_names_the_option_to_pass(method, error, fix):
    endpoint = Endpoint(EndpointSpec("server", "m", URL, method), source="test")
    wrapped = RuntimeError("the judge failed")
    wrapped.__cause__ = error
    for exc in (error, wrapped):
        failure = explain(exc, endpoint)
        assert failure.method == fix
    failure = explain(error, endpoint)
    assert f"does not take structured output as {method}: use --structured-output {fix}" in (
        failure.error
    )


def _run(*arguments: str) -> int:
    return main(["run", TASK, "--rubric", RUBRIC, *arguments])


def test_a_judge_that_moves_on_is_said_in_the_commands_terms(tmp_path, monkeypatch, capsys):
    clear_model_settings(monkeypatch, tmp_path)
    server = ScriptedOpenAI([DRAFT, Structured(ACCEPTED)], llama_cpp=True)
    with server.serve() as url:
        assert _run("--base-url", url, "--json") == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["stop_reason"] == "accepted"
    run_id = saved_runs().list()[0].run_id
    notes = [line for line in err.splitlines() if "refused structured output" in line]
    assert len(notes) == 1, err
    note = notes[0]
    assert note.startswith(
        "loop-agents: the judge's server refused structured output as json_schema "
        "(\"Input should be 'text' or 'json_object'\"); "
    )
    assert "the judge now uses function_calling: pass --structured-output function_calling" in note
    assert f"loop-agents resume {run_id} --json --structured-output function_calling`)" in note
    assert "UserWarning" not in err
    assert 'method="function_calling"' not in err
    assert "tools" in server.requests[-1]


def test_the_console_says_it_too(tmp_path, monkeypatch, capsys):
    clear_model_settings(monkeypatch, tmp_path)
    server = ScriptedOpenAI([DRAFT, Structured(ACCEPTED)], llama_cpp=True)
    with server.serve() as url:
        assert _run("--base-url", url, "--no-save") == 0
    out, err = capsys.readouterr()
    assert "the judge now uses function_calling: pass --structured-output function_calling" in (out)
    assert "resume" not in out  # nothing saved, nothing to resume
    assert "UserWarning" not in err


def test_the_demo_says_it_in_its_terms(tmp_path, monkeypatch, capsys):
    clear_model_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("LOOP_AGENTS_FORM_CHECK", "0")
    server = ScriptedOpenAI([CI_1, Structured({"score": 90, "feedback": "好。"})], llama_cpp=True)
    with server.serve() as url:
        assert main(["demo", "song-lyrics", "--base-url", url]) == 0
    out, err = capsys.readouterr()
    assert "the judge now uses function_calling: pass --structured-output function_calling" in (out)
    assert "UserWarning" not in err


def test_every_method_refused_names_the_text_form_and_resume_takes_it(
    tmp_path, monkeypatch, capsys
):
    clear_model_settings(monkeypatch, tmp_path)
    refusals = [Fail(400, NO_TOOLS), Fail(400, NO_TOOLS)]  # function_calling, json_mode
    server = ScriptedOpenAI([DRAFT, *refusals], llama_cpp=True)  # json_schema: HTTP 500
    with server.serve() as url:
        assert _run("--base-url", url, "--json") == 1
    out, err = capsys.readouterr()
    run_id = saved_runs().list()[0].run_id
    error = json.loads(out)["error"]
    assert error.startswith("the judge's server refused every way of asking for structured")
    assert "use --structured-output text" in error
    fix = f"loop-agents resume {run_id} --json --structured-output text\n"
    assert "loop-agents: the run is saved; resume it with: LOOP_AGENTS_HOME=" in err
    assert fix in err

    verdict = "Score: 90\nFeedback: Five lines, AABBA."
    again = ScriptedOpenAI([verdict])  # the saved answer is judged, in the text form
    with again.serve() as url:
        monkeypatch.setenv("OPENAI_BASE_URL", url)  # a server at another port, same run
        settings = saved_runs().find(run_id).settings
        settings["endpoint"]["base_url"] = url
        saved_runs().update(run_id, settings=settings)
        assert main(["resume", run_id, "--json", "--structured-output", "text"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["stop_reason"], result["answer"]) == ("accepted", DRAFT)
    (judged,) = again.requests
    assert "tools" not in judged
    assert "response_format" not in judged
    saved = saved_runs().find(run_id).settings["endpoint"]
    assert saved["structured_output_method"] == "text"  # a later resume asks the same way


def test_show_of_such_a_run_resumes_it_the_way_its_error_names(tmp_path, monkeypatch, capsys):
    clear_model_settings(monkeypatch, tmp_path)
    server = ScriptedOpenAI([DRAFT, Fail(400, NO_TOOLS), Fail(400, NO_TOOLS)], llama_cpp=True)
    with server.serve() as url:
        assert _run("--base-url", url, "--json") == 1
    run_id = saved_runs().list()[0].run_id
    capsys.readouterr()
    assert main(["show", run_id]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.endswith(f"loop-agents resume {run_id} --structured-output text")


def test_a_move_is_said_once_and_other_warnings_pass():
    said: list[str] = []
    move = (
        "llm_judge 'judge': the server refused json_schema (Error code: 500 - \"Input should "
        "be 'text' or 'json_object'\"); the judge now uses method=\"function_calling\". Set "
        'llm_judge(..., method="function_calling") to skip the refused requests.'
    )
    with warnings.catch_warnings(record=True) as other:
        warnings.simplefilter("always")
        with judge_switches(said.append, lambda m: f"pass --structured-output {m}"):
            for _ in range(3):  # three judges (an eval's) move on the same way: one line
                warnings.warn(move, UserWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
    assert said == [
        "the judge's server refused structured output as json_schema (\"Input should be "
        "'text' or 'json_object'\"); the judge now uses function_calling: pass "
        "--structured-output function_calling"
    ]
    assert [str(w.message) for w in other] == ["something else"]


def test_a_resumed_run_whose_judge_moves_on_names_the_resume_command(tmp_path, monkeypatch, capsys):
    clear_model_settings(monkeypatch, tmp_path)
    server = ScriptedOpenAI([DRAFT, Fail(400, "the judge's server is down")])
    with server.serve() as url:
        assert _run("--base-url", url, "--json") == 1
    run_id = saved_runs().list()[0].run_id
    capsys.readouterr()
    again = ScriptedOpenAI([Structured(ACCEPTED)], llama_cpp=True)
    with again.serve() as url:
        settings = saved_runs().find(run_id).settings
        settings["endpoint"]["base_url"] = url
        saved_runs().update(run_id, settings=settings)
        assert main(["resume", run_id]) == 0
    out = capsys.readouterr().out
    fix = f"loop-agents resume {run_id} --structured-output function_calling` next time"
    assert "the judge now uses function_calling: resume it with `LOOP_AGENTS_HOME=" in out
    assert fix in out
