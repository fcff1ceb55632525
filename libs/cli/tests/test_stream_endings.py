"""Every way an HTTP stream can end ends the answer; a stream that stops sending times out.

A real loopback server written here (raw sockets) sends a streamed chat completion ended
by a chunked encoding's last chunk, by its Content-Length, or by closing the connection
(a plain HTTP/1.1 server with ``Connection: close``), through `LlamaCppTransport`, with
the sync and the async client. The openai client drains a stream after ``[DONE]``: a
second read of a stream that was read to its end must end at once (it once spun on the
closed connection for ever).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from loop_agents_cli.models.llama_cpp_http import http_clients
from loop_agents_cli.models.settings import ModelSettings

HANG = 60
"""Seconds after which an answer that has not come is a hang."""

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
    {"choices": [{"index": 0, "delta": {"content": "lo."}, "finish_reason": "stop"}]},
]


def _sse() -> list[bytes]:
    chunks = []
    for event in EVENTS:
        event = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"} | event
        chunks.append(b"data: " + json.dumps(event).encode() + b"\n\n")
    return [*chunks, b"data: [DONE]\n\n"]


def _read_request(conn: socket.socket) -> tuple[str, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next(
        (int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)
    return lines[0].split()[1], body


def _serve(conn: socket.socket, ending: str, stop: threading.Event) -> None:
    with conn:
        while (request := _read_request(conn)) is not None:
            path, body = request
            if path.endswith("/tokenize/count"):
                if ending == "stalled count":
                    stop.wait(HANG)
                    return
                count = json.dumps({"count": len(json.loads(body)["input"].split())}).encode()
                head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(count)}\r\n\r\n"
                conn.sendall(head.encode() + count)
                continue
            events = _sse()
            head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            if ending in ("chunked", "stalled", "stalled count"):
                conn.sendall(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
                for event in events:
                    conn.sendall(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    if ending == "stalled":  # one event, then nothing more
                        stop.wait(HANG)
                        return
                conn.sendall(b"0\r\n\r\n")
            elif ending == "content-length":
                whole = b"".join(events)
                conn.sendall(f"{head}content-length: {len(whole)}\r\n\r\n".encode() + whole)
            else:  # closed: the connection's end is the body's end
                conn.sendall(f"{head}connection: close\r\n\r\n".encode())
                for event in events:
                    conn.sendall(event)
                return


@contextmanager
def server(ending: str) -> Iterator[str]:
    """A loopback server whose streams end by ``ending``; yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve, args=(conn, ending, stop), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        listener.close()


def _bounded(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread; a test failure, not a hang, when it does not return."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"no answer after {HANG} s: the stream's end was not seen"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _model(url: str, *, llama_cpp_server: bool = False, **options: Any) -> ChatOpenAI:
    sync_client, async_client = http_clients(url, llama_cpp_server=llama_cpp_server)
    clients = {"http_client": sync_client, "http_async_client": async_client}
    return ModelSettings(base_url=url, model="m").chat_model(**clients, **options)


def _answer(model: ChatOpenAI, mode: str) -> str:
    if mode == "sync":
        return model.invoke("Say hello.").text
    return asyncio.run(model.ainvoke("Say hello.")).text


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("llama_cpp_server", [False, True], ids=["any server", "llama.cpp"])
@pytest.mark.parametrize("ending", ["chunked", "content-length", "closed"])
def test_every_ending_of_a_stream_ends_the_answer(ending, llama_cpp_server, mode):
    with server(ending) as url:
        model = _model(url, llama_cpp_server=llama_cpp_server, streaming=True)
        assert _bounded(lambda: _answer(model, mode)) == "Hello."


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_that_stops_sending_is_a_read_timeout_within_the_limit(mode):
    with server("stalled") as url:
        model = _model(url, streaming=True, timeout=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises((openai.APITimeoutError, openai.APIConnectionError)) as caught:
            _bounded(lambda: _answer(model, mode))
        waited = time.monotonic() - started
    chain, error = [], caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__
    assert any(isinstance(e, httpx.ReadTimeout) for e in chain), chain
    assert waited < HANG / 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_token_count_that_never_comes_keeps_to_the_streams_limit(mode):
    # the bundled server's usage is counted after the stream with the same time limit: a
    # count that never comes leaves the answer without usage, and ends within the limit
    with server("stalled count") as url:
        model = _model(url, llama_cpp_server=True, streaming=True, timeout=1.0, max_retries=0)
        assert _bounded(lambda: _answer(model, mode)) == "Hello."
