"""History policies: what the agent is sent on each iteration (the `History` control).

- `policies`: `LoopHistory`, the built-in policies, `StatefulHistory`;
- `compaction`: `compacting`, a stateful policy that summarizes older attempts.
"""
