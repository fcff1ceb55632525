"""The graphs ``langgraph.json`` serves, built from the environment's model settings.

Each entry is a graph factory the server calls: ``song_lyrics`` (the article's loop;
``LOOP_AGENTS_FORM_CHECK``) and ``configurable_loop`` (`configurable_loop`;
``LOOP_AGENTS_MAX_ITERATIONS``). Missing settings fail a run, not the server's start.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, cast

from langgraph.graph.state import CompiledStateGraph

from loop_agents.hosts.loop_agent import graph_of
from loop_agents_cli.demos.song_lyrics import build_loop as build_song_lyrics_loop
from loop_agents_cli.demos.song_lyrics import form_check_from_env
from loop_agents_cli.models.settings import ModelSettings, SettingsError
from loop_agents_cli.serving.configurable import configurable_loop as build_configurable_loop

DEFAULT_MAX_ITERATIONS = 3


def _settings() -> ModelSettings:
    settings = ModelSettings.from_env()
    if not settings.configured:
        settings.chat_model()  # raises SettingsError saying what to set
    return settings


def max_iterations_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``LOOP_AGENTS_MAX_ITERATIONS`` (default 3); `SettingsError` unless a whole number >= 1.

    Example:
        ```python
        assert max_iterations_from_env({"LOOP_AGENTS_MAX_ITERATIONS": "5"}) == 5
        ```
    """
    raw = (os.environ if environ is None else environ).get("LOOP_AGENTS_MAX_ITERATIONS", "")
    if not raw.strip():
        return DEFAULT_MAX_ITERATIONS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SettingsError(
            f"LOOP_AGENTS_MAX_ITERATIONS={raw!r} must be a whole number >= 1 (or unset for "
            f"{DEFAULT_MAX_ITERATIONS})"
        )
    return value


@functools.lru_cache(maxsize=8)
def _song_lyrics(
    settings: ModelSettings, form_check: bool
) -> CompiledStateGraph[Any, Any, Any, Any]:
    return cast(
        CompiledStateGraph[Any, Any, Any, Any],
        graph_of(build_song_lyrics_loop(settings, form_check=form_check)),
    )


@functools.lru_cache(maxsize=8)
def _configurable(
    settings: ModelSettings, max_iterations: int
) -> CompiledStateGraph[Any, Any, Any, Any]:
    return cast(
        CompiledStateGraph[Any, Any, Any, Any],
        graph_of(
            build_configurable_loop(
                settings.chat_model(),
                method=settings.structured_output_method,
                max_iterations=max_iterations,
            )
        ),
    )


def song_lyrics() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The Song-lyrics loop for the environment's model settings (a graph factory)."""
    return _song_lyrics(_settings(), form_check_from_env())


def configurable_loop() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The configurable loop for the environment's model settings (a graph factory)."""
    return _configurable(_settings(), max_iterations_from_env())
