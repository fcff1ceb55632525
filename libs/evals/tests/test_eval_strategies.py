"""The strategy arms of an eval (``restart``, ``diverse-first``) and the attempts' transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loop_agents.controls.restart import REQUIREMENTS_HEADER
from loop_agents_evals import arun_eval
from loop_agents_evals.grading import requirement_points
from loop_agents_evals.journal import journal_path
from loop_agents_evals.tasks import parse_task
from tests.eval_models import ReactiveOpenAI

TASK = {
    "kind": "code",
    "prompt": "Write a function that adds two integers.",
    "entry_point": "add",
    "tests": "assert add(1, 2) == 3\nassert add(2, 2) == 4",
    "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a * b + 1\n```"


def stubborn(body: dict) -> str:
    """A model that copies its own code when shown it, and writes it right from a fresh start."""
    messages = body["messages"]
    if any(REQUIREMENTS_HEADER in str(m["content"]) for m in messages):
        return RIGHT
    earlier = [m["content"] for m in messages if m["role"] == "assistant"]
    return earlier[-1] if earlier else WRONG


async def test_restart_beats_the_loop_on_a_model_that_copies_its_code(tmp_path: Path) -> None:
    tasks = [parse_task(TASK | {"id": f"add-{i}"}) for i in range(3)]
    server = ReactiveOpenAI(stubborn)
    out = tmp_path / "r.json"
    report = await arun_eval(
        tasks,
        server.chat_model(),
        arms=["loop", "resample", "restart"],
        iterations=3,
        concurrency=2,
        out=out,
    )
    assert {a: (s.passed, s.tasks) for a, s in report.arms.items()} == {
        "loop": (0, 3),
        "resample": (0, 3),
        "restart": (3, 3),
    }
    comparisons = {(c.arm, c.baseline): (c.won, c.lost, c.tied) for c in report.comparisons}
    assert comparisons[("restart", "resample")] == (3, 0, 0)
    restart = [r for r in report.results if r.arm == "restart"]
    for result in restart:
        assert result.by_attempt == (False, False, True)
        assert [e["sent"] for e in result.transcript] == ["first", "repair", "informed"]
        assert [e["ok"] for e in result.transcript] == [False, False, True]
        assert result.transcript[0]["answer"] == WRONG
        assert "add(1, 2) returned 3, expected 3" not in result.transcript[0]["feedback"]
        assert "add(2, 2) returned 5, expected 4" in result.transcript[0]["feedback"]
        assert result.transcript[0]["score"] == 50.0
    # the fresh sample was told what must hold, as a requirement, and not shown its code
    fresh = [b for b in server.requests if REQUIREMENTS_HEADER in json.dumps(b)]
    assert len(fresh) == 3
    for body in fresh:
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        task = body["messages"][1]["content"]
        assert task.startswith("Write a function that adds two integers.")
        assert "- add(2, 2) must return 4 (not 5)" in task.splitlines()
    # the journal keeps every attempt, and a resumed eval reports it as it was
    lines = journal_path(out).read_text(encoding="utf-8").splitlines()[1:]
    kept = [json.loads(line) for line in lines if json.loads(line)["arm"] == "restart"]
    assert [len(k["transcript"]) for k in kept] == [3, 3, 3]
    again = await arun_eval(
        tasks, server.chat_model(), arms=["loop", "resample", "restart"], iterations=3, out=out
    )
    assert [r.transcript for r in again.results] == [r.transcript for r in report.results]
    assert len(server.requests) == 3 * (3 + 3 + 3)  # nothing ran again


async def test_diverse_first_spends_k_answers_two_first_then_one_repair() -> None:
    def respond(body: dict) -> str:
        repairing = any(m["role"] == "assistant" for m in body["messages"])
        return RIGHT if repairing else WRONG

    tasks = [parse_task(TASK | {"id": "add"})]
    server = ReactiveOpenAI(respond)
    report = await arun_eval(tasks, server.chat_model(), arms=["diverse-first"], iterations=3)
    (result,) = report.results
    assert result.passed
    assert result.iterations == 3
    assert result.model_calls == 3
    assert result.by_attempt == (False, False, True)
    assert [e["sent"] for e in result.transcript] == ["first", "first", "repair"]
    repair = [b for b in server.requests if any(m["role"] == "assistant" for m in b["messages"])]
    assert len(repair) == 1
    assert [m["role"] for m in repair[0]["messages"]] == ["system", "user", "assistant", "user"]


async def test_diverse_first_needs_a_budget_of_two() -> None:
    server = ReactiveOpenAI(lambda body: RIGHT)
    with pytest.raises(ValueError, match=r"diverse-first .* at least 2"):
        await arun_eval(
            [parse_task(TASK | {"id": "add"})],
            server.chat_model(),
            arms=["diverse-first"],
            iterations=1,
        )
    assert server.requests == []


def test_requirement_points_turn_failed_calls_into_what_must_hold() -> None:
    feedback = (
        "Your code failed 2 of 3 tests:\n"
        "- join_names(['Ann', 'Bob']) returned 'AnnBob', expected 'Ann and Bob'\n"
        "- assert f(1) > 0  ->  AssertionError\n"
        "Reply with the complete corrected code of `f` in one ```python block."
    )
    assert requirement_points(feedback) == [
        "join_names(['Ann', 'Bob']) must return 'Ann and Bob' (not 'AnnBob')",
        "assert f(1) > 0  ->  AssertionError",
    ]
    assert requirement_points("Your code could not be tested: no code.") == [
        "Your code could not be tested: no code."
    ]
    crashed = (
        "Your code failed 1 of 1 tests:\n"
        '- got = rle_encode("aaab")  ->  TypeError: unsupported operand type(s) for +: '
        "'int' and 'str' (at line 15 of the code: out.append(n + 'c'))\n"
        "- got = f()  ->  KeyError\n"
    )
    assert requirement_points(crashed) == [
        'rle_encode("aaab") must not raise TypeError (it raised: unsupported operand '
        "type(s) for +: 'int' and 'str')",
        "f() must not raise KeyError",
    ]
    checks = (
        "The answer breaks 3 requirements:\n"
        "- Use exactly 3 lines; the answer has 2.\n"
        "- End the answer with exactly 'Bye'; it ends with '...so long'.\n"
        "- Write the whole answer in lowercase letters; 2 letters are not (e.g. 'LM').\n"
        "Reply with the complete revised answer, and nothing else."
    )
    assert requirement_points(checks) == [
        "Use exactly 3 lines.",
        "End the answer with exactly 'Bye'.",
        "Write the whole answer in lowercase letters.",
    ]
