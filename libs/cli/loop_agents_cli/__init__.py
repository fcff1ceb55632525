"""The ``loop-agents`` command: put any task through a loop, on any model you have.

```
loop-agents run "Write a limerick about LangGraph." --rubric "Five lines, AABBA, funny."
loop-agents run "Write fizzbuzz.py" --check 'python {answer_file} | head -3'
loop-agents resume 3f9a2c1b
loop-agents runs
loop-agents show 3f9a2c1b --json
loop-agents demo song-lyrics
```

- `parser`: the subcommands and their arguments (light: ``--help`` imports nothing heavy);
- `arguments`: each subcommand's checks, run before its handler is imported (light too);
- `app`: `main`, which parses, runs a subcommand's handler and maps errors to exit statuses;
- `run_command`, `runs_command` (light), `show_command`, `demo_command`: the handlers;
- `spec` (a run's settings), `loop` (the loop built from them), `session` (running it:
  streaming, saving, Ctrl-C, failures), `store` (saved runs), `results` (the JSON form).

Exit status: 0 the loop ran, 1 it failed (the result so far is printed), 2 bad arguments
or settings, 130 interrupted.
"""

from loop_agents_cli.app import main
from loop_agents_cli.parser import build_parser

__all__ = ["build_parser", "main"]
