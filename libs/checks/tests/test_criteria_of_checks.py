"""The code-running evaluators state their criteria (shown with ``Criteria()``)."""

from __future__ import annotations

from loop_agents_checks import code_runner, command_check


def test_the_code_running_evaluators_state_their_criteria():
    assert (command_check("true").criteria or "").endswith("exit with status 0): true")
    runner = code_runner("63245986", timeout=5)
    assert "exactly one Python code block that prints its result" in (runner.criteria or "")
    assert "5 s" in (runner.criteria or "")
    assert "63245986" not in (runner.criteria or "")  # the expected answer stays hidden

    def prime(result: object) -> bool:
        """The output is a prime number."""
        return True

    assert (code_runner(check=prime).criteria or "").endswith(
        "checked: The output is a prime number."
    )
