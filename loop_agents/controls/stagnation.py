"""Stop when the agent repeats itself: `Stagnation`, a stop rule for identical answers.

Each record keeps a digest of its answer (``answer_digest``), so the rule reads only records
and a resumed loop decides the same (docs/strategies.md).
"""

from __future__ import annotations

import hashlib

from loop_agents.controls.options import check_function
from loop_agents.controls.restart import AnswerKey, answer_key
from loop_agents.loop.agents import describe
from loop_agents.loop.protocol import LoopControl, Outcome, Progress, Stage

DIGEST_KEY = "answer_digest"
"""The record key holding an answer's digest."""


def answer_digest(text: str, key: AnswerKey = answer_key) -> str:
    """The digest `Stagnation` keeps of an answer: 16 hex digits of SHA-256 of its key.

    Example:
        ```python
        assert answer_digest("x = 1") == answer_digest("x  =  1")
        ```
    """
    return hashlib.sha256(key(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Stagnation(LoopControl):
    """Stop with reason ``"stagnation"`` when the latest answer repeats an earlier one.

    ``key`` makes two answers the same (default `answer_key`: whitespace made single).

    Example:
        ```python
        loop = create_loop_agent(model, tests, 5, controls=[Stagnation()])
        ```
    """

    name = "stagnation"
    stage = Stage.STOP + 20
    claims = frozenset({"stagnation"})

    def __init__(self, *, key: AnswerKey | None = None) -> None:
        self.key = check_function("Stagnation(key=)", key, answer_key)

    def after_verdict(self, outcome: Outcome) -> Outcome:
        """Keep the digest of the iteration's answer in its record."""
        answer = outcome.answer
        if answer is not None:
            key = self.key(answer.text)
            if not isinstance(key, str):
                raise TypeError(
                    f"control 'stagnation': key {describe(self.key)!r} returned "
                    f"{type(key).__name__} {key!r:.40}; it must return a str"
                )
            outcome.extra[DIGEST_KEY] = answer_digest(key, str)
        return outcome

    def stop_reason(self, progress: Progress) -> str | None:
        """``"stagnation"`` when the latest answer's digest is an earlier answer's."""
        latest = progress.latest.get(DIGEST_KEY)
        if latest is None:
            return None
        earlier = {r.get(DIGEST_KEY) for r in progress.records[:-1]}
        return "stagnation" if latest in earlier else None
