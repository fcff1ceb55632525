"""The sampling arms: ``single`` (one answer) and ``resample`` (independent answers).

``resample`` asks again, with the same messages, until an answer passes the visible
tests or checks or K answers are written: the compute-matched control of a loop.

Example:
    ```python
    ran = await SampleArm(resample=True).run(arm_run)
    ```
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage

from loop_agents.evals.arm_protocol import ArmRun, EvalArm, Ran
from loop_agents.evals.grading import request_text, system_prompt
from loop_agents.evals.sampling import was_cut_off
from loop_agents.evals.transcript import entry, retry_sent

__all__ = ["SampleArm"]


class SampleArm(EvalArm):
    """``single`` (``resample=False``) or ``resample`` (``resample=True``).

    Example:
        ```python
        single, resample = SampleArm(resample=False), SampleArm(resample=True)
        ```
    """

    def __init__(self, *, resample: bool) -> None:
        self.resample = resample

    def identity(self) -> dict[str, Any]:
        """``{"kind": "resample"}`` or ``{"kind": "single"}``."""
        return {"kind": "resample" if self.resample else "single"}

    async def run(self, run: ArmRun) -> Ran:
        """One answer, or independent answers until one passes the visible checks."""
        task, attempts = run.task, run.attempts
        messages: list[AnyMessage] = [
            SystemMessage(system_prompt(task)),
            HumanMessage(request_text(task)),
        ]
        count = run.settings.iterations if self.resample else 1
        answer = ""
        for attempt in range(1, count + 1):
            if attempt == 1 and run.first_answer is not None:
                reply = await run.first_answer(messages, run.config)
            else:
                reply = await run.model.ainvoke(messages, run.config)
            answer = attempts.add(reply)
            attempts.answers.append(answer)
            found = await run.grader.check(answer) if attempt < count else None
            made = entry(answer, found, iteration=attempt, cut_off=was_cut_off(reply))
            attempts.transcript.append(made | {"sent": retry_sent("first", attempt)})
            if found is not None and found.ok:
                return Ran(answer, attempt, steps=count)
        return Ran(answer, count, steps=count)
