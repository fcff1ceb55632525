"""Finding a running Ollama server and the models it has.

Ollama serves an OpenAI-compatible API under ``/v1`` and lists its models at
``/api/tags``. `find_ollama` asks that list with a short timeout; it says ``None`` when
nothing answers there (or something that is not Ollama does), so a caller can move on to
the next way of finding a model.

Example:
    ```python
    from loop_agents_cli.models.ollama import find_ollama

    found = find_ollama()
    if found is not None:
        print(found.base_url, found.models)  # http://127.0.0.1:11434/v1 ['llama3.2:latest']
    ```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

DEFAULT_URL = "http://127.0.0.1:11434"
"""Where Ollama listens by default."""

URL_VARIABLE = "LOOP_AGENTS_OLLAMA_URL"
"""The environment variable with another address for Ollama (``off`` not to look)."""

PROBE_TIMEOUT = 1.0
"""Seconds to wait for Ollama's model list (a closed loopback port fails at once)."""


@dataclass(frozen=True)
class OllamaServer:
    """A running Ollama server.

    Attributes:
        url: Its address, e.g. ``http://127.0.0.1:11434``.
        models: The names of its models, in the order it lists them.

    """

    url: str
    models: tuple[str, ...]

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL: ``{url}/v1``."""
        return f"{self.url.rstrip('/')}/v1"

    def pick(self, requested: str | None) -> str | None:
        """The model to use: ``requested`` if Ollama has it (``name`` or ``name:latest``).

        Without a request, the first model listed; ``None`` when there is none, or when
        Ollama does not have the requested one.

        Example:
            ```python
            OllamaServer("http://127.0.0.1:11434", ("qwen3:4b",)).pick(None)  # 'qwen3:4b'
            ```
        """
        if requested is None:
            return self.models[0] if self.models else None
        for name in self.models:
            if requested in (name, name.removesuffix(":latest")):
                return name
        return None


def find_ollama(url: str = DEFAULT_URL, *, timeout: float = PROBE_TIMEOUT) -> OllamaServer | None:
    """The Ollama server at ``url`` with its models, or ``None`` if none answers there.

    Only a reply in Ollama's own form (``{"models": [{"name": ...}, ...]}`` at
    ``/api/tags``) counts; any other server, an error status or a timeout gives ``None``.

    Example:
        ```python
        server = find_ollama("http://127.0.0.1:11434")
        ```
    """
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            response = client.get(f"{url.rstrip('/')}/api/tags")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        listed = response.json().get("models")
    except (ValueError, AttributeError):
        return None
    if not isinstance(listed, Sequence) or isinstance(listed, str):
        return None
    names = tuple(
        str(entry["name"])
        for entry in listed
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
    )
    return OllamaServer(url.rstrip("/"), names)
