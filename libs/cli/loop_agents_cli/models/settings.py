"""Model settings read from the environment and ``.env``, shared by the command and examples.

``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` (unset: OpenAI), ``LOOP_AGENTS_MODEL``,
``LOOP_AGENTS_STRUCTURED_OUTPUT``, ``LOOP_AGENTS_MAX_TOKENS``, ``LOOP_AGENTS_THREADS`` and
``LOOP_AGENTS_SEED`` (docs/cli.md). `Environment` reads the process environment over a
``.env`` file and says where each was set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

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
    """A random seed for the bundled server, from 0 to `MAX_SEED` (``origin``: for the error).

    Example:
        ```python
        assert parse_seed(" 42 ") == 42
        ```
    """
    raw = str(text).strip()
    return check_seed(int(raw) if raw.lstrip("+-").isdigit() else text, origin)


def check_seed(seed: object, where: str) -> int:
    """``seed`` if it is an int from 0 to `MAX_SEED`; else a `SettingsError` naming ``where``.

    Example:
        ```python
        check_seed(7, "--seed")  # 7
        ```
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise SettingsError(f"{where} must be a whole number from 0 to {MAX_SEED}; got {seed!r}")
    return seed


def parse_threads(text: str | int, origin: str = THREADS_VARIABLE) -> int:
    """A number of CPU threads for the bundled server: a whole number >= 1.

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
        structured_output_method: ``LOOP_AGENTS_STRUCTURED_OUTPUT`` (``text``: a plain
            ``Score: N`` reply).
        max_tokens: ``LOOP_AGENTS_MAX_TOKENS``; also sent as ``max_tokens`` to a server at
            ``base_url`` (llama.cpp ignores ``max_completion_tokens``).
    """

    api_key: str | None = None
    base_url: str | None = None
    model: str = DEFAULT_MODEL
    structured_output_method: StructuredOutputMethod = "json_schema"
    max_tokens: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ModelSettings:
        """Read the settings from ``environ`` (default ``os.environ``); `SettingsError` if bad.

        Example:
            ```python
            composer = ModelSettings.from_env().chat_model()
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
        """A ``ChatOpenAI`` for these settings (through `LlamaCppTransport`); ``kwargs`` go to it.

        Streamed answers ask for their usage; on a loopback server the wait between chunks is not
        limited (reading a long prompt on a busy machine took over 2 minutes).

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

        from loop_agents_cli.models.llama_cpp_http import http_clients, is_loopback

        options: dict[str, Any] = {
            "model": self.model,
            "api_key": self.api_key or NO_KEY_PLACEHOLDER,
            "stream_usage": True,
        }
        if self.base_url:
            options["base_url"] = self.base_url
            if is_loopback(self.base_url) and "stream_chunk_timeout" in ChatOpenAI.model_fields:
                options["stream_chunk_timeout"] = None
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
            if self.base_url:
                options["extra_body"] = {"max_tokens": self.max_tokens}
        if "openai_proxy" not in kwargs:  # the proxy is the clients' (ChatOpenAI: not both)
            sync_client, async_client = http_clients(self.base_url)
            clients = {"http_client": sync_client, "http_async_client": async_client}
            options |= {name: client for name, client in clients.items() if name not in kwargs}
        return ChatOpenAI(**(options | kwargs))


@dataclass(frozen=True)
class Environment:
    """The process environment's settings (``process``) over a ``.env`` file's (``dotenv``)."""

    values: Mapping[str, str]
    dotenv: Path | None = None
    process: frozenset[str] = frozenset()

    @classmethod
    def read(
        cls, env_file: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> Environment:
        """Read ``environ`` (default ``os.environ``) over ``env_file``.

        Without ``env_file``, a ``.env`` is looked for from the current folder up;
        `SettingsError` if ``env_file`` is not a file.

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
