"""The loop's core: what both hosts run, written once, knowing neither host.

It sits on the runtime (`loop_agents.runtime`) and knows nothing of particular
controls, hosts, evaluators, models or terminals: evaluators build on its types
(`LoopContext`, `LoopEvaluation`), controls on its protocol, the hosts on its nodes.

- `state`: the state and its reducers (`LoopState`, the one table of the loop's keys),
  `LoopContext`, `LoopEvaluation`, the records; `storage` (delta channels or full values,
  and the reducers applied by LangGraph's own channels);
- `protocol`: `LoopControl`, its hooks and what a control declares (`Stage`, claims,
  bind, retries, prices, feedback format), and what the hooks are given (`Turn`,
  `AgentCall`, `Attempt`, `Outcome`, `Progress`); `hook_checks` (what a hook must return);
- `nodes`: `LoopNodes`, the two steps of an iteration (``open_turn``, ``evaluate``) as
  programs (`loop_agents.runtime.steps`); `turns` (opening an iteration or a new loop),
  `outcomes` (an iteration's record from its calls and verdicts), `records` (an answer's
  record, choosing the loop's answer);
- what the agent is sent and told: `history` (the history policies), `feedback` (the
  evaluator's feedback as a fenced user turn), `agents` (calling any agent),
  `agent_state` (a graph agent's state beyond messages), `evaluation` (calling the
  evaluator, checking its verdict);
- what a run reports and returns: `events` (the ``custom`` stream), `tracing` (run
  names, tags and metadata), `output` (output modes), `checkpoints` (going back to an
  iteration), `input_checks` (what a run accepts);
- `controls`: the former home of the controls (now `loop_agents.controls`), kept one
  release for old imports.
"""
