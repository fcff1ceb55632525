"""A loop for people to look at: live in a terminal (rich), or afterwards as an HTML page.

- `loop_console`: `LoopConsole`, `stream_to_console` and `astream_to_console`, which
  render what a loop streams; the demos and the ``loop-agents`` command use them.
- `html_page` and `svg_charts`: self-contained HTML pages (inline SVG charts, no script,
  everything escaped), and `run_page`, one run's page (``loop-agents show --report``);
  the eval's page (`loop_agents.evals.html_report`) is built from the same parts.
"""
