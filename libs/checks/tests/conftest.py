# The repository's shared fixtures and hooks (tests/conftest.py: checkpointers, markers).
pytest_plugins = ["tests.conftest"]
