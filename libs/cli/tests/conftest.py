# The repository's shared fixtures and hooks (tests/conftest.py: checkpointers, markers),
# and the fake llama.cpp server of the bundled model's tests (tests/fake_llama.py).
pytest_plugins = ["tests.conftest", "tests.fake_llama"]
