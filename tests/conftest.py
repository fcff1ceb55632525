import sys
from pathlib import Path

# checkpointer fixtures (saver, async_saver, postgres_server, postgres_url)
pytest_plugins = ["tests.savers"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
