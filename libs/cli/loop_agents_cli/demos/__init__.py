"""Ready-to-run demos of loop agents, shared by ``examples/`` and the ``loop-agents`` command.

- `loop_agents_cli.demos.song_lyrics`: the article's composer/reviewer loop (a ci to the tune
  相见欢, scored by a reviewer model until it reaches 75 of 100).
"""
