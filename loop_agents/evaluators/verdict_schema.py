"""The schema of an LLM judge's verdict, with the score's scale written into it.

A judge's score must lie on its scale. Saying so in the schema (``minimum`` and
``maximum`` on the score field) lets a server that constrains its output while it
generates (llama.cpp's grammars, through `loop_agents_cli.models.llama_cpp_http`) keep the
score on the scale; a server that does not constrain reads the bounds as a hint, and the
judge still checks every score and asks again when one is off the scale.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_type_hints

from langchain_core.utils.function_calling import convert_to_openai_function
from pydantic import BaseModel

from loop_agents.evaluators.base import format_score

_NESTED = ("parameters", "schema")
"""Where an OpenAI tool or response-format dict keeps its JSON schema."""


def default_schema(scale: tuple[float, float]) -> dict[str, Any]:
    """The JSON schema of the default verdict: ``feedback`` first, then ``score`` on ``scale``.

    Example:
        ```python
        default_schema((0, 100))["properties"]["score"]["maximum"]  # 100
        ```
    """
    low, high = scale
    return {
        "title": "Verdict",
        "description": "The judgement of the latest answer.",
        "type": "object",
        "properties": {
            "feedback": {
                "type": "string",
                "description": "What is good and, concretely, what to improve.",
            },
            "score": {
                "type": "number",
                "description": (
                    f"The answer's score, from {format_score(low)} (worst) to "
                    f"{format_score(high)} (best)."
                ),
                "minimum": _plain(low),
                "maximum": _plain(high),
            },
        },
        "required": ["feedback", "score"],
    }


def schema_fields(schema: object) -> set[str]:
    """The top-level field names of a verdict schema (TypedDict, pydantic or JSON schema).

    Example:
        ```python
        schema_fields(default_schema((0, 100)))  # {'feedback', 'score'}
        ```
    """
    if isinstance(schema, Mapping):
        for nested in _NESTED:  # OpenAI tool / response_format shapes
            if isinstance(schema.get(nested), Mapping):
                return schema_fields(schema[nested])
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            return set(map(str, properties))
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
    """``schema`` with ``minimum`` and ``maximum`` of ``scale`` on its score field.

    A TypedDict becomes the equivalent OpenAI function dict (same name, description and
    fields; the parsed verdict is a dict either way); a JSON-schema dict is copied. A
    score field that is not a number (or has bounds already) is left as it is, and so
    is a pydantic model (give it ``Field(ge=..., le=...)``: its schema then has the
    bounds, and pydantic checks them).

    Example:
        ```python
        class Review(TypedDict):
            score: int
            feedback: str

        with_scale(Review, "score", (0, 100))["parameters"]["properties"]["score"]
        # {'type': 'integer', 'minimum': 0, 'maximum': 100}
        ```
    """
    if isinstance(schema, type):
        if issubclass(schema, BaseModel) or not hasattr(schema, "__annotations__"):
            return schema
        bounded: dict[str, Any] = dict(convert_to_openai_function(schema))
    else:
        bounded = copy.deepcopy(dict(schema))
    properties = _properties(bounded)
    field = properties.get(score_key) if properties is not None else None
    if isinstance(field, dict) and field.get("type", "number") in ("number", "integer"):
        field.setdefault("minimum", _plain(scale[0]))
        field.setdefault("maximum", _plain(scale[1]))
    return bounded


def _properties(schema: dict[str, Any]) -> dict[str, Any] | None:
    for nested in _NESTED:
        if isinstance(schema.get(nested), dict):
            return _properties(schema[nested])
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else None


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)
