"""A LangGraph dev server for the tests: a free port, the repository's graphs, stopping it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

STARTUP_SECONDS = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def served_config(folder: Path) -> Path:
    """The repository's langgraph.json, with graph paths made absolute for ``folder``."""
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
    assert set(config["graphs"]) == {"song_lyrics", "configurable_loop", "eval_task"}
    for graph_id, spec in config["graphs"].items():
        path, _, variable = spec.partition(":")
        config["graphs"][graph_id] = f"{(ROOT / path).resolve()}:{variable}"
    config["dependencies"] = [str((ROOT / path).resolve()) for path in config["dependencies"]]
    config.pop("env", None)  # the test sets the environment; a developer's .env stays out
    target = folder / "langgraph.json"
    target.write_text(json.dumps(config), encoding="utf-8")
    return target


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def langgraph_cli() -> str:
    beside = Path(sys.executable).parent / "langgraph"
    found = str(beside) if beside.exists() else shutil.which("langgraph")
    if found is None:
        pytest.fail("the langgraph CLI is missing: pip install -e '.[dev]' (langgraph-cli[inmem])")
    return found
