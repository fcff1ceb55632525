"""The four arms on scripted models.

- A model whose right answer comes only after feedback: the loop must beat single and
  resample (and a judge that asks for changes helps too; one that approves all does not).
- A model whose answers are random and ignore feedback: the loop and resample have the
  same chance, the loop is credited for nothing it did not earn, and no result passes
  unless its final answer really passes.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest
from langchain_core.messages import AIMessage

from loop_agents_evals import EvalSettings, arun_arm, arun_eval
from loop_agents_evals.checks import run_checks
from loop_agents_evals.grading import CUT_OFF_FEEDBACK
from loop_agents_evals.report import render_report
from loop_agents_evals.sampling import was_cut_off
from loop_agents_evals.settings import ArmSettings
from loop_agents_evals.tasks import InstructionsTask, parse_task
from tests.eval_models import (
    ReactiveOpenAI,
    after_feedback,
    is_judge,
    ok_tasks,
    user_text,
    verdict,
)
from tests.fakes import FakeChat, review
from tests.scripted_openai import Cut


def shout_tasks(count: int) -> list[InstructionsTask]:
    """Tasks answered right by 'OK' (uppercase) and wrong by 'ok'."""
    return ok_tasks(count, prefix="shout-")


def right_only_after_feedback(body):
    if is_judge(body):  # a judge that wants capitals
        answer = body["messages"][-1]["content"]
        return verdict(95, "Good.") if answer == "OK" else verdict(30, "Make it louder.")
    return "OK" if after_feedback(body) else "ok"


async def test_the_loop_beats_single_and_resample_when_only_feedback_helps():
    server = ReactiveOpenAI(right_only_after_feedback)
    report = await arun_eval(
        shout_tasks(6),
        server.chat_model(),
        iterations=3,
        settings=EvalSettings(judge_method="function_calling"),
    )
    arms = report.arms
    assert [(a, s.passed, s.tasks) for a, s in arms.items()] == [
        ("single", 0, 6),
        ("loop", 6, 6),
        ("resample", 0, 6),
        ("judge-loop", 6, 6),
    ]
    # the budget: single 1 call, resample all K, loop 2 answers, judge-loop 2 answers + 2 verdicts
    assert [arms[a].model_calls for a in arms] == [1, 2, 3, 4]
    assert [arms[a].input_tokens for a in arms] == [11, 22, 33, 44]  # the scripted usage
    assert [arms[a].output_tokens for a in arms] == [7, 14, 21, 28]
    comparisons = {(c.arm, c.baseline): (c.won, c.lost, c.tied) for c in report.comparisons}
    assert comparisons == {
        ("loop", "resample"): (6, 0, 0),
        ("loop", "single"): (6, 0, 0),
        ("judge-loop", "single"): (6, 0, 0),
    }
    assert {r.iterations for r in report.results if r.arm == "loop"} == {2}
    assert {r.iterations for r in report.results if r.arm == "resample"} == {3}
    # every arm's answers were sampled at the one temperature; the judge at 0
    answers = [b for b in server.requests if not is_judge(b)]
    assert {b.get("temperature") for b in answers} == {1.0}
    assert {b.get("temperature") for b in server.requests if is_judge(b)} == {0.0}
    # wrong first, right after feedback: the loops' curves rise at the second answer
    assert report.by_attempt == {
        "single": [0.0],
        "loop": [0.0, 1.0, 1.0],
        "resample": [0.0, 0.0, 0.0],
        "judge-loop": [0.0, 1.0, 1.0],
    }
    assert {r.by_attempt for r in report.results if r.arm == "loop"} == {(False, True, True)}
    assert report.to_json()["by_attempt"]["loop"] == [0.0, 1.0, 1.0]
    assert report.settings["temperatures"]["resample"] == 1.0


async def test_each_arm_samples_at_its_own_temperature_when_one_is_set():
    server = ReactiveOpenAI(right_only_after_feedback)
    report = await arun_eval(
        shout_tasks(1),
        server.chat_model(),
        arms=["single", "resample", "judge-loop"],
        iterations=2,
        settings=EvalSettings(
            temperature=0.3,
            arm_temperatures={"resample": 1.5},
            judge_temperature=0.2,
            judge_method="function_calling",
        ),
    )
    sent = {}
    for body in server.requests:
        role = "judge" if is_judge(body) else "agent"
        sent.setdefault(role, set()).add(body.get("temperature"))
    assert sent == {"judge": {0.2}, "agent": {0.3, 1.5}}
    assert {a: s.temperature for a, s in report.arms.items()} == {
        "single": 0.3,
        "resample": 1.5,
        "judge-loop": 0.3,
    }
    # resample's two requests, and no other, went out at 1.5
    assert sum(1 for b in server.requests if b.get("temperature") == 1.5) == 2


async def test_the_loop_sends_the_checks_feedback_and_the_judge_loop_only_the_judges():
    server = ReactiveOpenAI(right_only_after_feedback)
    task = shout_tasks(1)[0]
    settings = ArmSettings(iterations=3, judge_method="function_calling")
    loop = await arun_arm(task, "loop", server.chat_model(), settings=settings)
    assert (loop.passed, loop.iterations, loop.answer) == (True, 2, "OK")
    feedback = server.requests[1]["messages"][-1]["content"]
    assert "uppercase" in feedback
    assert "The answer breaks 1 requirement" in feedback
    assert feedback.startswith(review("", 1).split("\n")[0])  # fenced as a review
    server.requests.clear()
    judged = await arun_arm(task, "judge-loop", server.chat_model(), settings=settings)
    assert judged.passed
    assert judged.model_calls == 4
    agent_requests = [b for b in server.requests if not is_judge(b)]
    assert agent_requests[1]["messages"][-1]["content"] == review("Make it louder.\n\nScore: 30", 1)
    judge_requests = [b for b in server.requests if is_judge(b)]
    assert all("uppercase" not in str(b) for b in judge_requests)  # the judge never sees checks


async def test_an_approving_judge_is_no_better_than_one_answer():
    def respond(body):
        if is_judge(body):
            return verdict(99, "Perfect.")
        return "OK" if after_feedback(body) else "ok"

    server = ReactiveOpenAI(respond)
    report = await arun_eval(
        shout_tasks(4),
        server.chat_model(),
        arms=["single", "judge-loop"],
        iterations=4,
        settings=EvalSettings(judge_method="function_calling"),
    )
    assert report.arms["judge-loop"].passed == report.arms["single"].passed == 0
    assert report.arms["judge-loop"].model_calls == 2  # one answer, one verdict


async def test_an_unusable_judge_ends_the_loop_with_its_answer():
    def respond(body):
        if is_judge(body):
            return "I think it is fine."  # never a structured verdict
        return "OK" if after_feedback(body) else "ok"

    server = ReactiveOpenAI(respond)
    outcome = await arun_arm(
        shout_tasks(1)[0],
        "judge-loop",
        server.chat_model(),
        settings=ArmSettings(iterations=3, judge_method="function_calling"),
    )
    assert (outcome.passed, outcome.iterations, outcome.judge_failures) == (False, 1, 1)
    assert outcome.model_calls == 1 + 3  # the answer, the judge's first try and 2 retries


def random_answers(seed: int, chance: float):
    rng = random.Random(seed)

    def respond(body):
        assert not is_judge(body)
        return "OK" if rng.random() < chance else "ok"  # feedback or not

    return respond


async def test_random_answers_give_the_loop_no_credit_it_did_not_earn():
    tasks = shout_tasks(150)
    server = ReactiveOpenAI(random_answers(seed=15, chance=0.3))
    report = await arun_eval(
        tasks,
        server.chat_model(),
        arms=["single", "loop", "resample"],
        iterations=3,
        concurrency=1,  # the seeded answers in a fixed order: the same numbers every run
    )
    rates = {arm: s.pass_rate for arm, s in report.arms.items()}
    # single passes with the answer's chance; loop and resample both get 3 tries at it,
    # 1 - 0.7**3 = 0.657, and the loop's feedback buys it nothing here
    assert abs(rates["single"] - 0.3) < 0.12
    assert abs(rates["loop"] - 0.657) < 0.12
    assert abs(rates["resample"] - 0.657) < 0.12
    assert abs(rates["loop"] - rates["resample"]) < 0.15
    (paired,) = [c for c in report.comparisons if (c.arm, c.baseline) == ("loop", "resample")]
    assert paired.p_value > 0.05  # task by task, no difference worth the name
    by_task = {t.id: t for t in tasks}
    for result in report.results:  # a pass is a final answer that passes, nothing else
        checks = run_checks(by_task[result.task_id].checks, result.answer)
        assert result.passed == all(c.passed for c in checks)
        assert result.passed == (result.answer == "OK")
        if result.arm in ("loop", "resample") and not result.passed:
            assert result.iterations == 3  # it used its whole budget and never got lucky


CODE_TASK = {
    "kind": "code",
    "prompt": "Write a function that adds two integers.",
    "entry_point": "add",
    "tests": "assert add(1, 2) == 3",
    "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
OVERFIT = "```python\ndef add(a, b):\n    return 3\n```"
WRONG = "```python\ndef add(a, b):\n    return a * b\n```"


async def test_random_code_answers_pass_only_when_the_hidden_tests_pass():
    tasks = [parse_task(CODE_TASK | {"id": f"add-{i}"}) for i in range(8)]
    rng = random.Random(7)

    def respond(body):
        return rng.choice([RIGHT, OVERFIT, WRONG, WRONG])

    server = ReactiveOpenAI(respond)
    report = await arun_eval(
        tasks, server.chat_model(), arms=["loop", "resample"], iterations=3, concurrency=1
    )
    overfit = 0
    for result in report.results:
        assert result.passed == (result.answer == RIGHT)
        overfit += result.answer == OVERFIT
    # an answer that passes only the visible tests stopped its arm and was not credited
    assert overfit > 0
    assert any(not r.passed and r.iterations < 3 for r in report.results)


async def test_a_code_task_fixed_after_the_test_feedback():
    def respond(body):
        return RIGHT if after_feedback(body) else WRONG

    server = ReactiveOpenAI(respond)
    task = parse_task(CODE_TASK | {"id": "add"})
    report = await arun_eval([task], server.chat_model(), arms=["single", "loop", "resample"])
    assert {a: s.passed for a, s in report.arms.items()} == {"single": 0, "loop": 1, "resample": 0}
    (fed_back,) = [body for body in server.requests if after_feedback(body)]
    feedback = fed_back["messages"][-1]["content"]
    assert "- add(1, 2) returned 2, expected 3" in feedback
    assert all("10, 20" not in str(body) for body in server.requests)  # hidden tests stay hidden
    assert user_text(server.requests[0]).endswith("Name the function `add`.")


class NoStructuredOutput(FakeChat):
    """A chat model without tool calling or structured output (``bind_tools`` refuses)."""

    def bind_tools(self, tools, **kwargs):
        raise NotImplementedError("this model has no tool calling")

    def with_structured_output(self, schema, **kwargs):
        raise NotImplementedError("this model has no structured output")


async def test_arms_without_a_judge_need_no_structured_output():
    """Issue "Hardening, round 3", item 14: the ``loop`` arm needs no judge, yet one was
    built (``with_structured_output``), so with a model that has none every ``loop``
    pair was an error while ``single`` and ``resample`` ran."""
    model = NoStructuredOutput.of("ok", "OK")
    report = await arun_eval(
        shout_tasks(2), model, arms=("single", "loop", "resample"), iterations=2
    )
    assert [(a, s.errors, s.tasks) for a, s in report.arms.items()] == [
        ("single", 0, 2),
        ("loop", 0, 2),
        ("resample", 0, 2),
    ]
    assert report.arms["loop"].passed >= 1  # it ran its visible checks and went on


def cut_then_right(body):
    """A long first answer cut off at the token cap, then the right one."""
    return "OK" if after_feedback(body) else Cut("ok, here is a long answer that")


async def test_a_cut_off_answer_is_counted_and_the_loop_is_told_to_be_brief(tmp_path):
    server = ReactiveOpenAI(cut_then_right)
    report = await arun_eval(
        shout_tasks(2), server.chat_model(), arms=["single", "loop", "resample"], iterations=3
    )
    assert {a: s.cut_off for a, s in report.arms.items()} == {
        "single": 2,
        "loop": 2,
        "resample": 6,
    }
    assert report.arms["loop"].cut_off_rate == pytest.approx(2 / 4)
    assert {r.cut_off for r in report.results if r.arm == "loop"} == {1}
    assert report.to_json()["arms"]["resample"]["cut_off"] == 6
    # the loop's feedback on the cut-off answer says so, after the checks' feedback
    feedback = [b["messages"][-1]["content"] for b in server.requests if after_feedback(b)]
    assert len(feedback) == 2
    assert all(CUT_OFF_FEEDBACK["instructions"] in text for text in feedback)
    assert all("upper" in text.lower() for text in feedback)  # the checks' own feedback


async def test_an_answer_that_ended_on_its_own_gets_no_cut_off_sentence():
    server = ReactiveOpenAI(lambda body: "OK" if after_feedback(body) else "ok")
    outcome = await arun_arm(shout_tasks(1)[0], "loop", server.chat_model())
    assert (outcome.passed, outcome.cut_off, outcome.iterations) == (True, 0, 2)
    feedback = server.requests[1]["messages"][-1]["content"]
    assert "cut off" not in feedback


def test_cut_off_is_read_from_the_finish_reason():
    assert was_cut_off(AIMessage("x", response_metadata={"finish_reason": "length"}))
    assert was_cut_off(AIMessage("x", response_metadata={"done_reason": "length"}))
    assert was_cut_off(AIMessage("x", response_metadata={"stop_reason": "max_tokens"}))
    assert not was_cut_off(AIMessage("x", response_metadata={"finish_reason": "stop"}))
    assert not was_cut_off(AIMessage("x"))
    assert not was_cut_off("x")
    assert "code only" in CUT_OFF_FEEDBACK["code"]


async def test_loop_candidates_writes_two_answers_per_iteration_within_k():
    server = ReactiveOpenAI(right_only_after_feedback)
    report = await arun_eval(
        shout_tasks(2), server.chat_model(), arms=["loop-candidates", "loop"], iterations=4
    )
    candidates = report.arms["loop-candidates"]
    assert (candidates.passed, candidates.answers, candidates.model_calls) == (2, 4.0, 4.0)
    assert candidates.budget == 4
    # a step of loop-candidates is an iteration: K/2 of them
    assert report.by_attempt["loop-candidates"] == [0.0, 1.0]
    assert report.by_attempt["loop"] == [0.0, 1.0, 1.0, 1.0]
    first_round = [b for b in server.requests if not after_feedback(b)]
    assert len(first_round) == 2 * 2 + 2  # 2 candidates per task, 1 loop answer per task


async def test_loop_candidates_grades_the_selected_candidate_of_each_iteration():
    replies = itertools.cycle(["ok", "OK"])  # one of the two candidates is right
    server = ReactiveOpenAI(lambda body: next(replies))
    outcome = await arun_arm(
        shout_tasks(1)[0],
        "loop-candidates",
        server.chat_model(),
        settings=ArmSettings(iterations=4),
    )
    assert (outcome.passed, outcome.iterations, outcome.by_attempt) == (True, 2, (True, True))
    assert outcome.answer == "OK"


async def test_an_odd_budget_is_refused_for_loop_candidates_naming_the_fix():
    server = ReactiveOpenAI(right_only_after_feedback)
    with pytest.raises(ValueError, match="--iterations 4"):
        await arun_eval(shout_tasks(1), server.chat_model(), arms=["loop-candidates"], iterations=3)
    with pytest.raises(ValueError, match="even"):
        await arun_arm(
            shout_tasks(1)[0],
            "loop-candidates",
            server.chat_model(),
            settings=ArmSettings(iterations=5),
        )
    assert server.requests == []
    # the other arms take any K
    await arun_eval(shout_tasks(1), server.chat_model(), arms=["loop"], iterations=3)


async def test_cached_input_tokens_are_reported_per_arm():
    server = ReactiveOpenAI(right_only_after_feedback, cached_tokens=5)
    report = await arun_eval(
        shout_tasks(2), server.chat_model(), arms=["single", "loop"], iterations=3
    )
    assert {a: s.cached_input_tokens for a, s in report.arms.items()} == {
        "single": 5.0,
        "loop": 10.0,
    }
    assert report.to_json()["arms"]["loop"]["cached_input_tokens"] == 10.0
    assert {r.cached_input_tokens for r in report.results if r.arm == "loop"} == {10}


async def test_the_console_report_states_temperatures_the_cap_and_the_curves():
    from rich.console import Console

    server = ReactiveOpenAI(right_only_after_feedback, cached_tokens=5)
    report = await arun_eval(
        shout_tasks(2),
        server.chat_model(max_tokens=64),
        arms=["single", "loop"],
        iterations=3,
        settings=EvalSettings(arm_temperatures={"single": 0.25}),
    )
    assert report.settings["max_tokens"] == 64
    assert {a: s.max_tokens for a, s in report.arms.items()} == {"single": 64, "loop": 64}
    assert {b["max_completion_tokens"] for b in server.requests} == {64}
    console = Console(record=True, width=160)
    render_report(report, console)
    text = console.export_text()
    assert "Eval: K=3, max tokens 64, judge T=0, scripted" in text  # no one T: a column
    assert "Pass rate by attempt" in text
    assert re.search(r"single\s+0\.25\s+0/2\s+0%", text)  # the arm's own temperature
    assert re.search(r"loop\s+1\s+2/2\s+100%", text)
    assert re.search(r"loop\s+1\s+2/2\s+100%\s+\S+\s+2\.0\s+22\s+10\s+14\s+0\s", text)
    # the curves: single one step; loop 0% then 100%
    assert re.search(r"^ *single\s+0% *$", text, re.M)
    assert re.search(r"^ *loop\s+0%\s+100%\s+100% *$", text, re.M)


def test_a_temperature_is_set_within_the_models_own_rules():
    from langchain_openai import ChatOpenAI

    from loop_agents_evals.sampling import at_temperature

    server = ReactiveOpenAI(lambda body: "x")
    model = server.chat_model(max_tokens=5)
    judge = at_temperature(model, 0.0)
    assert (judge.temperature, judge.max_tokens, model.temperature) == (0.0, 5, None)
    judge.invoke("hi")
    assert server.requests[-1]["temperature"] == 0.0
    # OpenAI's reasoning models accept only their default: no temperature is sent
    reasoning = ChatOpenAI(model="gpt-5.4-mini", api_key="sk-test")
    assert at_temperature(reasoning, 0.0).temperature is None
    assert at_temperature(reasoning, 1.0).temperature == 1.0
    # a model without the setting is used as it is
    fake = FakeChat.of("a")
    assert at_temperature(fake, 0.3) is fake


def test_one_temperature_for_every_arm_is_said_once_in_the_title():
    from rich.console import Console

    from loop_agents_evals.report import TaskResult, build_report

    results = [TaskResult("t", arm, True, 1, 1) for arm in ("single", "loop")]
    settings = {"iterations": 2, "temperatures": {"single": 0.5, "loop": 0.5}, "max_tokens": 9}
    console = Console(record=True, width=80)
    render_report(build_report(["single", "loop"], results, settings=settings), console)
    text = console.export_text()
    assert text.startswith("Eval: K=2, T=0.5, max tokens 9")
    header = next(line for line in text.splitlines() if "passed" in line)
    assert header.split()[:3] == ["arm", "passed", "rate"]
    assert all(len(line) <= 80 for line in text.splitlines())


def test_an_arms_name_is_never_cut_in_the_table():
    from rich.console import Console

    from loop_agents_evals.report import TaskResult, build_report

    arms = ["loop", "loop-candidates"]
    results = [TaskResult("t", arm, False, 4, 4, 2300, 300, cut_off=3) for arm in arms]
    console = Console(record=True, width=80)
    render_report(build_report(arms, results, settings={"iterations": 4}), console)
    rows = [line.split() for line in console.export_text().splitlines()]
    assert ["loop-candidates", "0/1", "0%"] in [row[:3] for row in rows]


def test_a_table_too_wide_for_the_terminal_is_split_and_nothing_is_cut():
    from rich.console import Console

    from loop_agents_evals.report import TaskResult, build_report

    arms = ["single", "informed-resample-2"]
    results = [TaskResult("t", arm, True, 2, 3, 98765, 4321, cut_off=1) for arm in arms]
    settings = {"iterations": 3, "temperatures": dict.fromkeys(arms, 1.0), "max_tokens": 256}
    wide = Console(record=True, width=160)
    render_report(build_report(arms, results, settings=settings), wide)
    assert "Cost (means per task)" not in wide.export_text()  # one table where it fits
    narrow = Console(record=True, width=80)
    render_report(build_report(arms, results, settings=settings), narrow)
    text = narrow.export_text()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    results_part, costs = text.split("Cost (means per task)")
    assert re.search(r"^ *informed-resample-2\s+1/1\s+100%\s+\S+ *$", results_part, re.M)
    assert re.search(r"^ *informed-resample-2\s+3\.0\s+98765\s+0\s+4321\s+1\s", costs, re.M)
