"""``eval --server``: the task/arm pairs run as runs of the served ``eval_task`` graph on a
real LangGraph server (``langgraph dev`` on loopback), whose model is a scripted
OpenAI-compatible server; the results match what the arms give when run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from loop_agents_evals import EvalSettings, arun_eval
from loop_agents_evals.tasks import parse_task
from tests.conftest import env_without_model_settings
from tests.eval_models import ReactiveOpenAI, after_feedback, is_judge, user_text, verdict
from tests.langgraph_server import STARTUP_SECONDS, free_port, langgraph_cli, served_config, stop

pytestmark = pytest.mark.slow

RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


def respond(body):
    if "Task broken" in user_text(body):
        return httpx.Response(500, json={"error": {"message": "the model crashed"}})
    if is_judge(body):
        answer = body["messages"][-1]["content"]
        good = answer in ("OK", RIGHT)
        return verdict(95, "Good.") if good else verdict(30, "Not yet right.")
    if "adds two integers" in user_text(body):
        return RIGHT if after_feedback(body) else WRONG
    return "OK" if after_feedback(body) else "ok"


TASKS = [
    parse_task(
        {
            "id": f"shout-{i}",
            "kind": "instructions",
            "prompt": f"Task {i}: reply OK in capitals.",
            "checks": [{"check": "case", "case": "upper"}],
        }
    )
    for i in range(3)
] + [
    parse_task(
        {
            "id": "add",
            "kind": "code",
            "prompt": "Write a function that adds two integers.",
            "entry_point": "add",
            "tests": "assert add(1, 2) == 3",
            "hidden_tests": "assert add(-5, 5) == 0\nassert add(10, 20) == 30",
        }
    )
]


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[ReactiveOpenAI, str]]:
    scripted = ReactiveOpenAI(respond)
    with scripted.serve() as base_url:
        yield scripted, base_url


@pytest.fixture(scope="module")
def server(model, tmp_path_factory) -> Iterator[str]:
    _, model_url = model
    folder = tmp_path_factory.mktemp("langgraph-eval-server")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "LOOP_AGENTS_"))
    }
    env |= {
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "sk-test",
        "LOOP_AGENTS_STRUCTURED_OUTPUT": "function_calling",
        "LOOP_AGENTS_MODEL": "local-model",  # samples at any temperature (not gpt-5's rule)
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
    }
    command = [
        langgraph_cli(),
        "dev",
        "--config",
        str(served_config(folder)),
        *("--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)),
    ]
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"langgraph dev exited with {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev not ready after {STARTUP_SECONDS}s:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        stop(process)


async def test_the_arms_run_on_the_server_as_they_do_here(server, model):
    scripted, _ = model
    asked = len(scripted.requests)
    report = await arun_eval(
        TASKS,
        iterations=3,
        concurrency=4,
        settings=EvalSettings(
            server=server, arm_temperatures={"resample": 0.5}, judge_temperature=0.25
        ),
    )
    assert report.complete, report.errors
    # the arms' temperatures and the judge's reached the server's model
    sent = scripted.requests[asked:]
    assert {b.get("temperature") for b in sent if is_judge(b)} == {0.25}
    assert sum(b.get("temperature") == 0.5 for b in sent) == 4 * 3  # resample's, only
    assert {b.get("temperature") for b in sent if not is_judge(b)} == {1.0, 0.5}
    # and the per-attempt verdicts came back
    assert report.by_attempt["loop"] == [0.0, 1.0, 1.0]
    assert report.by_attempt["single"] == [0.0]
    assert {a: (s.passed, s.tasks) for a, s in report.arms.items()} == {
        "single": (0, 4),
        "loop": (4, 4),
        "resample": (0, 4),
        "judge-loop": (4, 4),
    }
    assert [report.arms[a].model_calls for a in report.arms] == [1, 2, 3, 4]
    assert report.arms["loop"].input_tokens == 22  # the scripted usage, counted on the server
    # every model call was the server's (the code answer's tests ran there too)
    assert len(scripted.requests) - asked == 4 * (1 + 2 + 3 + 4)
    assert report.settings["model"] == f"LangGraph server {server}"
    add = {r.arm: r for r in report.results if r.task_id == "add"}
    assert add["loop"].answer == RIGHT
    assert add["loop"].iterations == 2
    # every attempt came back from the server too
    assert [(e["answer"], e["ok"], e["passed"]) for e in add["loop"].transcript] == [
        (WRONG, False, False),
        (RIGHT, True, True),
    ]


async def test_a_run_that_fails_on_the_server_is_retried_and_never_a_pass(server):
    broken = parse_task(
        {
            "id": "broken",
            "kind": "instructions",
            "prompt": "Task broken: reply OK.",
            "checks": [{"check": "case", "case": "upper"}],
        }
    )
    events = []
    report = await arun_eval(
        [TASKS[0], broken],
        arms=["single"],
        retries=1,
        progress=events.append,
        settings=EvalSettings(server=server, retry_delay=0),
    )
    (error,) = report.errors
    assert (error.task_id, error.attempts) == ("broken", 2)
    assert error.error.startswith("ServerRunError: OpenAIAPIError")  # the server hides the rest
    assert [r.task_id for r in report.results] == ["shout-0"]
    assert report.arms["single"].errors == 1
    assert report.arms["single"].tasks == 1
    assert [e.retrying.task_id for e in events if e.retrying] == ["broken"]


def test_the_command_runs_an_eval_on_the_server(server, tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_json()) + "\n" for t in TASKS), encoding="utf-8")
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loop_agents_cli",
            "eval",
            str(path),
            *("--server", server, "--arms", "single,loop", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        env=env_without_model_settings(),  # no model here: the server has its own
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["arms"]["loop"]["passed"] == 4
    assert data["arms"]["single"]["passed"] == 0
