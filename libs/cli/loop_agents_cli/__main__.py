"""``python -m loop_agents_cli``: the ``loop-agents`` command."""

import sys

from loop_agents_cli.app import main

sys.exit(main())
