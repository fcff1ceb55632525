"""``loop-agents eval --arm NAME=SPEC``: a loop built from options and a factory imported
from the current folder, run end to end against a scripted server on loopback; every
mistake in SPEC exits with 2 and a message before any model call; ``--help`` stays
light."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from test_eval_command import task_file

from loop_agents.controls import FeedbackStyle, History
from loop_agents_cli import main as loop_agents_main
from loop_agents_evals import loop
from tests.conftest import ROOT
from tests.eval_models import ReactiveOpenAI


def main(args: list[str]) -> int:
    return loop_agents_main(["eval", *args])


def copies_unless_fresh(body: dict) -> str:
    """Copies its old answer when it sees it; right when told the failures without it."""
    messages = body["messages"]
    if any(m["role"] == "assistant" for m in messages):
        return "ok"
    return "OK" if sum(m["role"] == "user" for m in messages) > 1 else "ok"


def test_a_loop_from_options_runs_and_is_the_python_loop(tmp_path, capsys):
    scripted = ReactiveOpenAI(copies_unless_fresh)
    out = tmp_path / "r.json"
    spec = "fresh=loop,history=feedback_log,feedback=plain"
    args = [str(task_file(tmp_path)), "--arms", "single,resample", "--arm", spec]
    with scripted.serve() as base_url:
        status = main([*args, "--iterations", "3", "--out", str(out), "--base-url", base_url])
    assert status == 0
    data = json.loads(out.read_text())
    assert list(data["arms"]) == ["single", "resample", "fresh"]
    assert data["arms"]["fresh"]["passed"] == 6
    assert {(c["arm"], c["baseline"]) for c in data["comparisons"]} == {
        ("fresh", "resample"),
        ("fresh", "single"),
    }
    # the same arm as in Python: an eval started from either resumes from the other
    plain = FeedbackStyle("{feedback}")
    same = loop(controls=[History("feedback_log"), plain])
    assert data["settings"]["arms"]["fresh"] == same.identity()
    assert "fresh vs resample" in capsys.readouterr().out


FACTORY = """
from loop_agents import create_loop_agent
from loop_agents.controls import FeedbackStyle, History
from loop_agents_evals import visible_checks


def make(task, model, settings):
    # the feedback-log repair loop (as --arm fresh=loop,...)
    return create_loop_agent(model, visible_checks(task), settings.iterations,
                             controls=[History("feedback_log"), FeedbackStyle("{feedback}")])


def model_only(task, model, settings):
    return model


def one_argument(task):
    return task


def nothing(task, model, settings):
    return None


not_a_function = 3
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """A module of arm factories in the current folder, under a name of its own."""
    name = f"arms_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_a_factory_from_the_current_folder_runs_at_its_own_temperature(tmp_path, factories):
    scripted = ReactiveOpenAI(copies_unless_fresh)
    out = tmp_path / "r.json"
    args = [
        str(task_file(tmp_path)), "--arms", "", "--arm", f"mine={factories}:make",
        "--arm", f"plain={factories}:model_only", "--arm-temperature", "mine=0.5",
        "--iterations", "2", "--out", str(out), "--model", "scripted",
    ]  # fmt: skip
    with scripted.serve() as base_url:
        assert main([*args, "--base-url", base_url]) == 0
    data = json.loads(out.read_text())
    assert list(data["arms"]) == ["mine", "plain"]
    assert data["arms"]["mine"]["passed"] == 6
    assert data["arms"]["plain"]["opaque"] is True
    assert data["settings"]["arms"]["mine"] == {"kind": "factory", "factory": f"{factories}:make"}
    assert data["settings"]["temperatures"]["mine"] == 0.5
    assert {b["temperature"] for b in scripted.requests} == {0.5, 1.0}
    assert sum(b["temperature"] == 0.5 for b in scripted.requests) == 6 * 2


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        ("mine", "give NAME=module:factory"),
        ("mine=", "give NAME=module:factory"),
        ("my arm=loop", "the arm name 'my arm' is not usable"),
        ("loop=loop,history=feedback_log", "'loop' is a built-in arm's name"),
        ("mine=best-of", "'best-of' is neither a loop nor module:factory"),
        ("mine=loop,histroy=full", "'histroy=full' is not KEY=VALUE with KEY one of history"),
        ("mine=loop,history=everything", "history='everything': give one of full"),
        ("mine=loop,feedback=loud", "feedback='loud': give one of default, plain"),
        ("mine=loop,candidates=1", "candidates='1': give a whole number from 2 to 64"),
        ("mine=loop,restart=maybe", "give a whole number >= 0"),
        ("mine=loop,stagnation=yes", "give stagnation=on"),
        ("mine=loop,adaptive=yes", "give adaptive=on"),
        ("mine=loop,adaptive=on,restart=on", "adaptive and restart both choose"),
        ("mine=loop,history=full,history=full", "history is given twice"),
        ("mine=loop,candidates=3", "budget K must be a multiple of 3; got K=4"),
        ("mine=loop,first=5", "budget K must be at least 5; got K=4"),
        ("mine=no_such_module_here:make", "cannot import the module 'no_such_module_here'"),
        ("mine=json:no_such_factory", "the module 'json' (" + json.__file__),
        ("mine=json:decoder", "must be a function (task, model, settings) -> agent"),
        ("mine=json:dumps", "cannot be called as (task, model, settings)"),
        ("mine=json:dumps,history=full", "a factory takes no options"),
        ("mine=json:", "'json:' is not module:attribute"),
    ],
)
def test_a_bad_arm_exits_with_2_before_any_model_call(tmp_path, capsys, spec, phrase):
    scripted = ReactiveOpenAI(copies_unless_fresh)
    with scripted.serve() as base_url, pytest.raises(SystemExit) as caught:
        main([str(task_file(tmp_path)), "--arm", spec, "--base-url", base_url])
    assert caught.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--arm {spec!r}" in err or "--arm mine:" in err
    assert phrase in err
    assert scripted.requests == []


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--arm", "mine=loop", "--arm", "mine=loop"], "an arm named 'mine' is already given"),
        (["--arm", "mine={m}:not_a_function"], "must be a function (task, model, settings)"),
        (["--arm", "mine={m}:one_argument"], "cannot be called as (task, model, settings)"),
        (["--arm", "mine={m}:nothing"], "returned NoneType None; it must return an agent"),
        (["--arms", ""], "--arms '': give a comma-separated list"),
        (["--arm", "mine=loop", "--arm-temperature", "yours=1"], "with ARM one of single"),
        (["--arm", "mine=loop", "--server", "http://127.0.0.1:9"], "not on a LangGraph server"),
        (["--arms", "adaptive", "--server", "http://127.0.0.1:9"], "adaptive learns across"),
    ],
)
def test_other_arm_mistakes_exit_with_2_before_any_model_call(
    tmp_path, capsys, factories, args, phrase
):
    scripted = ReactiveOpenAI(copies_unless_fresh)
    given = [a.format(m=factories) for a in args]
    endpoint = [] if "--server" in args else ["--base-url"]
    with scripted.serve() as base_url, pytest.raises(SystemExit) as caught:
        main([str(task_file(tmp_path)), *given, *endpoint, *([base_url] if endpoint else [])])
    assert caught.value.code == 2
    assert phrase in " ".join(capsys.readouterr().err.split())
    assert scripted.requests == []


def test_a_module_that_fails_to_import_is_named(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_arms_module.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(["instructions", "--arm", "mine=broken_arms_module:make"])
    assert caught.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "importing the module 'broken_arms_module' raised RuntimeError: no GPU here" in err
    sys.modules.pop("broken_arms_module", None)


def test_eval_help_shows_the_arm_syntax_without_loading_langchain():
    script = (
        "import sys\n"
        "from loop_agents_cli import main\n"
        "try:\n"
        "    main(['eval', '--help'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langchain', 'langchain_core',"
        " 'langchain_openai', 'langgraph', 'openai', 'httpx', 'rich', 'pydantic'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr
    text = " ".join(done.stdout.split())
    for phrase in (
        "--arm NAME=SPEC",
        "history=full|last_attempt|feedback_log",
        "restart=on|N",
        "module:factory",
        "restart",
        "diverse-first",
    ):
        assert phrase in text
