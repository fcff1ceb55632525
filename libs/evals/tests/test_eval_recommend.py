"""The recommendation: which arm to use and its code, in every outcome (a loop wins; nothing
beats a single answer; too few tasks; an arm of your own wins; a tie that cost decides), in
the JSON, the tables, the page and `eval --from`, and for the published runs."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from langchain_core.runnables import RunnableLambda
from rich.console import Console

from loop_agents.controls import Adaptive, Restart
from loop_agents.controls.restart import REQUIREMENTS_HEADER
from loop_agents_evals import EvalReport, arun_eval, eval_page, loop, render_report
from loop_agents_evals.recommend import arm_code
from tests.conftest import ROOT, env_without_model_settings
from tests.eval_models import ReactiveOpenAI, after_feedback, ok_tasks, user_text


def feedback_helps(body):
    return "OK" if after_feedback(body) else "ok"


def polite(task, model, settings):
    async def answer(messages):
        return await model.ainvoke([*messages[:-1], messages[-1].model_copy(
            update={"content": messages[-1].content + " Please."})])  # fmt: skip

    return RunnableLambda(answer)


def polite_twice(task, model, settings):
    async def answer(messages):
        await model.ainvoke(messages)  # a call that buys nothing
        return await polite(task, model, settings).ainvoke(messages)

    return RunnableLambda(answer)


def tables(report) -> str:
    out = StringIO()
    render_report(report, Console(file=out, width=200))
    return out.getvalue()


async def test_a_loop_that_wins_clearly_is_recommended_everywhere():
    server = ReactiveOpenAI(feedback_helps)
    report = await arun_eval(
        ok_tasks(12), server.chat_model(), arms=["single", "loop", "resample"], iterations=2
    )
    found = report.recommendation
    assert (found.arm, found.confidence, found.baseline) == ("loop", "significant", "single")
    assert found.code == "create_loop_agent(agent, evaluator, 2)"
    assert (found.won, found.lost, found.passed, found.baseline_passed) == (12, 0, 12, 0)
    assert found.p_value < 0.001
    assert found.cost_unit == "tokens"
    assert found.cost_per_pass > 0
    assert found.baseline_cost_per_pass is None  # a single answer never passed
    assert found.text.startswith("Use loop: it beats a single answer by more than noise.")
    assert "won 12 and lost 0" in found.text
    assert report.to_json()["recommendation"] == found.to_json()
    shown = tables(report)
    assert shown.rstrip().endswith(found.text.split()[-1])  # the last thing printed
    assert "Recommendation (significant)" in shown
    assert found.code in shown
    page = eval_page(report.to_json())
    assert "create_loop_agent(agent, evaluator, 2)" in page
    assert EvalReport.from_json(json.loads(json.dumps(report.to_json()))).recommendation == found


async def test_when_nothing_beats_a_single_answer_a_single_answer_is_recommended():
    server = ReactiveOpenAI(lambda body: "ok" if "Task 3:" in user_text(body) else "OK")
    report = await arun_eval(ok_tasks(12), server.chat_model(), arms=["single", "loop"])
    found = report.recommendation
    assert (found.arm, found.confidence, found.compared) == ("single", "not significant", "loop")
    assert found.code == "a single answer (no loop)"
    assert (found.won, found.lost, found.p_value) == (0, 0, 1.0)
    assert found.text.startswith(
        "Use a single answer (no loop): no arm beats a single answer by more than noise. "
        "The best arm, loop, passed 11/12 against 11/12"
    )
    assert "not significant" in found.text


async def test_too_few_tasks_keep_a_single_answer_and_say_so():
    server = ReactiveOpenAI(feedback_helps)
    report = await arun_eval(ok_tasks(8), server.chat_model(), arms=["single", "loop"])
    found = report.recommendation
    assert (found.arm, found.confidence, found.compared) == ("single", "too few tasks", "loop")
    assert (found.won, found.lost) == (8, 0)  # 8 of 8 is significant, but 8 tasks are few
    assert found.text.startswith("Too few tasks to choose (8; give at least 10")
    assert "keep a single answer (no loop) for now" in found.text


async def test_an_arm_of_your_own_that_wins_is_recommended_by_its_controls():
    """Only a request told what must hold gets the right answer: only Restart's retries."""
    server = ReactiveOpenAI(
        lambda body: "OK" if any(
            REQUIREMENTS_HEADER in str(m["content"]) for m in body["messages"]) else "ok"
    )  # fmt: skip
    arms = {"single": "single", "loop": "loop", "told": loop(controls=[Restart(max_repairs=0)])}
    report = await arun_eval(ok_tasks(12), server.chat_model(), arms=arms, iterations=3)
    found = report.recommendation
    assert (found.arm, found.confidence) == ("told", "significant")
    assert found.code == "create_loop_agent(agent, evaluator, 3, controls=[Restart(max_repairs=0)])"
    assert report.arms["loop"].passed == 0


async def test_a_tie_is_resolved_by_the_cost_per_passed_task():
    server = ReactiveOpenAI(lambda body: "OK" if "Please." in user_text(body) else "ok")
    arms = {"single": "single", "twice": polite_twice, "once": polite}
    report = await arun_eval(ok_tasks(12), server.chat_model(), arms=arms)
    assert report.arms["twice"].passed == report.arms["once"].passed == 12
    found = report.recommendation
    assert (found.arm, found.confidence) == ("once", "significant")
    assert found.code == (
        "the agent test_eval_recommend:polite builds (--arm once=test_eval_recommend:polite)"
    )
    assert found.text.endswith(
        "twice passed 12/12, not significantly more (won 0, lost 0, p = 1): once costs less "
        "per passed task."
    )


async def test_the_code_given_for_resample_samples_afresh_as_resample_does():
    server = ReactiveOpenAI(feedback_helps)
    fresh = Adaptive(kinds={"repair": None, "informed": None})
    assert arm_code("resample", {"iterations": 3}) == (
        'create_loop_agent(agent, evaluator, 3, controls=[Adaptive(kinds={"repair": None, '
        '"informed": None})])'
    )
    arms = {"resample": "resample", "fresh": loop(controls=[fresh])}
    report = await arun_eval(ok_tasks(3), server.chat_model(), arms=arms, iterations=3)
    for arm in arms:
        assert report.arms[arm].passed == 0  # no feedback is ever in view
        assert report.arms[arm].answers == 3
    sent = {(r.arm, tuple(e["sent"] for e in r.transcript)) for r in report.results}
    assert sent == {(arm, ("first", "fresh", "fresh")) for arm in arms}
    requests = {json.dumps(body["messages"]) for body in server.requests}
    assert len(requests) == 3  # each task's one request, sent again and again


@pytest.mark.parametrize(
    ("settings", "arm", "code"),
    [
        ({"iterations": 4}, "loop-candidates", "create_loop_agent(agent, evaluator, 2, "
         "controls=[Candidates(2)])"),
        ({"iterations": 4}, "diverse-first", "create_loop_agent(agent, evaluator, 3, "
         "controls=[DiverseFirst(2)])"),
        ({"iterations": 4, "judge_threshold": 70}, "judge-loop",
         "create_loop_agent(agent, llm_judge(model, instructions, threshold=70), 4)"),
        ({}, "adaptive", "create_loop_agent(agent, evaluator, K, controls=[Adaptive()])"),
        ({"iterations": 4, "arms": {"x": {"kind": "loop", "evaluator": "tests", "options": {
            "controls": [{"type": "loop_agents.controls.restart:Restart", "max_repairs": 0,
                          "requirements": "loop_agents.evals.grading:requirement_points"}]}}}},
         "x", "create_loop_agent(agent, evaluator, 4, controls=[Restart(max_repairs=0)])"),
        ({"iterations": 3, "arms": {"x": loop(controls=[]).identity()}}, "x",
         "create_loop_agent(agent, evaluator, 3)"),
        ({"arms": {}}, "x", "the arm x (what it is is not recorded in this file)"),
        ({"iterations": "3", "judge_threshold": "high", "arms": {"x": {"kind": "loop",
          "evaluator": "judge", "options": "junk"}}}, "x",
         "create_loop_agent(agent, llm_judge(model, instructions, threshold=80), K)"),
    ],
)  # fmt: skip
def test_each_arm_maps_to_its_code(settings, arm, code):
    assert arm_code(arm, settings) == code


def test_a_custom_loop_made_on_the_command_line_maps_to_the_controls_its_keys_build():
    from loop_agents_evals.arm_specs import parse_arm_spec

    spec = "loop,history=feedback_log,feedback=plain,select=best,patience=2,first=3,stagnation=on"
    _, arm = parse_arm_spec(f"mine={spec}")
    assert arm_code("mine", {"iterations": 5, "arms": {"mine": arm.identity()}}) == (
        'create_loop_agent(agent, evaluator, 3, controls=[History("feedback_log"), '
        'FeedbackStyle(PLAIN_FEEDBACK), Plateau(2), AnswerSelection("best"), DiverseFirst(3), '
        "Stagnation()])"
    )


PUBLISHED = {
    "qwen-1.5b-adaptive-code.json": ("single", "not significant"),
    "qwen-1.5b-adaptive-instructions.json": ("informed-resample", "significant"),
    "qwen-1.5b-code.json": ("resample", "significant"),
    "qwen-1.5b-instructions-independent-first.json": ("single", "not significant"),
    "qwen-1.5b-instructions.json": ("informed-resample-2", "significant"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_eval_from_recommends_for_the_published_runs(name, tmp_path):
    path = ROOT / "benchmarks" / "effectiveness" / name
    assert "recommendation" not in json.loads(path.read_text())  # written before it existed
    done = subprocess.run(
        [sys.executable, "-m", "loop_agents_cli", "eval", "--from", str(path)],
        capture_output=True, text=True, env=env_without_model_settings(COLUMNS="300"),
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    arm, confidence = PUBLISHED[name]
    tail = done.stdout[done.stdout.index(f"Recommendation ({confidence})") :]
    use = "a single answer (no loop)" if arm == "single" else arm
    assert f"Use {use}:" in tail
    if "informed-resample" in arm:
        assert "controls=[Restart(max_repairs=0)]" in tail
