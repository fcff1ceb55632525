"""The loop itself: everything `create_loop_agent` is made of, and nothing else.

This is the lowest layer but two (only `loop_agents.sandbox` and `loop_agents.models`
are below it, and it imports neither): it knows nothing of particular evaluators, models,
terminals or servers. Evaluators build on its types (`LoopContext`, `LoopEvaluation`);
the loop never imports an evaluator.

- the graph: `graph` (`create_loop_agent`), `loop_graph` (`LoopAgentGraph`, the compiled
  loop that checks its input and holds its thread), `nodes` (the ``invoke_agent`` and
  ``evaluate`` nodes), `state` (the state, `LoopContext`, `LoopEvaluation`, the records);
- what happens in an iteration: `input_checks` (what a run accepts), `history` (what the
  agent is sent: the history policies), `feedback` (the evaluator's feedback as the
  agent's next user turn), `stopping` (why a loop stops: cap, plateau, budgets),
  `selection` (which attempt is the answer), `output` (what the loop returns),
  `records` (an iteration record's answer), `attempts` (one agent call or its failure),
  `outcomes` and `iteration_records` (an iteration's record from its calls and verdicts);
- the options: `options` (every option of `create_loop_agent`, checked before anything is
  built) and `control` (the loop controls: candidates, score-only verdicts and the
  advisor, criteria up front, request and cost budgets, errors as feedback);
- what a run reports: `events` (the loop events on the ``custom`` stream), `tracing`
  (run names, tags and metadata);
- running it reliably: `timeouts` (time limits and retries of the two nodes),
  `checkpoints` (evaluations saved with the checkpoint, going back to an iteration),
  `storage` (delta channels or full values in checkpoints), `thread_locking` (one run at
  a time on a thread);
- private helpers shared with the layers above: `_agent` (calling the agent, the
  `AgentLike` type), `_evaluation` (calling the evaluator, validating its verdict),
  `_usage` (counting tokens), `_numbers` (reading numbers from outside), `_sync_bridge`
  (async code from sync methods), `_function_runnable`, `_reporting`, `_process_locks`.

The public names are imported from `loop_agents`; the modules here are where they live.
"""
