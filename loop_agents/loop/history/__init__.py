"""History policies: what the agent is sent on each iteration (the `History` control).

- `policies`: `LoopHistory` (the conversation split into the request, the attempts and
  their feedback), the built-in policies (``"full"``, ``"last_attempt"``,
  ``"feedback_log"``), `without_rejected_attempts`, and `StatefulHistory`, the base of a
  policy that calls models or keeps data between iterations;
- `compaction`: `compacting`, a stateful policy that summarizes older attempts to fit a
  token budget (with `_summary_text`, its prompt, and `_token_count`, its counter);

The `loop_agents.controls.History` control applies the policy each iteration and checks
what it chose.

A new built-in policy goes in `policies` (a function of `LoopHistory`, named in
``builtin_policy``); one that needs a model or memory subclasses `StatefulHistory` in a
module of its own here.
"""
