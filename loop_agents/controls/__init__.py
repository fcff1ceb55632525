"""Controls: the parts of a loop, one module each, composed in order of their stage.

A loop's behaviour beyond its agent, evaluator and cap is a list of controls, given to
either host: ``create_loop_agent(agent, evaluator, 5, controls=[...])`` or
``LoopMiddleware(evaluator, 5, controls=[...])``. Controls of your own subclass
`LoopControl` (its hooks are documented in `loop_agents.loop.protocol`):

- `criteria`: `Criteria` (the criteria shown to the agent up front);
- `history`: `History` (what the agent is sent of the conversation);
- `candidates`: `Candidates` (k answers per iteration, the best kept);
- `diverse_first`: `DiverseFirst` (k first answers, then repair of the best);
- `agent_errors`: `AgentErrors` (a failed attempt the model caused is fed back);
- `advice`: `Advice` (a score decides at a threshold; an advisor writes missing feedback);
- `feedback_format`: `FeedbackStyle` (how feedback is put to the agent);
- `restart`: `Restart` (a fresh sample when repairing stops paying), and the kinds of
  retry (`Retry`: a repair, a fresh sample, a fresh sample told what must hold);
- `adaptive`: `Adaptive` (learns from the verdicts which kind of retry pays). Without a
  control that chooses the kind of retry, every retry is a repair (seed 001's loop);
  `Repair()` is kept one release as a deprecated no-op;
- `budgets`: `Budgets` (tokens, time, requests, cost; prices);
- `plateau`: `Plateau` (stop when the scores stop improving);
- `stagnation`: `Stagnation` (stop when an answer repeats an earlier one);
- `selection`: `AnswerSelection` (which attempt is the answer);
- `retries`: `Retries` (retry policies and time limits of the calls).

A new control is one module here, with its tests; nothing else changes.
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
