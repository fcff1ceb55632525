"""The loop's core: what both hosts run, written once, knowing neither host.

On the runtime (`loop_agents.runtime`) and below the controls and hosts: the state
(`state`, `storage`), the control protocol (`protocol`, `hook_checks`), the two steps of
an iteration (`nodes`, `turns`, `outcomes`, `records`), what the agent is sent and told
(`history`, `feedback`, `agents`, `agent_state`, `evaluation`) and what a run reports
and returns (`events`, `tracing`, `output`, `checkpoints`, `input_checks`).
"""
