"""Finding a running Ollama server and its models (its list at ``/api/tags``).

Example:
    ```python
    if (found := find_ollama()) is not None:
        print(found.base_url, found.models)
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
    """A running Ollama server: its ``url`` and its ``models``, as it lists them."""

    url: str
    models: tuple[str, ...]

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL: ``{url}/v1``."""
        return f"{self.url.rstrip('/')}/v1"

    def pick(self, requested: str | None) -> str | None:
        """The model to use: ``requested`` if listed (``name`` or ``name:latest``), else the first.

        ``None`` when there is none (or not the requested one).

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
    """The Ollama server at ``url`` with its models; ``None`` unless it answers in Ollama's form.

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
