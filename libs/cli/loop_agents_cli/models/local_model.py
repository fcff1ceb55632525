"""The bundled offline model: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

`LocalModelPair` runs one server process per role; `server_failure` says whether a request
failed because its server died; ``python -m loop_agents_cli.models.local_model`` serves
until Ctrl-C. The names of `local_server` and `local_setup` are importable from here too.
See docs/local-model.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Self

import httpx
import openai

from loop_agents_cli.models.llama_build import CMAKE_ARGS
from loop_agents_cli.models.local_server import (
    DEFAULT_MAX_TOKENS,
    ROLES,
    CompletionTimings,
    LocalModelServer,
    Role,
    _Started,
)
from loop_agents_cli.models.local_setup import (
    EXTRA,
    FIRST_BUILD,
    MODEL_ALIAS,
    MODEL_DISTRIBUTION,
    LocalModelError,
    LocalModelNotInstalledError,
    LocalModelServerDied,
    LocalModelStartError,
    _not_installed_error,
    banner,
    install_command,
    is_installed,
    missing_parts,
    model_path,
    no_endpoint_message,
)
from loop_agents_cli.models.server_process import default_threads, free_port
from loop_agents_cli.models.settings import MAX_SEED, THREADS_VARIABLE, check_seed, parse_threads

__all__ = [
    "CMAKE_ARGS",
    "DEFAULT_MAX_TOKENS",
    "EXTRA",
    "FIRST_BUILD",
    "MAX_SEED",
    "MODEL_ALIAS",
    "MODEL_DISTRIBUTION",
    "ROLES",
    "CompletionTimings",
    "LocalModelError",
    "LocalModelNotInstalledError",
    "LocalModelPair",
    "LocalModelServer",
    "LocalModelServerDied",
    "LocalModelStartError",
    "Role",
    "banner",
    "check_seed",
    "default_threads",
    "free_port",
    "install_command",
    "is_installed",
    "main",
    "missing_parts",
    "model_path",
    "no_endpoint_message",
    "server_failure",
]


class LocalModelPair(_Started):
    """The bundled server twice on one GGUF file: one process for the agent, one for the judge.

    Each keeps its own KV cache; the memory-mapped weights are shared. The judge's seed is the
    agent's ``seed`` + 1; ``options`` go to both `LocalModelServer`s.

    Example:
        ```python
        with LocalModelPair(n_threads=2) as pair:
            agent, judge = pair.agent.chat_model(), pair.judge.chat_model(temperature=0)
        ```
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        n_threads: int | None = None,
        seed: int | None = None,
        **options: Any,
    ) -> None:
        if "port" in options:
            raise ValueError("a LocalModelPair picks two free ports; port cannot be given")
        judge_seed = None if seed is None else (check_seed(seed, "seed") + 1) % (MAX_SEED + 1)
        if "role" in options:
            raise ValueError("a LocalModelPair names its servers' roles; role cannot be given")
        self.agent = LocalModelServer(
            model, n_threads=n_threads, seed=seed, role="agent", **options
        )
        self.judge = LocalModelServer(
            model, n_threads=n_threads, seed=judge_seed, role="judge", **options
        )

    def server(self, role: Role) -> LocalModelServer:
        """The server of ``role`` (``"agent"`` or ``"judge"``)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
        return self.agent if role == "agent" else self.judge

    def start(self, *, judge: bool = True) -> Self:
        """Start the agent's server, then (unless ``judge`` is false) the judge's, or neither.

        Raises:
            LocalModelNotInstalledError: the ``local`` extra is missing.
            LocalModelStartError: a server exited early or did not answer in time.

        Example:
            ```python
            pair = LocalModelPair().start(judge=False)  # a loop without a judge
            ```
        """
        try:
            self.agent.start()
            if judge:
                self.judge.start()
        except BaseException as exc:  # after Ctrl-C nothing of theirs is needed: no grace
            self.stop(now=isinstance(exc, KeyboardInterrupt))
            raise
        return self

    def failure(self) -> str | None:
        """Why a started server of the pair stopped by itself (the agent's first), else ``None``."""
        failures = [f for f in (self.agent.failure(), self.judge.failure()) if f is not None]
        return "\n".join(failures) if failures else None

    def stop(self, *, now: bool = False) -> None:
        """Stop both servers (``now``: without the graceful wait); idempotent."""
        self.judge.stop(now=now)
        self.agent.stop(now=now)


def server_failure(
    servers: LocalModelServer | LocalModelPair | Any,
    error: BaseException | None = None,
    *,
    wait: float = 1.0,
) -> str | None:
    """Whether a bundled server died: the message naming it, its exit and its log; else ``None``.

    ``servers`` is a server, a pair or an endpoint (its ``servers``). ``error``, a request's
    exception, may come a moment before the server's exit shows: after a lost connection
    the servers are watched for up to ``wait`` seconds.

    Example:
        ```python
        if (died := server_failure(endpoint, exc)) is not None:
            sys.exit(f"eval: error: {died}")
        ```
    """
    if isinstance(servers, LocalModelServer):
        processes = [servers]
    elif isinstance(servers, LocalModelPair):
        processes = [servers.agent, servers.judge]
    else:  # an endpoint: the bundled server's pair once open
        pair = getattr(servers, "servers", None)
        processes = [pair.agent, pair.judge] if isinstance(pair, LocalModelPair) else []
    deadline = time.monotonic() + (wait if error is not None and _lost_connection(error) else 0)
    while processes:
        failures = [found for server in processes if (found := server.failure()) is not None]
        if failures or time.monotonic() >= deadline:
            return "\n".join(failures) or None
        time.sleep(0.02)
    return None


def _lost_connection(error: BaseException) -> bool:
    """Whether ``error``, or an error it came from, is a connection lost or refused."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        lost = (httpx.TransportError, ConnectionError, openai.APIConnectionError)
        if isinstance(found, lost):
            return True
        found = found.__cause__ or found.__context__
    return False


# -- command line -----------------------------------------------------------------------------


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the local model until Ctrl-C: ``python -m loop_agents_cli.models.local_model``.

    Prints the base URL on stdout's first line, then (stderr) the ``.env`` settings that
    point the examples at it. SIGTERM stops it like Ctrl-C. Returns 0 after Ctrl-C, 1 when
    the server failed, 2 when the extra is not installed.

    Example:
        ```python
        # $ python -m loop_agents_cli.models.local_model --port 8080
        # http://127.0.0.1:8080/v1
        ```
    """
    parser = argparse.ArgumentParser(
        prog="python -m loop_agents_cli.models.local_model",
        description="Serve the bundled offline model (SmolLM2-135M-Instruct, llama.cpp) "
        "on an OpenAI-compatible loopback port until Ctrl-C.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address (default: loopback)")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens")
    parser.add_argument("--model", default=None, help="a GGUF file (default: the bundled one)")
    parser.add_argument(
        "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="cap shown in the hints"
    )
    parser.add_argument(
        "--threads",
        metavar="N",
        default=None,
        help=f"CPU threads ({THREADS_VARIABLE}; default: half the cores, at least 1)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the server's log")
    args = parser.parse_args(argv)
    threads_text = args.threads if args.threads is not None else os.environ.get(THREADS_VARIABLE)
    try:
        origin = "--threads" if args.threads is not None else THREADS_VARIABLE
        threads = parse_threads(threads_text, origin) if threads_text else None
    except ValueError as exc:
        parser.error(str(exc))
    if args.model is None and missing_parts():
        print(f"local_model: {_not_installed_error()}", file=sys.stderr)
        return 2
    previous = signal.getsignal(signal.SIGTERM)
    previous_interrupt = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:  # an ignored SIGTERM (nohup) stays ignored
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    server = LocalModelServer(
        args.model,
        host=args.host,
        port=args.port,
        n_ctx=args.n_ctx,
        n_threads=threads,
        verbose=args.verbose,
    )
    try:
        server.start()
        print(server.base_url, flush=True)
        print(
            f"Serving {MODEL_ALIAS} until Ctrl-C. To use it from the examples, set:\n"
            f"  OPENAI_BASE_URL={server.base_url}\n"
            f"  LOOP_AGENTS_MODEL={MODEL_ALIAS}\n"
            f"  LOOP_AGENTS_STRUCTURED_OUTPUT=function_calling\n"
            f"  LOOP_AGENTS_MAX_TOKENS={args.max_tokens}",
            file=sys.stderr,
            flush=True,
        )
        # From here on, a signal only asks to stop: raised in the middle of a poll of the
        # server's process, a KeyboardInterrupt could leave that process's lock taken, and
        # stopping it would then wait for ever.
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored (nohup, `cmd &`)
                signal.signal(signum, lambda signum, frame: stop.set())
        while server.running:
            if stop.wait(0.5):
                raise KeyboardInterrupt
        print(f"local_model: {server.failure()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("local_model: stopping", file=sys.stderr)
        return 0
    except LocalModelError as exc:
        print(f"local_model: {exc}", file=sys.stderr)
        return 1
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_interrupt)


if __name__ == "__main__":
    sys.exit(main())
