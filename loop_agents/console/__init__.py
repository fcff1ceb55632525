"""A running loop in a terminal: the agent's tokens, the verdicts, a summary (rich).

- `loop_console`: `LoopConsole`, `stream_to_console` and `astream_to_console`, which
  render what a loop streams; the demos and the ``loop-agents`` command use them.
"""
