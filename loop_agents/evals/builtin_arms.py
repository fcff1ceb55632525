"""The built-in arms, each an `EvalArm`; see `loop_agents.evals.arms` for what each does.

Example:
    ```python
    arm = BUILTIN_ARMS["restart"]
    print(arm.identity())
    ```
"""

from __future__ import annotations

from collections.abc import Mapping

from loop_agents.controls.adaptive import Adaptive
from loop_agents.controls.diverse_first import DiverseFirst
from loop_agents.controls.restart import Restart
from loop_agents.evals.arm_names import CANDIDATES, FIRST_ANSWERS, Arm
from loop_agents.evals.arm_protocol import EvalArm
from loop_agents.evals.grading import requirement_points
from loop_agents.evals.loop_arm import LoopArm
from loop_agents.evals.sample_arm import SampleArm

__all__ = ["BUILTIN_ARMS"]

BUILTIN_ARMS: Mapping[Arm, EvalArm] = {
    "single": SampleArm(resample=False),
    "loop": LoopArm(),
    "resample": SampleArm(resample=True),
    "judge-loop": LoopArm(evaluator="judge"),
    "loop-candidates": LoopArm(candidates=CANDIDATES),
    "restart": LoopArm(controls=[Restart(requirements=requirement_points)]),
    # every first answer is the loop's agent's, system prompt included
    "diverse-first": LoopArm(controls=[DiverseFirst(FIRST_ANSWERS)]),
    # learns across the eval's tasks; its seed is derived from the eval's (evals.learning)
    "adaptive": LoopArm(controls=[Adaptive(requirements=requirement_points)]),
}
"""Each built-in arm by its name, in the order the report shows them."""
