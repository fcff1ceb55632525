"""The console shows each iteration's cost when the loop's prices are known."""

from __future__ import annotations

import io

from rich.console import Console

from loop_agents import create_loop_agent
from loop_agents.controls import Budgets
from loop_agents_cli.console import LoopConsole
from tests.fakes import FakeChat
from tests.unit_tests.controls.test_budgets import PRICES, REQUEST, answer, judged_by


def test_the_console_shows_cost_when_prices_are_known():
    agent = FakeChat.of(answer("a", "agent-model", (10, 5)))
    judge = FakeChat.of(answer("v", "judge-model", (100, 20)))
    evaluate, _ = judged_by(judge)
    loop = create_loop_agent(agent, evaluate, 2, controls=[Budgets(prices=PRICES)])
    out = io.StringIO()
    view = LoopConsole(Console(file=out, width=120))
    for mode, payload in loop.stream({"messages": [REQUEST]}, stream_mode=["messages", "custom"]):
        view.handle(mode, payload)
    view.close()
    text = out.getvalue()
    assert "cost" in text
    assert "0.1400" in text
    assert "cost 0.2800" in text
