"""The ``loop-agents`` command: put any task through a loop, on any model you have.

`parser` and `arguments` are light (``--help`` imports nothing heavy); `app.main` runs a
subcommand's handler (`run_command`, `runs_command`, `show_command`, `demo_command`) and
maps errors to exit statuses: 0 the loop ran, 1 it failed, 2 bad arguments, 130 Ctrl-C,
141 a closed stdout. docs/cli.md is the command's page.
"""

from loop_agents_cli.app import main
from loop_agents_cli.parser import build_parser

__all__ = ["build_parser", "main"]
