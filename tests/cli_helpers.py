"""Running the ``loop-agents`` command in a subprocess, as a user would, for the CLI tests."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import env_without_model_settings

COMMAND = [sys.executable, "-m", "loop_agents_cli"]
CLOSED_PORT_URL = "http://127.0.0.1:9"
"""Nothing listens on the discard port: "no Ollama here"."""


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment without the developer's model settings, saving runs in ``home``.

    Ollama is looked for on a closed port, so a real Ollama on this machine is never used.
    """
    settings = {"LOOP_AGENTS_HOME": str(home), "LOOP_AGENTS_OLLAMA_URL": CLOSED_PORT_URL}
    return env_without_model_settings(**(settings | extra))


def clear_model_settings(monkeypatch: Any, tmp_path: Path, *, ollama: str = "off") -> None:
    """In this process: no developer's model settings, runs saved in ``tmp_path / "home"``,
    Ollama looked for at ``ollama`` (``off``: not at all), the current folder ``tmp_path``."""
    for key in list(os.environ):
        if key.startswith(("OPENAI_", "LOOP_AGENTS_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("LOOP_AGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOOP_AGENTS_OLLAMA_URL", ollama)
    monkeypatch.chdir(tmp_path)


def loop_agents(
    *args: str,
    env: dict[str, str],
    cwd: Path,
    stdin: str | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run ``loop-agents ARGS`` to its end."""
    return subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Running:
    """``loop-agents ARGS`` started in the background; its stdout is read line by line."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [*COMMAND, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # SIGINT must not be ignored in the child (as it is for `cmd &` in a script)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: list[str] = []

    def wait_for_line(self, text: str, timeout: float = 120) -> str:
        """Read stdout until a line containing ``text``; fail after ``timeout`` seconds."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {text!r} in:\n{''.join(self.lines)}")
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                continue
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(
                    f"the command ended ({self.process.wait()}) before a line with {text!r}:"
                    f"\n{''.join(self.lines)}"
                )
            self.lines.append(line)
            if text in line:
                return line

    def still_waiting(self, seconds: float = 0.5) -> None:
        """Fail if the command ends within ``seconds``: its model call should be in flight."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return
        err = self.process.stderr.read() if self.process.stderr is not None else ""
        raise AssertionError(
            f"the command ended ({self.process.returncode}) while its model call should "
            f"have been in flight:\n{err}"
        )

    def interrupt(
        self, number: int = signal.SIGINT, timeout: float = 30
    ) -> tuple[int, float, str, str]:
        """Send SIGINT (or ``number``); return the exit status, the seconds it took, the
        rest of stdout and all of stderr."""
        started = time.monotonic()
        self.process.send_signal(number)
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, time.monotonic() - started, out, err

    def close(self) -> None:
        """Kill the command if it still runs."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
