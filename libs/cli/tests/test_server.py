"""The served graphs on a real LangGraph server (``langgraph dev``), driven by the SDK client.

One in-memory server is started for the module in a temporary folder, on a free loopback
port, from the repository's ``langgraph.json``; its model is a `ScriptedOpenAI` served
over loopback HTTP (``OPENAI_BASE_URL``). The server's process group is stopped at the
end, whatever the tests did.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from loop_agents_cli.demos.prompts import prompt
from tests.fakes import CI_1, CI_2, review
from tests.langgraph_server import STARTUP_SECONDS, free_port, langgraph_cli, served_config, stop
from tests.scripted_openai import Reply, ScriptedOpenAI, Structured

pytestmark = pytest.mark.slow

DRAFT_1, DRAFT_2 = CI_1, CI_2  # drafts with the form of 相见欢: the form check passes them on


class Script:
    """Replies the tests queue up; the scripted model answers with them in order."""

    def __init__(self) -> None:
        self.queue: deque[Reply] = deque()

    def __iter__(self) -> Iterator[Reply]:
        while True:
            yield self.queue.popleft() if self.queue else "(the test queued no reply)"

    def add(self, *replies: Reply) -> None:
        self.queue.clear()  # what an earlier, failed test left unused
        self.queue.extend(replies)


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[ScriptedOpenAI, Script, str]]:
    script = Script()
    scripted = ScriptedOpenAI(script)
    with scripted.serve() as base_url:
        yield scripted, script, base_url


@pytest.fixture(scope="module")
def server(model, tmp_path_factory) -> Iterator[str]:
    _, _, model_url = model
    folder = tmp_path_factory.mktemp("langgraph-server")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "LOOP_AGENTS_"))
    }
    env |= {
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "sk-test",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
    }
    command = [
        langgraph_cli(),
        "dev",
        "--config",
        str(served_config(folder)),
        "--no-browser",
        "--no-reload",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
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


@pytest.fixture
def client(server):
    return get_client(url=server)


def contents(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in messages]


async def test_song_lyrics_runs_wait(client, model):
    scripted, script, _ = model
    script.add(
        DRAFT_1,
        Structured({"score": 70, "feedback": "格律功夫明显欠缺。"}),
        DRAFT_2,
        Structured({"score": 81, "feedback": "情绪线索尚明。"}),
    )
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"],
        "song_lyrics",
        input={"messages": [{"role": "user", "content": prompt}]},
    )
    assert contents(result["messages"]) == [
        ("human", prompt),
        ("ai", DRAFT_1),
        ("human", review("格律功夫明显欠缺。\n\n综合得分：70", 1)),
        ("ai", DRAFT_2),
    ]
    assert (result["iteration"], result["stop_reason"]) == (2, "accepted")
    assert [r["score"] for r in result["records"]] == [70, 81]
    assert scripted.requests[-1]["messages"][-1] == {"role": "assistant", "content": DRAFT_2}


async def test_song_lyrics_stream_with_subgraphs(client, model):
    _, script, _ = model
    script.add(
        DRAFT_1,
        Structured({"score": 60, "feedback": "再改。"}),
        DRAFT_2,
        Structured({"score": 90, "feedback": "好。"}),
    )
    tokens: dict[str, str] = {}
    loop_events: list[dict[str, Any]] = []
    updates: list[str] = []
    async for part in client.runs.stream(
        None,
        "song_lyrics",
        input={"messages": [{"role": "user", "content": prompt}]},
        stream_mode=["messages-tuple", "custom", "updates"],
        stream_subgraphs=True,
    ):
        kind, _, namespace = part.event.partition("|")
        if kind == "messages":
            chunk, metadata = part.data
            if metadata.get("loop_role") == "agent" and chunk["type"].startswith("AIMessage"):
                tokens[namespace] = tokens.get(namespace, "") + chunk["content"]
        elif kind == "custom":
            assert namespace == ""  # the loop's own events, at the top of the served graph
            loop_events.append(part.data)
        elif kind == "updates" and not namespace:
            updates.extend(part.data)
    # the composer (a create_agent graph) streamed its tokens from inside its subgraph
    assert all(ns.startswith("invoke_agent:") for ns in tokens)
    assert "".join(tokens.values()) == DRAFT_1 + DRAFT_2
    assert [e["type"] for e in loop_events] == [
        "iteration_started",
        "agent_finished",
        "evaluation_finished",
        "iteration_started",
        "agent_finished",
        "evaluation_finished",
        "loop_finished",
    ]
    assert loop_events[-1]["stop_reason"] == "accepted"
    assert loop_events[2]["score"] == 60
    # each iteration: the composer, then the evaluate node, whose two checks (the form, then
    # the reviewer, named evaluate as in the article) run as tasks of their own
    assert updates == ["invoke_agent", "xiangjianhuan_form", "evaluate", "evaluate"] * 2


async def test_configurable_loop_two_runs_on_one_thread(client, model):
    scripted, script, _ = model
    context = {"task": "You name products.", "rubric": "Score the name 0-100.", "threshold": 80}
    thread = (await client.threads.create())["thread_id"]
    script.add("Pipely", Structured({"feedback": "Good.", "score": 90}))
    first = await client.runs.wait(
        thread,
        "configurable_loop",
        input={"messages": [{"role": "user", "content": "Name our ETL tool."}]},
        context=context,
    )
    assert (first["iteration"], first["stop_reason"]) == (1, "accepted")

    script.add(
        "Streamer",
        Structured({"feedback": "Too generic.", "score": 50}),
        "Riverbed",
        Structured({"feedback": "Good.", "score": 85}),
    )
    asked = len(scripted.requests)
    second = await client.runs.wait(
        thread,
        "configurable_loop",
        input={"messages": [{"role": "user", "content": "Now one for the scheduler."}]},
        context=context,
    )
    # a new loop: its own counters and feedback; the conversation is kept
    assert (second["iteration"], second["stop_reason"]) == (2, "accepted")
    assert second["feedback"] == ["Too generic.\n\nScore: 50", "Good.\n\nScore: 85"]
    assert contents(second["messages"]) == [
        ("human", "Name our ETL tool."),
        ("ai", "Pipely"),
        ("human", "Now one for the scheduler."),
        ("ai", "Streamer"),
        ("human", review("Too generic.\n\nScore: 50", 1)),
        ("ai", "Riverbed"),
    ]
    assert [m["content"] for m in scripted.requests[asked]["messages"]] == [
        "You name products.",
        "Name our ETL tool.",
        "Pipely",
        "Now one for the scheduler.",
    ]


async def test_human_review_interrupt_resumed_with_a_command(client, model):
    _, script, _ = model
    assistant = await client.assistants.create(
        "configurable_loop",
        context={"task": "You name products.", "threshold": 80, "human_review": True},
        name="reviewed names",
    )
    thread = (await client.threads.create())["thread_id"]
    script.add(
        "Pipely",
        Structured({"feedback": "Good.", "score": 90}),
        "Riverbed",
        Structured({"feedback": "Better.", "score": 92}),
    )
    paused = await client.runs.wait(
        thread,
        assistant["assistant_id"],
        input={"messages": [{"role": "user", "content": "Name our ETL tool."}]},
    )
    (interrupt,) = paused["__interrupt__"]
    assert interrupt["value"]["kind"] == "loop_agents.human_review"
    assert (interrupt["value"]["answer"], interrupt["value"]["judge"]["score"]) == ("Pipely", 90)
    state = await client.threads.get_state(thread)
    assert state["next"] == ["evaluate"]

    paused = await client.runs.wait(
        thread, assistant["assistant_id"], command={"resume": "Avoid plumbing words."}
    )
    assert paused["__interrupt__"][0]["value"]["answer"] == "Riverbed"
    assert paused["__interrupt__"][0]["value"]["feedback"] == ["Avoid plumbing words."]

    done = await client.runs.wait(thread, assistant["assistant_id"], command={"resume": True})
    assert "__interrupt__" not in done
    assert (done["stop_reason"], done["iteration"]) == ("accepted", 2)
    assert contents(done["messages"])[-2:] == [
        ("human", review("Avoid plumbing words.", 1)),
        ("ai", "Riverbed"),
    ]
