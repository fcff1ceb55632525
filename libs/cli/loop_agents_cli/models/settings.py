"""Model settings read from the environment (``.env``), shared by the examples and tools.

- ``OPENAI_API_KEY``: the API key.
- ``OPENAI_BASE_URL``: any OpenAI-compatible server (llama.cpp, vLLM, a proxy);
  unset means OpenAI.
- ``LOOP_AGENTS_MODEL``: the model name (default ``gpt-5.4-mini``).
- ``LOOP_AGENTS_STRUCTURED_OUTPUT``: ``json_schema`` (default), ``function_calling``
  or ``json_mode``.
- ``LOOP_AGENTS_MAX_TOKENS``: a cap on each answer's length, in tokens (default: none).
- ``LOOP_AGENTS_THREADS``: CPU threads of the bundled llama.cpp server (`parse_threads`).
- ``LOOP_AGENTS_SEED``: the bundled llama.cpp server's random seed (`parse_seed`; default a
  new one every run).

`Environment` reads them from the process environment over a ``.env`` file and says
where each was set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args
from urllib.parse import urlsplit

from dotenv import dotenv_values, find_dotenv

if TYPE_CHECKING:  # imported when a model is made: reading settings stays light
    from langchain_openai import ChatOpenAI

StructuredOutputMethod = Literal["json_schema", "function_calling", "json_mode", "text"]

DEFAULT_MODEL = "gpt-5.4-mini"
NO_KEY_PLACEHOLDER = "not-needed"
"""The API key sent to a server at ``OPENAI_BASE_URL`` when no key is set."""


THREADS_VARIABLE = "LOOP_AGENTS_THREADS"
"""The environment variable that sets the bundled llama.cpp server's CPU threads."""


SEED_VARIABLE = "LOOP_AGENTS_SEED"
"""The environment variable that sets the bundled llama.cpp server's random seed."""

MAX_SEED = 2**31 - 1
"""The largest random seed the bundled server takes."""


class SettingsError(ValueError):
    """A model setting is missing or malformed."""


def parse_seed(text: str | int, origin: str = SEED_VARIABLE) -> int:
    """A random seed for the bundled llama.cpp server: a whole number from 0 to `MAX_SEED`.

    Args:
        text: The value (``--seed`` or `SEED_VARIABLE`).
        origin: Where it was set, for the error message.

    Raises:
        SettingsError: ``text`` is not such a number.

    Example:
        ```python
        assert parse_seed(" 42 ") == 42
        ```
    """
    raw = str(text).strip()
    return check_seed(int(raw) if raw.lstrip("+-").isdigit() else text, origin)


def check_seed(seed: object, where: str) -> int:
    """``seed`` if it is an int from 0 to `MAX_SEED`; else a `SettingsError` naming ``where``.

    `SettingsError` is a ``ValueError``.

    Example:
        ```python
        check_seed(7, "--seed")  # 7
        ```
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise SettingsError(f"{where} must be a whole number from 0 to {MAX_SEED}; got {seed!r}")
    return seed


def parse_threads(text: str | int, origin: str = THREADS_VARIABLE) -> int:
    """A number of CPU threads for the bundled llama.cpp server: a whole number >= 1.

    Args:
        text: The value (``--threads`` or `THREADS_VARIABLE`).
        origin: Where it was set, for the error message.

    Raises:
        SettingsError: ``text`` is not a whole number >= 1.

    Example:
        ```python
        assert parse_threads(" 2 ") == 2
        ```
    """
    raw = str(text).strip()
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise SettingsError(
            f"{origin}={raw!r} must be a whole number of CPU threads >= 1 (or unset for "
            f"the default: half the cores)"
        )
    return threads


@dataclass(frozen=True)
class ModelSettings:
    """Where the model is and how to talk to it.

    Attributes:
        api_key: ``OPENAI_API_KEY``.
        base_url: ``OPENAI_BASE_URL``; ``None`` means OpenAI itself.
        model: ``LOOP_AGENTS_MODEL``.
        structured_output_method: ``LOOP_AGENTS_STRUCTURED_OUTPUT``; servers such as
            llama.cpp reject ``json_schema`` and need ``function_calling``; ``text``
            asks a judge for a plain ``Score: N`` / ``Feedback: ...`` reply instead.
        max_tokens: ``LOOP_AGENTS_MAX_TOKENS``; sent as ``max_completion_tokens`` and,
            for servers at ``base_url`` that ignore it (llama.cpp), as ``max_tokens`` too.

    """

    api_key: str | None = None
    base_url: str | None = None
    model: str = DEFAULT_MODEL
    structured_output_method: StructuredOutputMethod = "json_schema"
    max_tokens: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ModelSettings:
        """Read the settings from ``environ`` (default: ``os.environ``).

        Raises:
            SettingsError: a value is malformed; the message names the variable.

        Example:
            ```python
            from dotenv import load_dotenv

            load_dotenv()
            settings = ModelSettings.from_env()
            composer = settings.chat_model()
            ```

        """
        env = os.environ if environ is None else environ
        method = env.get("LOOP_AGENTS_STRUCTURED_OUTPUT", "").strip() or "json_schema"
        if method not in get_args(StructuredOutputMethod):
            raise SettingsError(
                f"LOOP_AGENTS_STRUCTURED_OUTPUT={method!r} is not one of "
                f"{', '.join(get_args(StructuredOutputMethod))}"
            )
        raw_cap = env.get("LOOP_AGENTS_MAX_TOKENS", "").strip()
        max_tokens: int | None = None
        if raw_cap:
            try:
                max_tokens = int(raw_cap)
            except ValueError:
                max_tokens = 0
            if max_tokens < 1:
                raise SettingsError(
                    f"LOOP_AGENTS_MAX_TOKENS={raw_cap!r} must be a whole number >= 1 "
                    f"(or unset for no cap)"
                )
        return cls(
            api_key=env.get("OPENAI_API_KEY", "").strip() or None,
            base_url=env.get("OPENAI_BASE_URL", "").strip() or None,
            model=env.get("LOOP_AGENTS_MODEL", "").strip() or DEFAULT_MODEL,
            structured_output_method=cast(StructuredOutputMethod, method),
            max_tokens=max_tokens,
        )

    @property
    def configured(self) -> bool:
        """Whether an endpoint is set: an API key, a base URL, or both."""
        return bool(self.api_key or self.base_url)

    def chat_model(self, **kwargs: Any) -> ChatOpenAI:
        """A ``ChatOpenAI`` for these settings; ``kwargs`` go to ``ChatOpenAI``.

        The model talks through `loop_agents_cli.models.llama_cpp_http.LlamaCppTransport` (unless
        ``kwargs`` bring HTTP clients), which refuses an answer that ends without a finish
        reason (a transport error, retried as one) and smooths llama.cpp's deviations.
        Streamed answers ask for their token usage (``stream_options.include_usage``),
        which ``ChatOpenAI`` leaves off for servers at a base URL; OpenAI-compatible
        servers that do not know the option ignore it. For a server on this machine
        (a loopback address) the wait for a streamed answer's first chunk is not limited
        (langchain-openai gives up after 120 s by default): such a server computes on this
        machine's CPU, and reading a long prompt on a busy machine takes longer than that
        (measured: over 2 minutes for the Song-lyrics reviewer's prompt on 2 loaded cores).

        Raises:
            SettingsError: neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` is set.

        Example:
            ```python
            model = ModelSettings(base_url="http://127.0.0.1:8080/v1").chat_model()
            ```

        """
        if not self.configured:
            raise SettingsError(
                "no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or "
                "OPENAI_BASE_URL (for an OpenAI-compatible server) in the environment "
                "or in a .env file; see .env.example"
            )
        from langchain_openai import ChatOpenAI

        options: dict[str, Any] = {
            "model": self.model,
            "api_key": self.api_key or NO_KEY_PLACEHOLDER,
            "stream_usage": True,
        }
        if self.base_url:
            options["base_url"] = self.base_url
            if _is_loopback(self.base_url) and "stream_chunk_timeout" in ChatOpenAI.model_fields:
                options["stream_chunk_timeout"] = None
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
            if self.base_url:
                options["extra_body"] = {"max_tokens": self.max_tokens}
        if "openai_proxy" not in kwargs:  # the proxy is the clients' (ChatOpenAI: not both)
            from loop_agents_cli.models.llama_cpp_http import http_clients

            sync_client, async_client = http_clients(self.base_url)
            clients = {"http_client": sync_client, "http_async_client": async_client}
            options |= {name: client for name, client in clients.items() if name not in kwargs}
        return ChatOpenAI(**(options | kwargs))


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


@dataclass(frozen=True)
class Environment:
    """The settings of the process environment over those of a ``.env`` file.

    Attributes:
        values: Every variable: the ``.env`` file's, then the environment's over them.
        dotenv: The ``.env`` file read, if any.
        process: The names set (non-empty) in the process environment.

    """

    values: Mapping[str, str]
    dotenv: Path | None = None
    process: frozenset[str] = frozenset()

    @classmethod
    def read(
        cls, env_file: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> Environment:
        """Read ``environ`` (default ``os.environ``) over ``env_file``.

        Without ``env_file``, a ``.env`` file is looked for from the current folder up.

        Raises:
            SettingsError: ``env_file`` is given and is not a file.

        Example:
            ```python
            env = Environment.read()
            print(env.get("OPENAI_BASE_URL"), env.origin("OPENAI_BASE_URL"))
            ```
        """
        real = dict(os.environ if environ is None else environ)
        if env_file is not None and not env_file.is_file():
            raise SettingsError(f"--env-file {str(env_file)!r} is not a file")
        found = str(env_file) if env_file is not None else find_dotenv(usecwd=True)
        path = Path(found) if found else None
        from_file = {k: v for k, v in dotenv_values(path).items() if v is not None} if path else {}
        process = frozenset(k for k, v in real.items() if v.strip())
        return cls({**from_file, **real}, path, process)

    def get(self, name: str) -> str | None:
        """The variable's value without surrounding blanks; ``None`` when unset or empty."""
        value = self.values.get(name, "").strip()
        return value or None

    def origin(self, name: str) -> str:
        """Where ``name`` was set: ``"the environment"`` or ``".env file PATH"``."""
        if name in self.process or self.dotenv is None:
            return "the environment"
        return f".env file {self.dotenv}"
