"""The Song-lyrics demo's own settings, read before any model library is imported."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from loop_agents_cli.models.settings import SettingsError

ReviewMethod = Literal["json_schema", "function_calling", "json_mode"]
"""The ways of requesting the reviewer's structured review (`check_review_method`)."""

FORM_CHECK_VARIABLE = "LOOP_AGENTS_FORM_CHECK"
"""The environment variable that turns the 相见欢 form check off (``0``/``false``/``no``)."""


def form_check_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Read `FORM_CHECK_VARIABLE`: on unless ``0``/``false``/``no``/``off``; `SettingsError` else.

    On by default: the article's reviewer alone scores a copy of the source poem 90.

    Example:
        ```python
        assert not form_check_from_env({"LOOP_AGENTS_FORM_CHECK": "0"})
        ```
    """
    value = (os.environ if environ is None else environ).get(FORM_CHECK_VARIABLE, "")
    flag = value.strip().lower()
    if flag in ("", "1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    raise SettingsError(
        f"{FORM_CHECK_VARIABLE}={value!r} is not a yes/no value; use 1 (check the form of "
        f"each draft before the reviewer, the default) or 0 (the reviewer alone)"
    )


def check_review_method(method: str | None) -> None:
    """Refuse the ``text`` verdict form (`SettingsError`): the reviewer needs structured output."""
    if method == "text":
        raise SettingsError(
            "the Song-lyrics reviewer reads a structured review (comments and a score), so "
            "it needs structured output: set --structured-output (LOOP_AGENTS_STRUCTURED_OUTPUT) "
            "to function_calling, json_schema or json_mode; the text form is for run and eval"
        )
