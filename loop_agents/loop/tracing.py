"""Names, tags and metadata of a loop's calls, for traces and for the ``messages`` stream.

Every agent call and every evaluator call of a loop runs as its own named run,
``"iteration 2: agent"`` or ``"iteration 2: evaluator"`` (and a ``compacting`` history's
summary call, ``"iteration 2: compaction"``), tagged ``loop_agents``,
``iteration:2`` and ``loop_role:agent`` (or ``loop_role:evaluator``) and carrying the
metadata ``{"loop_name": ..., "loop_iteration": 2, "loop_role": "agent"}``. A LangSmith
trace or LangGraph Studio therefore shows iteration 1, 2, 3 rather than anonymous calls,
and every token on ``stream_mode="messages"`` says which iteration and role it belongs
to, because LangGraph passes a run's metadata along with its tokens:

```python
async for token, metadata in loop.astream(inputs, stream_mode="messages"):
    if role_of(metadata) == "agent":
        print(iteration_of(metadata), token.text)
```
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from langchain_core.runnables import RunnableConfig

from loop_agents.runtime._function_runnable import complete_config

LoopRole: TypeAlias = Literal["agent", "evaluator", "compaction", "advisor"]
"""Which of a loop's calls a run (or a token) belongs to: the agent, the evaluator, a
history policy's model call (a ``compacting`` policy's summary), or the ``advisor``
that writes feedback for a score-only evaluation."""

LOOP_TAG = "loop_agents"
"""The tag every agent and evaluator run of a loop carries."""

LOOP_KEY = "loop_name"
"""Metadata key: the loop's name (``create_loop_agent(..., name=...)``)."""

ITERATION_KEY = "loop_iteration"
"""Metadata key: the iteration's number, starting at 1."""

ROLE_KEY = "loop_role"
"""Metadata key: ``"agent"``, ``"evaluator"``, ``"compaction"`` or ``"advisor"``."""

CANDIDATE_KEY = "loop_candidate"
"""Metadata key, with ``Candidates(k)``: which candidate (1 to k) a call belongs to."""


def iteration_config(
    config: RunnableConfig | None, *, loop: str, iteration: int, role: LoopRole
) -> RunnableConfig:
    """Return ``config`` with the run name, tags and metadata of one call of a loop.

    The loop applies this to the config of every agent and evaluator call; the run name
    applies to that call only, while tags and metadata are inherited by everything the
    call runs (a graph agent's model calls, an LLM judge inside an evaluator function).

    Args:
        config: The config the call would get otherwise (kept: callbacks, configurable,
            the caller's own tags and metadata).
        loop: The loop's name.
        iteration: The iteration's number, starting at 1.
        role: ``"agent"``, ``"evaluator"`` or ``"compaction"``.

    Example:
        ```python
        config = iteration_config(None, loop="poet", iteration=2, role="agent")
        assert config["run_name"] == "iteration 2: agent"
        assert config["metadata"]["loop_iteration"] == 2
        ```

    """
    # what merge_configs(config, {...}) gives, without re-copying every key of the config;
    # a complete config (a node's, as LangGraph passes it) is taken as it is, with the
    # configurable keys that `ensure_config` would copy into the metadata
    base = complete_config(config)
    configurable = base.get("configurable", {})
    metadata: dict[str, Any] = {}
    for key in _METADATA_FROM_CONFIGURABLE:
        if isinstance(value := configurable.get(key), str):
            metadata[key] = value
    metadata.update(base.get("metadata", {}))
    metadata[LOOP_KEY] = loop
    metadata[ITERATION_KEY] = iteration
    metadata[ROLE_KEY] = role
    merged: RunnableConfig = {
        **base,
        "run_name": f"iteration {iteration}: {role}",
        "tags": sorted(
            {*base.get("tags", []), LOOP_TAG, f"iteration:{iteration}", f"{ROLE_KEY}:{role}"}
        ),
        "metadata": metadata,
    }
    return merged


_METADATA_FROM_CONFIGURABLE = ("model", "checkpoint_ns")
"""The ``configurable`` keys that ``ensure_config`` copies into the metadata (when they
are strings and the metadata lacks them)."""


def candidate_config(config: RunnableConfig, candidate: int) -> RunnableConfig:
    """``config`` (an agent or evaluator call's) for one candidate of ``Candidates(k)``.

    The call becomes a run of its own (a fresh ``run_id``) named ``"... (candidate i)"``,
    tagged ``loop_candidate:i`` and with ``loop_candidate`` in its metadata, so the k
    calls are told apart in traces and on the ``messages`` stream.

    Example:
        ```python
        base = iteration_config(None, loop="poet", iteration=2, role="agent")
        config = candidate_config(base, 3)
        assert config["run_name"] == "iteration 2: agent (candidate 3)"
        assert config["metadata"]["loop_candidate"] == 3
        ```

    """
    merged: RunnableConfig = {
        **config,
        "run_id": uuid.uuid4(),
        "run_name": f"{config.get('run_name', 'agent')} (candidate {candidate})",
        "tags": sorted({*config.get("tags", []), f"{CANDIDATE_KEY}:{candidate}"}),
        "metadata": {**config.get("metadata", {}), CANDIDATE_KEY: candidate},
    }
    return merged


def candidate_of(metadata: Mapping[str, Any]) -> int | None:
    """Which candidate (``Candidates(k)``) a run or a ``messages``-stream token belongs to.

    Example:
        ```python
        for token, metadata in loop.stream(inputs, stream_mode="messages"):
            print(candidate_of(metadata), token.text)
        ```

    """
    value = metadata.get(CANDIDATE_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def iteration_of(metadata: Mapping[str, Any]) -> int | None:
    """The loop iteration a run or a ``messages``-stream token belongs to, if any.

    Example:
        ```python
        for token, metadata in loop.stream(inputs, stream_mode="messages"):
            print(iteration_of(metadata), token.text)
        ```

    """
    value = metadata.get(ITERATION_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def role_of(metadata: Mapping[str, Any]) -> LoopRole | None:
    """Which role a run or a ``messages``-stream token has: agent, evaluator or compaction.

    Example:
        ```python
        agent_tokens = [
            token
            for token, metadata in loop.stream(inputs, stream_mode="messages")
            if role_of(metadata) == "agent"
        ]
        ```

    """
    value = metadata.get(ROLE_KEY)
    if value == "agent":
        return "agent"
    if value == "evaluator":
        return "evaluator"
    if value == "compaction":
        return "compaction"
    if value == "advisor":
        return "advisor"
    return None
