"""Controls: the parts of a loop, one module each, composed in order of their stage.

Either host takes them (``controls=[...]``); a control of your own subclasses `LoopControl`.
What each one does, and the stages: ``docs/loop-control.md``.
"""

from loop_agents.controls.adaptive import Adaptive, Repair
from loop_agents.controls.advice import Advice
from loop_agents.controls.agent_errors import AgentErrors
from loop_agents.controls.budgets import Budgets
from loop_agents.controls.candidates import Candidates
from loop_agents.controls.criteria import Criteria
from loop_agents.controls.diverse_first import DiverseFirst
from loop_agents.controls.feedback_format import FeedbackStyle
from loop_agents.controls.history import History
from loop_agents.controls.plateau import Plateau
from loop_agents.controls.restart import Restart, Retry
from loop_agents.controls.retries import Retries
from loop_agents.controls.selection import AnswerSelection
from loop_agents.controls.stagnation import Stagnation
from loop_agents.loop.protocol import (
    AgentCall,
    Attempt,
    Judged,
    LoopControl,
    LoopSpec,
    Outcome,
    Progress,
    Stage,
    Turn,
    Verdict,
)
from loop_agents.runtime.steps import Call, Measured

__all__ = [
    "Adaptive",
    "Advice",
    "AgentCall",
    "AgentErrors",
    "AnswerSelection",
    "Attempt",
    "Budgets",
    "Call",
    "Candidates",
    "Criteria",
    "DiverseFirst",
    "FeedbackStyle",
    "History",
    "Judged",
    "LoopControl",
    "LoopSpec",
    "Measured",
    "Outcome",
    "Plateau",
    "Progress",
    "Repair",
    "Restart",
    "Retries",
    "Retry",
    "Stage",
    "Stagnation",
    "Turn",
    "Verdict",
]
