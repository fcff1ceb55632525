import sys
from pathlib import Path

# checkpointer fixtures (saver, async_saver, postgres_server, postgres_url)
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
