"""The schema of an LLM judge's verdict, with the score's scale written into it.

``minimum`` and ``maximum`` on the score let a server that constrains its output (llama.cpp's
grammars) keep the score on the scale; elsewhere they are a hint, and the judge checks anyway.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_type_hints

from langchain_core.utils.function_calling import convert_to_openai_function
from pydantic import BaseModel

from loop_agents.evaluators.base import format_score

_NESTED = ("parameters", "schema")  # where an OpenAI tool or response format has its schema


def default_schema(scale: tuple[float, float]) -> dict[str, Any]:
    """The default verdict's JSON schema: ``feedback`` first, then ``score`` on ``scale``."""
    low, high = scale
    score = f"The answer's score, from {format_score(low)} (worst) to {format_score(high)} (best)."
    feedback = "What is good and, concretely, what to improve."
    bounds = {"minimum": _plain(low), "maximum": _plain(high)}
    return {
        "title": "Verdict",
        "description": "The judgement of the latest answer.",
        "type": "object",
        "properties": {
            "feedback": {"type": "string", "description": feedback},
            "score": {"type": "number", "description": score, **bounds},
        },
        "required": ["feedback", "score"],
    }


def schema_fields(schema: object) -> set[str]:
    """The top-level field names of a TypedDict, pydantic model or JSON-schema dict."""
    if isinstance(schema, Mapping):
        for nested in _NESTED:
            if isinstance(schema.get(nested), Mapping):
                return schema_fields(schema[nested])
        if isinstance(schema.get("properties"), Mapping):
            return set(map(str, schema["properties"]))
    elif isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    elif isinstance(schema, type) and hasattr(schema, "__annotations__"):
        return set(get_type_hints(schema))
    raise TypeError(
        f"schema must be a TypedDict class, a pydantic model class or a JSON-schema dict "
        f"with 'properties'; got {schema!r:.80}"
    )


def with_scale(
    schema: dict[str, Any] | type, score_key: str, scale: tuple[float, float]
) -> dict[str, Any] | type:
    """``schema`` (a TypedDict as an OpenAI function) with the scale on its number score."""
    if isinstance(schema, type):
        if issubclass(schema, BaseModel) or not hasattr(schema, "__annotations__"):
            return schema  # a pydantic model has its own bounds: Field(ge=..., le=...)
        bounded: dict[str, Any] = dict(convert_to_openai_function(schema))
    else:
        bounded = copy.deepcopy(dict(schema))
    inner = bounded
    while nested := [inner[k] for k in _NESTED if isinstance(inner.get(k), dict)]:
        inner = nested[0]
    properties = inner.get("properties")
    field = properties.get(score_key) if isinstance(properties, dict) else None
    if isinstance(field, dict) and field.get("type", "number") in ("number", "integer"):
        field.setdefault("minimum", _plain(scale[0]))
        field.setdefault("maximum", _plain(scale[1]))
    return bounded


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)
