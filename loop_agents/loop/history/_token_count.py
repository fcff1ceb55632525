"""Counting the tokens of a list of messages, for ``compacting``'s budget.

`resolve_counter` turns the ``token_counter=`` option into a function: langchain-core's
``count_tokens_approximately`` (4 characters a token, plus 3 a message), a chat model's
own ``get_num_tokens_from_messages``, or a function of the user's. The default, the
summarizer model's own counter, is tried once and replaced by the approximate count
(with a warning) when it does not work here, e.g. tiktoken without its encoding files
offline.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

TokenCounter: TypeAlias = Callable[[Sequence[BaseMessage]], int]
"""A function counting the tokens of a list of messages."""

CounterOption: TypeAlias = TokenCounter | BaseLanguageModel[Any] | Literal["approximate"] | None
"""What ``token_counter=`` accepts (see `loop_agents.loop.history.compaction.compacting`)."""


def checked_count(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    """``counter(messages)``, checked to be an int >= 0.

    Raises:
        TypeError: the counter returned something else.

    Example:
        ```python
        checked_count(count_tokens_approximately, [HumanMessage("hi")])
        ```

    """
    tokens = counter(messages)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise TypeError(f"token_counter returned {tokens!r}; expected an int >= 0")
    return tokens


def _has_own_tokenizer(model: BaseLanguageModel[Any]) -> bool:
    if model.custom_get_token_ids is not None:
        return True
    return any(
        getattr(type(model), name) is not getattr(BaseLanguageModel, name)
        for name in ("get_num_tokens_from_messages", "get_num_tokens", "get_token_ids")
    )


def resolve_counter(option: CounterOption, model: object) -> TokenCounter:
    """The counter for ``option`` (see `compacting`); the default is probed once.

    Example:
        ```python
        count = resolve_counter("approximate", model)
        print(count([HumanMessage("hello")]))
        ```

    """
    if option == "approximate":
        return count_tokens_approximately
    if isinstance(option, BaseLanguageModel):
        return _model_counter(option)
    if option is not None:
        return option
    if isinstance(model, BaseLanguageModel) and _has_own_tokenizer(model):
        try:
            model.get_num_tokens_from_messages([HumanMessage("How many tokens is this?")])
        except Exception as exc:  # any failure means: not usable here
            warnings.warn(
                f"compacting history: {type(model).__name__}'s token counter does not work "
                f"here ({type(exc).__name__}: {str(exc)[:120]}); counting approximately (4 "
                f"characters a token). Pass token_counter= to choose.",
                UserWarning,
                stacklevel=3,
            )
            return count_tokens_approximately
        return _model_counter(model)
    return count_tokens_approximately


def _model_counter(model: BaseLanguageModel[Any]) -> TokenCounter:
    def count(messages: Sequence[BaseMessage]) -> int:
        return model.get_num_tokens_from_messages(list(messages))

    return count
