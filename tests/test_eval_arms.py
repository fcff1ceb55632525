"""The four arms on scripted models.

- A model whose right answer comes only after feedback: the loop must beat single and
  resample (and a judge that asks for changes helps too; one that approves all does not).
- A model whose answers are random and ignore feedback: the loop and resample have the
  same chance, the loop is credited for nothing it did not earn, and no result passes
  unless its final answer really passes.
"""

from __future__ import annotations

import random

from loop_agents.evals import arun_arm, arun_eval
from loop_agents.evals.arms import ArmSettings
from loop_agents.evals.checks import run_checks
from loop_agents.evals.tasks import InstructionsTask, parse_task
from tests.eval_models import ReactiveOpenAI, after_feedback, is_judge, user_text, verdict
from tests.fakes import FakeChat, review


def shout_tasks(count: int) -> list[InstructionsTask]:
    """Tasks answered right by 'OK' (uppercase) and wrong by 'ok'."""
    return [
        parse_task(
            {
                "id": f"shout-{i}",
                "kind": "instructions",
                "prompt": f"Task {i}: reply OK in capitals.",
                "checks": [{"check": "case", "case": "upper"}, {"check": "word_count", "max": 1}],
            }
        )
        for i in range(count)
    ]


def right_only_after_feedback(body):
    if is_judge(body):  # a judge that wants capitals
        answer = body["messages"][-1]["content"]
        return verdict(95, "Good.") if answer == "OK" else verdict(30, "Make it louder.")
    return "OK" if after_feedback(body) else "ok"


async def test_the_loop_beats_single_and_resample_when_only_feedback_helps():
    server = ReactiveOpenAI(right_only_after_feedback)
    report = await arun_eval(
        shout_tasks(6), server.chat_model(), iterations=3, judge_method="function_calling"
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
        temperature=0.3,
        arm_temperatures={"resample": 1.5},
        judge_temperature=0.2,
        judge_method="function_calling",
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
        judge_method="function_calling",
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
    assert "assert add(1, 2) == 3  ->  got 2" in feedback
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
