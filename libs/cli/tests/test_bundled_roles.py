"""A run on the bundled server starts only the processes it uses: no judge's without a rubric.

On the fake llama.cpp server (`tests.fake_llama`): ``run --check`` alone has no judge, so
its model line names none and only the agent's process starts; with ``--rubric`` both do.
"""

from __future__ import annotations

import json

import pytest

from loop_agents_cli import main
from loop_agents_cli.models import local_model
from loop_agents_cli.models.local_server import LocalModelServer
from tests.cli_helpers import clear_model_settings


@pytest.mark.parametrize(
    ("judging", "roles"),
    [(["--check", "true"], ["agent"]), (["--rubric", "Any answer."], ["agent", "judge"])],
    ids=["check only", "rubric"],
)
def test_only_the_processes_a_run_uses_are_started(
    judging, roles, fake_llama, tmp_path, monkeypatch, capsys
):
    clear_model_settings(monkeypatch, tmp_path)
    # the fake server stands in for the `local` extra, which the offline tests run without
    monkeypatch.setattr(local_model, "missing_parts", lambda: [])
    record = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_LLAMA_RECORD", str(record))
    started: list[str | None] = []
    start = LocalModelServer.start

    def counted(server: LocalModelServer) -> LocalModelServer:
        started.append(server.role)
        return start(server)

    monkeypatch.setattr(LocalModelServer, "start", counted)
    arguments = ["run", "Write x.", *judging, "--gguf", str(fake_llama), "--json", "--no-save"]
    assert main(arguments) == 0
    out, err = capsys.readouterr()
    assert started == roles
    (line,) = [line for line in err.splitlines() if "server: the bundled llama.cpp" in line]
    assert ("judge:" in line) is ("judge" in roles), line
    assert json.loads(out)["stop_reason"] == "accepted" or "judge" in roles
    ports = {json.loads(entry)[0] for entry in record.read_text().splitlines()}
    assert len(ports) == len(roles)  # the agent's requests, and the judge's when it has one
