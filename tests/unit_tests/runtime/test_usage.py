"""The stored form of a call's usage: what a checkpoint keeps reads back as it was."""

from __future__ import annotations

from typing import Any

import pytest

from loop_agents.runtime.usage import NO_USAGE, CallUsage


@pytest.mark.parametrize(
    "usage",
    [
        CallUsage(3, 4, 1, {"m": (3, 4, 1)}, {}, 1),
        CallUsage(0, 0, 2, {"m": (0, 0, 0)}, {"m": 2}),  # unmetered calls only
        CallUsage(10**40, 1, 1, {"": (10**40, 1, 0)}),  # a huge count stays exact
    ],
)
def test_a_stored_usage_reads_back_equal(usage: CallUsage) -> None:
    assert CallUsage.of_stored(usage.stored()) == usage


@pytest.mark.parametrize(
    "stored",
    [
        {},
        NO_USAGE.stored(),
        CallUsage().stored(),  # equal to NO_USAGE, not it: stored in full, all zeros
        {"input_tokens": 0, "models": {}, "unmetered": {}},
    ],
)
def test_no_usage_reads_back_as_no_usage(stored: dict[str, Any]) -> None:
    assert CallUsage.of_stored(stored) is NO_USAGE


def test_an_older_form_without_cached_tokens_reads_them_as_zero() -> None:
    stored = {"input_tokens": 5, "output_tokens": 2, "requests": 1, "models": {"m": [5, 2]}}
    usage = CallUsage.of_stored(stored)
    assert usage == CallUsage(5, 2, 1, {"m": (5, 2, 0)}, {}, 0)
    assert usage + usage == CallUsage(10, 4, 2, {"m": (10, 4, 0)}, {}, 0)
