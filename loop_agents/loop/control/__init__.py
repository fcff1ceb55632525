"""Loop control: the options that change how an iteration runs and when the loop gives up.

Each module is one control of `create_loop_agent`, with its check and its runtime part:
`candidates` (k answers per iteration, the best one kept), `advice` (feedback for
score-only verdicts: an ``advisor`` model or a default sentence), `criteria` (the
evaluator's criteria shown to the agent up front), `budgets` (request and cost budgets,
prices), `agent_errors` (a model-caused agent failure as feedback). `checks` gathers their
options into one `LoopControls` for `loop_agents.loop.options`.

A new loop control goes here as a module of its own; the nodes (`loop_agents.loop.nodes`)
read it from `LoopControls`.
"""
