"""Whether a run's prompts fit the model's context, checked before the first model call."""

from __future__ import annotations

from loop_agents_cli.errors import UsageError
from loop_agents_cli.loop import JUDGE_INSTRUCTIONS
from loop_agents_cli.models.endpoints import Endpoint
from loop_agents_cli.models.llama_cpp_extras import (
    TEMPLATE_TOKENS_FOR_REPLY,
    TEMPLATE_TOKENS_PER_MESSAGE,
)
from loop_agents_cli.spec import RunSpec


def check_prompt_size(spec: RunSpec, endpoint: Endpoint) -> None:
    """Raise `UsageError` when the first iteration's prompts cannot fit the known context.

    The agent gets its instructions and the task; the judge its instructions, the task and an
    answer of ``max_tokens``; each writes up to ``max_tokens``. Nothing is checked when the
    context is unknown or the answers are not capped.

    Example:
        ```python
        check_prompt_size(spec, endpoint)
        ```
    """
    window, cap = endpoint.context_window, endpoint.spec.max_tokens
    if window is None or cap is None:
        return
    task = endpoint.count_tokens(spec.task)
    if task is None:
        return
    around = endpoint.count_tokens(spec.system) or 0
    around += 2 * TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS_FOR_REPLY + cap
    if spec.rubric is not None:
        judge = endpoint.count_tokens(JUDGE_INSTRUCTIONS.format(rubric=spec.rubric)) or 0
        judge += 3 * TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS_FOR_REPLY + 2 * cap
        around = max(around, judge)
    room = window - around
    if task <= room:
        return
    allowed = (
        f"a task may have at most {room:,} tokens"
        if room > 0
        else "no task fits (the rubric or the instructions are too long themselves)"
    )
    raise UsageError(
        f"the task is {task:,} tokens long, too long for the model's context of "
        f"{window:,} tokens: with the instructions, the rubric and room for the answers "
        f"({cap:,} tokens each, --max-tokens), {allowed}. Shorten it by about "
        f"{task - max(room, 0):,} tokens, or use a model with a longer context "
        f"(a model server with one: --base-url)"
    )
