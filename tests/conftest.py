import sys
from pathlib import Path

import pytest

# checkpointer fixtures (saver, async_saver, postgres_server, postgres_url), and the fake
# llama.cpp server of the bundled model's tests (fake_llama)
pytest_plugins = ["tests.savers"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def env_without_model_settings(**extra: str) -> dict[str, str]:
    """This process's environment without any OPENAI_*/LOOP_AGENTS_* setting, plus ``extra``.

    For programs run in a subprocess that must not see a developer's model settings.
    """
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LOOP_AGENTS_"))}
    return env | extra


def pytest_configure(config: pytest.Config) -> None:
    """The ``browser`` marker: tests that draw pages in headless Chromium."""
    config.addinivalue_line(
        "markers",
        "browser: tests that need Chromium (make test BROWSER_TESTS=no leaves them out)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the fast set fast: the sandbox's async form runs there in one isolation.

    `tests/test_sandbox.py` runs each scenario in every isolation, sync and async; the
    async form in the isolations other than bubblewrap waits out the same time limits
    again, so those combinations are slow tests (`make test` runs every one).
    """
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or item.path.name != "test_sandbox.py":
            continue
        params = callspec.params
        if params.get("kind") == "async" and params.get("mode") != "bwrap":
            item.add_marker(pytest.mark.slow)
