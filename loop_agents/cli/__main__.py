"""``python -m loop_agents.cli``: the ``loop-agents`` command."""

import sys

from loop_agents.cli.app import main

sys.exit(main())
