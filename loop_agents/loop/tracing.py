"""Names, tags and metadata of a loop's calls, for traces and the ``messages`` stream.

Each agent, evaluator, summary or advisor call is a run named ``"iteration 2: agent"``,
tagged ``loop_agents``, ``iteration:2`` and ``loop_role:agent``, with the metadata that
`iteration_of`, `role_of` and `candidate_of` read (``docs/streaming.md``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias, get_args

from langchain_core.runnables import RunnableConfig

from loop_agents.runtime._function_runnable import complete_config

LoopRole: TypeAlias = Literal["agent", "evaluator", "compaction", "advisor"]
"""Which of a loop's calls a run (or a token) belongs to: the agent, the evaluator, a
history policy's summary (``compaction``), or the ``advisor`` of a score-only evaluation."""

LOOP_TAG = "loop_agents"  # the tag of every call of a loop
LOOP_KEY = "loop_name"  # metadata: the loop's name
ITERATION_KEY = "loop_iteration"  # metadata: the iteration's number, from 1
ROLE_KEY = "loop_role"  # metadata: the call's `LoopRole`
CANDIDATE_KEY = "loop_candidate"  # metadata, with Candidates(k): the candidate, 1 to k


def iteration_config(
    config: RunnableConfig | None, *, loop: str, iteration: int, role: LoopRole
) -> RunnableConfig:
    """Return ``config`` with the run name, tags and metadata of one call of a loop.

    The run name applies to that call only; tags and metadata are inherited by everything
    the call runs (a graph agent's model calls, an LLM judge inside an evaluator function).

    Args:
        config: The config the call would get otherwise (kept: callbacks, configurable,
            the caller's own tags and metadata).
        loop: The loop's name.
        iteration: The iteration's number, starting at 1.
        role: ``"agent"``, ``"evaluator"``, ``"compaction"`` or ``"advisor"``.

    Example:
        ```python
        config = iteration_config(None, loop="poet", iteration=2, role="agent")
        assert config["run_name"] == "iteration 2: agent"
        assert config["metadata"]["loop_iteration"] == 2
        ```
    """
    # what merge_configs(config, {...}) gives, without copying every key of the config: a
    # complete config (a node's) is taken as it is; another is completed (ensure_config)
    base = complete_config(config)
    tags = {*base.get("tags", []), LOOP_TAG, f"iteration:{iteration}", f"{ROLE_KEY}:{role}"}
    metadata = base.get("metadata", {})
    return {
        **base,
        "run_name": f"iteration {iteration}: {role}",
        "tags": sorted(tags),
        "metadata": {**metadata, LOOP_KEY: loop, ITERATION_KEY: iteration, ROLE_KEY: role},
    }


def candidate_config(config: RunnableConfig, candidate: int) -> RunnableConfig:
    """``config`` for one candidate of ``Candidates(k)``: a run of its own, named and tagged."""
    return {
        **config,
        "run_id": uuid.uuid4(),
        "run_name": f"{config.get('run_name', 'agent')} (candidate {candidate})",
        "tags": sorted({*config.get("tags", []), f"{CANDIDATE_KEY}:{candidate}"}),
        "metadata": {**config.get("metadata", {}), CANDIDATE_KEY: candidate},
    }


def _int_of(metadata: Mapping[str, Any], key: str) -> int | None:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def candidate_of(metadata: Mapping[str, Any]) -> int | None:
    """Which candidate (``Candidates(k)``) a run or a ``messages``-stream token belongs to.

    Example:
        ```python
        assert candidate_of({"loop_candidate": 2}) == 2
        ```
    """
    return _int_of(metadata, CANDIDATE_KEY)


def iteration_of(metadata: Mapping[str, Any]) -> int | None:
    """The loop iteration a run or a ``messages``-stream token belongs to, if any.

    Example:
        ```python
        assert iteration_of({"loop_iteration": 2}) == 2
        ```
    """
    return _int_of(metadata, ITERATION_KEY)


def role_of(metadata: Mapping[str, Any]) -> LoopRole | None:
    """Which role a run or a ``messages``-stream token has (see `LoopRole`), if any.

    Example:
        ```python
        assert role_of({"loop_role": "evaluator"}) == "evaluator"
        ```
    """
    value = metadata.get(ROLE_KEY)
    return value if value in get_args(LoopRole) else None
