"""Controls: the parts of a loop, one module each, composed in order.

Every option of `create_loop_agent` beyond the agent, the evaluator and the cap is
shorthand for a control here; ``controls=[...]`` takes them too, and controls of your
own (subclass `LoopControl`; its hooks are documented in `loop_agents.loop.controls.base`):

- `criteria`: `Criteria` (``show_criteria``, ``criteria``);
- `history`: `History` (``history``);
- `advice`: `ScoreThreshold` (``threshold``) and `Advisor` (``advisor``);
- `candidates`: `Candidates` (``candidates``, ``candidate_temperature``);
- `agent_errors`: `AgentErrors` (``on_agent_error``, ``count_failed_attempts``,
  ``max_agent_errors``);
- `feedback_format`: `FeedbackStyle` (``feedback_format``);
- `budgets`: `Budgets` (``token_budget``, ``time_budget``, ``request_budget``,
  ``cost_budget``, ``prices``);
- `plateau`: `Plateau` (``patience``, ``min_delta``);
- `selection`: `AnswerSelection` (``select``);
- `restart`: `Restart` (a fresh sample when repairing stops paying);
- `diverse_first`: `DiverseFirst` (k first answers, then repair of the best);
- `stagnation`: `Stagnation` (stop when an answer repeats an earlier one);
- `adaptive`: `Adaptive` (learns from the verdicts which kind of retry pays: a repair, a
  fresh sample, or a fresh sample told what must hold);
- `retries`: `Retries` (``agent_retry_policy``, ``evaluator_retry_policy``,
  ``agent_timeout``, ``evaluator_timeout``).

A new control is one module here, with its tests; nothing else changes.
"""

from loop_agents.loop.controls.adaptive import Adaptive, Retry
from loop_agents.loop.controls.advice import Advisor, ScoreThreshold
from loop_agents.loop.controls.agent_errors import AgentErrors
from loop_agents.loop.controls.base import (
    AgentCall,
    Attempt,
    Judged,
    LoopControl,
    Outcome,
    Progress,
    Turn,
    Verdict,
)
from loop_agents.loop.controls.budgets import Budgets
from loop_agents.loop.controls.candidates import Candidates
from loop_agents.loop.controls.criteria import Criteria
from loop_agents.loop.controls.diverse_first import DiverseFirst
from loop_agents.loop.controls.feedback_format import FeedbackStyle
from loop_agents.loop.controls.history import History
from loop_agents.loop.controls.plateau import Plateau
from loop_agents.loop.controls.restart import Restart
from loop_agents.loop.controls.retries import Retries
from loop_agents.loop.controls.selection import AnswerSelection
from loop_agents.loop.controls.stagnation import Stagnation
from loop_agents.loop.steps import Call, Measured

__all__ = [
    "Adaptive",
    "Advisor",
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
    "Measured",
    "Outcome",
    "Plateau",
    "Progress",
    "Restart",
    "Retries",
    "Retry",
    "ScoreThreshold",
    "Stagnation",
    "Turn",
    "Verdict",
]
