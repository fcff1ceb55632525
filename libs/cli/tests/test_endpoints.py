"""Endpoint resolution (one order for every command), saved endpoints, the runs store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loop_agents_cli.errors import UsageError
from loop_agents_cli.models import local_model, ollama
from loop_agents_cli.models.endpoints import (
    Endpoint,
    EndpointSpec,
    NoEndpointError,
    endpoint_from_spec,
    proxy_for,
    resolve_endpoint,
)
from loop_agents_cli.models.llama_cpp_http import LlamaCppTransport
from loop_agents_cli.models.settings import Environment, SettingsError
from loop_agents_cli.spec import RunSpec
from loop_agents_cli.store import RunStore, store_home
from tests.scripted_openai import ScriptedOpenAI

NO_OLLAMA = {"LOOP_AGENTS_OLLAMA_URL": "off"}


def env(values: dict[str, str], dotenv: dict[str, str] | None = None, tmp_path: Path | None = None):
    """An `Environment` of ``values`` (the process) over ``dotenv`` (a .env file)."""
    if dotenv is None:
        return Environment({**NO_OLLAMA, **values}, None, frozenset(values) | set(NO_OLLAMA))
    assert tmp_path is not None
    path = tmp_path / ".env"
    path.write_text("".join(f"{k}={v}\n" for k, v in dotenv.items()))
    return Environment.read(path, {**NO_OLLAMA, **values})


@pytest.fixture
def no_local(monkeypatch):
    monkeypatch.setattr(local_model, "is_installed", lambda: False)


def test_options_come_first(no_local):
    found = resolve_endpoint(
        base_url="http://127.0.0.1:8080/v1/",
        model="qwen",
        environment=env({"OPENAI_BASE_URL": "http://other:1/v1", "OPENAI_API_KEY": "sk-x"}),
    )
    assert found.spec == EndpointSpec("server", "qwen", "http://127.0.0.1:8080/v1")
    assert found.api_key == "sk-x"  # the key comes from the environment only
    assert found.describe() == "model: qwen · server: http://127.0.0.1:8080/v1 · from --base-url"


def test_the_environment_beats_the_dotenv_file_and_says_which(tmp_path, no_local):
    found = resolve_endpoint(
        environment=env(
            {"LOOP_AGENTS_MODEL": "from-env"},
            {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "LOOP_AGENTS_MODEL": "from-file"},
            tmp_path,
        )
    )
    assert found.spec.model == "from-env"
    assert found.source == f"from OPENAI_BASE_URL in .env file {tmp_path / '.env'}"


def test_an_api_key_alone_means_openai(no_local):
    found = resolve_endpoint(environment=env({"OPENAI_API_KEY": "sk-x"}))
    assert found.spec.kind == "openai"
    assert found.spec.structured_output_method == "json_schema"
    assert found.describe().startswith("model: gpt-5.4-mini · server: OpenAI · from OPENAI_API_KEY")


def test_structured_output_and_cap_settings_apply_to_every_endpoint(no_local):
    found = resolve_endpoint(
        environment=env(
            {
                "OPENAI_API_KEY": "sk-x",
                "LOOP_AGENTS_STRUCTURED_OUTPUT": "function_calling",
                "LOOP_AGENTS_MAX_TOKENS": "99",
            }
        )
    )
    assert (found.spec.structured_output_method, found.spec.max_tokens) == ("function_calling", 99)
    found = resolve_endpoint(
        structured_output="json_mode", max_tokens=5, environment=env({"OPENAI_API_KEY": "k"})
    )
    assert (found.spec.structured_output_method, found.spec.max_tokens) == ("json_mode", 5)


def test_gguf_from_the_environment_and_its_conflicts(tmp_path, no_local):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF....")
    found = resolve_endpoint(environment=env({"LOOP_AGENTS_GGUF": str(model)}))
    assert found.spec == EndpointSpec(
        "local", "m", None, "function_calling", local_model.DEFAULT_MAX_TOKENS, str(model)
    )
    with pytest.raises(SettingsError, match=r"both OPENAI_BASE_URL .* and LOOP_AGENTS_GGUF"):
        resolve_endpoint(
            environment=env({"LOOP_AGENTS_GGUF": str(model), "OPENAI_BASE_URL": "http://h/v1"})
        )
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04")
    with pytest.raises(SettingsError, match="is not a GGUF model file"):
        resolve_endpoint(gguf=tmp_path / "x.gguf", environment=env({}))


def test_threads_come_from_the_option_then_the_environment(tmp_path, no_local):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF....")
    assert resolve_endpoint(gguf=model, environment=env({})).threads is None  # the default
    threads_env = env({"LOOP_AGENTS_THREADS": " 3 "})
    assert resolve_endpoint(gguf=model, environment=threads_env).threads == 3
    assert resolve_endpoint(gguf=model, threads=2, environment=threads_env).threads == 2
    with pytest.raises(SettingsError, match=r"LOOP_AGENTS_THREADS \(in the environment\)='0'"):
        resolve_endpoint(gguf=model, environment=env({"LOOP_AGENTS_THREADS": "0"}))
    with pytest.raises(SettingsError, match=r"LOOP_AGENTS_THREADS .*='two' must be a whole"):
        resolve_endpoint(gguf=model, environment=env({"LOOP_AGENTS_THREADS": "two"}))
    with pytest.raises(SettingsError, match=r"--threads='0'"):
        resolve_endpoint(gguf=model, threads=0, environment=env({}))
    saved = EndpointSpec("local", "m", gguf=str(model))
    assert endpoint_from_spec(saved, environment=threads_env).threads == 3  # this machine's
    remote = EndpointSpec("server", "m", "http://127.0.0.1:1/v1")
    assert endpoint_from_spec(remote, environment=threads_env).threads is None


def test_a_seed_is_for_the_bundled_server_only(tmp_path, no_local, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF....")
    assert resolve_endpoint(gguf=model, environment=env({})).seed is None  # llama.cpp's own
    seeded = resolve_endpoint(gguf=model, seed=5, environment=env({}))
    assert seeded.seed == 5
    started: list[dict] = []

    class Pair:  # what Endpoint.open gives LocalModelPair, without starting llama.cpp
        def __init__(self, gguf, **options):
            started.append(options)

        def start(self, *, judge=True):
            return self

    monkeypatch.setattr(local_model, "LocalModelPair", Pair)
    monkeypatch.setattr(local_model, "missing_parts", lambda: [])
    seeded.open()
    assert started[0]["seed"] == 5
    for elsewhere in (
        {"base_url": "http://127.0.0.1:8080/v1", "environment": env({})},
        {"environment": env({"OPENAI_API_KEY": "sk-test"})},
        {"environment": env({"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})},
    ):
        with pytest.raises(SettingsError, match="--seed sets the random seed of the bundled"):
            resolve_endpoint(seed=5, **elsewhere)
    with pytest.raises(SettingsError, match="--seed must be a whole number from 0 to"):
        resolve_endpoint(gguf=model, seed=-3, environment=env({}))


def test_roles_share_one_url_off_the_bundled_server(no_local):
    found = resolve_endpoint(base_url="http://127.0.0.1:8080/v1", environment=env({}))
    assert found.role_base_url("judge") == found.role_base_url("agent") == found.base_url
    assert found.role_settings("judge") == found.settings
    judge = found.chat_model(role="judge")
    assert str(judge.openai_api_base) == "http://127.0.0.1:8080/v1"


@pytest.mark.parametrize("url", ["localhost:8080", "file:///etc/passwd", "http://", "8080"])
def test_a_bad_base_url_is_refused(url, no_local):
    with pytest.raises(SettingsError, match="is not an http\\(s\\) URL"):
        resolve_endpoint(environment=env({"OPENAI_BASE_URL": url}))


def test_ollama_then_the_bundled_model_then_an_error(monkeypatch):
    server = ScriptedOpenAI([], ollama_models=["qwen3:4b", "llama3.2:latest"])
    with server.serve() as base_url:
        root = base_url.removesuffix("/v1")
        found = resolve_endpoint(environment=env({"LOOP_AGENTS_OLLAMA_URL": root}))
        assert found.spec == EndpointSpec("ollama", "qwen3:4b", base_url, "json_schema")
        assert found.describe() == (
            f"model: qwen3:4b · server: Ollama at {base_url} · no endpoint set; Ollama is running"
        )
        picked = resolve_endpoint(
            environment=env({"LOOP_AGENTS_OLLAMA_URL": root, "LOOP_AGENTS_MODEL": "llama3.2"})
        )
        assert picked.spec.model == "llama3.2:latest"

    empty = ScriptedOpenAI([], ollama_models=[])
    with empty.serve() as base_url:
        root = base_url.removesuffix("/v1")
        monkeypatch.setattr(local_model, "is_installed", lambda: True)
        found = resolve_endpoint(environment=env({"LOOP_AGENTS_OLLAMA_URL": root}))
        assert found.spec.kind == "local"
        assert found.spec.structured_output_method == "function_calling"
        assert found.spec.max_tokens == local_model.DEFAULT_MAX_TOKENS
        monkeypatch.setattr(local_model, "is_installed", lambda: False)
        with pytest.raises(NoEndpointError) as caught:
            resolve_endpoint(environment=env({"LOOP_AGENTS_OLLAMA_URL": root}))
    message = str(caught.value)
    assert "OPENAI_API_KEY" in message
    assert "OPENAI_BASE_URL" in message
    assert local_model.install_command() in message
    assert f"Ollama runs at {root} but has no model" in message


def test_something_else_at_the_ollama_address_is_not_ollama():
    server = ScriptedOpenAI([])  # answers /v1/models, not /api/tags
    with server.serve() as base_url:
        assert ollama.find_ollama(base_url.removesuffix("/v1")) is None
    assert ollama.find_ollama("http://127.0.0.1:9") is None


def test_the_endpoint_makes_models_that_handle_llama_cpp_and_count_streamed_tokens():
    endpoint = Endpoint(EndpointSpec("server", "m", "http://127.0.0.1:8080/v1"), source="x")
    model = endpoint.chat_model()
    assert model.stream_usage is True
    sync_client, async_client = endpoint.http_clients()
    assert isinstance(sync_client._transport, LlamaCppTransport)
    assert isinstance(async_client._transport, LlamaCppTransport)
    assert endpoint.chat_model().http_async_client is async_client  # one pool for all
    endpoint.close()


def test_proxies_from_the_environment_apply_except_on_loopback(monkeypatch):
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "internal.example")
    assert proxy_for("https://api.openai.com/v1") == "http://proxy.example:3128"
    assert proxy_for("https://internal.example/v1") is None
    assert proxy_for("http://127.0.0.1:8080/v1") is None
    assert proxy_for("http://localhost:11434/v1") is None


def test_a_saved_endpoint_reopens_with_the_key_of_the_environment():
    spec = EndpointSpec("openai", "gpt-5.4-mini")
    assert EndpointSpec.from_dict(spec.to_dict()) == spec
    assert "api_key" not in str(spec.to_dict())
    with pytest.raises(SettingsError, match="set OPENAI_API_KEY"):
        endpoint_from_spec(spec, environment=env({}))
    assert endpoint_from_spec(spec, environment=env({"OPENAI_API_KEY": "k"})).api_key == "k"
    for bad in (
        {"kind": "ftp", "model": "m"},
        {"kind": "server"},
        {"kind": "local", "model": "m", "max_tokens": 0},
    ):
        with pytest.raises(SettingsError, match="not a saved endpoint"):
            EndpointSpec.from_dict(bad)


def test_run_settings_round_trip_and_damage_is_reported():
    spec = RunSpec(
        "task",
        "rubric",
        "pytest",
        60.0,
        80.0,
        3,
        "system",
        "/tmp",
        EndpointSpec("ollama", "q", "http://h/v1"),
    )
    assert RunSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SettingsError, match="saved in form 99"):
        RunSpec.from_dict(spec.to_dict() | {"version": 99})
    with pytest.raises(SettingsError, match="damaged"):
        RunSpec.from_dict(spec.to_dict() | {"task": 5})


def test_store_home_and_finding_runs_by_their_first_letters(tmp_path, monkeypatch):
    assert store_home({"LOOP_AGENTS_HOME": "~/runs"}) == Path.home() / "runs"
    assert store_home({"XDG_STATE_HOME": "/xdg"}) == Path("/xdg/loop-agents")
    assert store_home({}) == Path.home() / ".local" / "state" / "loop-agents"

    store = RunStore(tmp_path / "home")
    ids = iter(["abc11111", "abc22222", "def33333"])
    monkeypatch.setattr("secrets.token_hex", lambda n: next(ids))
    for _ in range(3):
        store.create("task\nmore", {"x": 1}, 3)
    assert store.find("def").run_id == "def33333"
    assert store.find("ABC1").run_id == "abc11111"
    with pytest.raises(UsageError, match="start of several run ids"):
        store.find("abc")
    with pytest.raises(UsageError, match="is not a run id"):
        store.find("abc%")
    run = store.find("abc11111")
    assert (run.title, run.status, run.pid, run.max_iterations) == (
        "task",
        "running",
        os.getpid(),
        3,
    )
    assert run.state == "running"
    assert not run.running_elsewhere  # this very process
    store.update("abc11111", pid=2**22 + 12345)  # a process that is not there
    assert store.find("abc11111").state == "interrupted"
    with pytest.raises(ValueError, match="cannot update"):
        store.update("abc11111", task="new")


def test_a_server_on_this_machine_may_take_its_time_before_the_first_chunk():
    """A loopback server computes on this machine: reading a long prompt on a busy CPU can
    take longer than langchain-openai's 120 s wait for the first streamed chunk."""
    from langchain_openai import ChatOpenAI

    from loop_agents_cli.models.settings import ModelSettings

    if "stream_chunk_timeout" not in ChatOpenAI.model_fields:
        pytest.skip("this langchain-openai has no wait limit for the first streamed chunk")
    for url in ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1"):
        assert ModelSettings(base_url=url).chat_model().stream_chunk_timeout is None
    remote = ModelSettings(base_url="https://api.example.com/v1").chat_model()
    assert remote.stream_chunk_timeout == 120.0
    assert ModelSettings(api_key="sk-test").chat_model().stream_chunk_timeout == 120.0
