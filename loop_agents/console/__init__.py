"""A running loop in a terminal: the agent's tokens, the verdicts, a summary (rich).

- `loop_console`: `LoopConsole`, `stream_to_console` and `astream_to_console`, which
  render what a loop streams; the demos and the ``loop-agents`` command use them.

```python
from loop_agents.console import stream_to_console

result = stream_to_console(loop, {"messages": [HumanMessage("Write a haiku.")]})
```
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_agents.console.loop_console import (
        LoopConsole,
        astream_to_console,
        stream_to_console,
    )

__all__ = ["LoopConsole", "astream_to_console", "stream_to_console"]


def __getattr__(name: str) -> Any:
    """The console's names, imported on first use (rich and LangGraph load then)."""
    if name in __all__:
        from loop_agents.console import loop_console

        return getattr(loop_console, name)
    raise AttributeError(f"module 'loop_agents.console' has no attribute {name!r}")
