"""A loop for people to look at: live in a terminal (rich), or afterwards as an HTML page.

```python
from loop_agents_cli.console import stream_to_console

result = stream_to_console(loop, {"messages": [HumanMessage("Write a haiku.")]})
```
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_agents_cli.console.loop_console import (
        LoopConsole,
        astream_to_console,
        stream_to_console,
    )

__all__ = ["LoopConsole", "astream_to_console", "stream_to_console"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from loop_agents_cli.console import loop_console

        return getattr(loop_console, name)
    raise AttributeError(f"module 'loop_agents_cli.console' has no attribute {name!r}")
