"""The package's version: the one place it is written.

``pyproject.toml`` reads it (setuptools' dynamic ``version``), so the wheel's metadata,
``loop_agents.__version__`` and ``loop-agents --version`` all show this string.
"""

__version__ = "0.3.0"
