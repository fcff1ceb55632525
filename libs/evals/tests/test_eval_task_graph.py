"""The served ``eval_task`` graph in process: its output is the whole outcome (a
`TaskResult` but for the pair's keys), so nothing an arm reports is lost on the way back
from a LangGraph server (the server's own run is in libs/evals/tests/test_eval_server.py)."""

from __future__ import annotations

import dataclasses
import os
import typing

from loop_agents_evals.eval_task import EvalTaskOutput, build_eval_graph
from loop_agents_evals.report import TaskResult
from tests.conftest import env_without_model_settings
from tests.eval_models import ReactiveOpenAI, after_feedback

OUTCOME = {f.name for f in dataclasses.fields(TaskResult)} - {"task_id", "arm", "attempts", "part"}


def test_the_output_schema_has_every_field_of_an_outcome():
    assert set(typing.get_type_hints(EvalTaskOutput)) == OUTCOME


async def test_the_graph_returns_every_field_of_the_outcome(monkeypatch):
    scripted = ReactiveOpenAI(lambda body: "OK" if after_feedback(body) else "ok")
    task = {
        "id": "shout",
        "kind": "instructions",
        "prompt": "Reply OK in capitals.",
        "checks": [{"check": "case", "case": "upper"}],
    }
    with scripted.serve() as base_url:
        for name in set(os.environ) - set(env_without_model_settings()):
            monkeypatch.delenv(name)  # a developer's own model settings
        for name, value in {
            "OPENAI_BASE_URL": base_url,
            "OPENAI_API_KEY": "sk-test",
            "LOOP_AGENTS_MODEL": "local-model",
        }.items():
            monkeypatch.setenv(name, value)
        output = await build_eval_graph().ainvoke({"task": task, "arm": "loop", "iterations": 3})
    assert set(output) == OUTCOME
    outcome = TaskResult.from_json(output | {"task_id": "shout", "arm": "loop"})
    assert outcome.passed
    assert outcome.opaque is False
    assert outcome.by_attempt == (False, True, True)
    assert [entry["answer"] for entry in outcome.transcript] == ["ok", "OK"]
