"""The text form of an LLM judge's verdict: ``Score: N`` and ``Feedback: ...``, parsed strictly.

For judge models without tool calling or JSON output; what `parse_text_verdict` accepts,
and why a line quoting the judged answer is never the verdict: docs/judges.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage

from loop_agents.evaluators.base import format_score

TEXT_FORM = "Score: <one number from {low} to {high}>\nFeedback: <{feedback}>"
FEEDBACK_HINT = "what is good and, concretely, what to improve"

_LABEL = re.compile(
    r"^[ \t]*(?:\*\*)?(?P<label>score|feedback)(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*(?P<rest>.*)$",
    re.IGNORECASE,
)
_NUMBER = r"[+-]?[0-9]{1,15}(?:\.[0-9]{1,15})?"
_SCORE = re.compile(rf"^(?P<score>{_NUMBER})(?:[ \t]*/[ \t]*(?P<out_of>{_NUMBER}))?[ \t]*\.?$")


class TextVerdictError(ValueError):
    """A judge's text reply is not in the form `parse_text_verdict` accepts."""


def text_prompt(
    instructions: SystemMessage,
    shown: Sequence[AnyMessage],
    problems: Sequence[str],
    scale: tuple[float, float],
) -> list[AnyMessage]:
    """Instructions with the form, what is judged, and the ask (after what was wrong)."""
    low, high = (format_score(v) for v in scale)
    form = TEXT_FORM.format(low=low, high=high, feedback=FEEDBACK_HINT)
    rule = f"Reply in exactly this form, these two parts and nothing else:\n{form}"
    if isinstance(instructions.content, str):
        system = SystemMessage(content=f"{instructions.content}\n\n{rule}")
    else:
        system = SystemMessage(content=[*instructions.content, {"type": "text", "text": rule}])
    ask = f"Judge the answer above. Reply in exactly this form:\n{form}"
    if problems:
        ask = f"Your previous reply could not be used: {problems[-1]}. {ask}"
    return [system, *shown, HumanMessage(content=ask)]


def parse_text_verdict(
    text: str, scale: tuple[float, float], *, judged: Sequence[str] = ()
) -> tuple[float, str]:
    r"""``(score, feedback)`` from a judge's reply on ``scale`` (rules: docs/judges.md).

    A line of the reply that repeats a labelled line of a ``judged`` text (the answer) is
    a quote, not a label. Raises `TextVerdictError` saying why a reply is not in the form.

    Example:
        ```python
        parse_text_verdict("Score: 85/100\nFeedback: Vivid.", (0, 100))  # (85.0, "Vivid.")
        ```
    """
    # without a leading think block, and a fence around it all
    unwrapped = _THINK.sub("", text, count=1).strip()
    wrapped = _WRAPPED.match(unwrapped)
    lines = (wrapped["body"].strip() if wrapped else unwrapped).splitlines()
    if not lines:
        raise TextVerdictError("the reply is empty")
    echoed, fenced = _labelled_lines(judged), _fenced(lines)
    labels: list[tuple[int, re.Match[str]]] = []
    quoted: list[str] = []
    for i, line in enumerate(lines):
        match = _LABEL.match(line)
        if match is None:
            continue
        if i in fenced or _canonical(match) in echoed:
            quoted.append(line.strip())
        else:
            labels.append((i, match))
    found = {name: [(i, m) for i, m in labels if m["label"].lower() == name] for name in _NAMES}
    for name, places in found.items():
        if not places:
            raise TextVerdictError(_missing(name, text, quoted, echoed))
        if len(places) > 1:
            raise TextVerdictError(f"the reply has {len(places)} '{_NAMES[name]}' lines, not one")
    if labels[0][0] != 0:
        raise TextVerdictError(
            f"the reply must start with 'Score:' or 'Feedback:'; it starts with {lines[0]!r:.60}"
        )
    (score_at, score_match), (feedback_at, feedback_match) = found["score"][0], found["feedback"][0]
    if score_at > feedback_at:
        body = lines[feedback_at + 1 : score_at]
        if any(line.strip() for line in lines[score_at + 1 :]):
            raise TextVerdictError("the reply has text after its 'Score:' line")
    else:
        if any(line.strip() for line in lines[score_at + 1 : feedback_at]):
            raise TextVerdictError("the reply has text between its 'Score:' and 'Feedback:' lines")
        body = lines[feedback_at + 1 :]
    feedback = "\n".join([feedback_match["rest"], *body]).strip()
    if not feedback:
        raise TextVerdictError("'Feedback:' is empty; write the comments after it")
    return _score(score_match["rest"].strip(), scale), feedback


_NAMES = {"score": "Score:", "feedback": "Feedback:"}
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
_THINK = re.compile(r"^\s*<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_WRAPPED = re.compile(r"^```(?:text|plain|plaintext)?[ \t]*\n(?P<body>.*)\n```$", re.DOTALL)


def _score(given: str, scale: tuple[float, float]) -> float:
    low, high = scale
    shown = f"{format_score(low)} to {format_score(high)}"
    match = _SCORE.match(given)
    if match is None:
        raise TextVerdictError(
            f"'Score:' must be followed by one plain number from {shown} and nothing else "
            f"(e.g. 'Score: {format_score((low + high) / 2)}'); got {given!r:.40}"
        )
    score = float(match["score"])
    if match["out_of"] is not None and float(match["out_of"]) != high:
        raise TextVerdictError(
            f"the score is given out of {match['out_of']}, but the scale is {shown}; give "
            f"a number from {shown}"
        )
    if not math.isfinite(score) or not low <= score <= high:
        raise TextVerdictError(
            f"the score {match['score']} is outside the scale {format_score(low)}-"
            f"{format_score(high)}"
        )
    return score


def _labelled_lines(texts: Sequence[str]) -> frozenset[str]:
    matches = (_LABEL.match(line) for text in texts for line in text.splitlines())
    return frozenset(_canonical(m) for m in matches if m is not None)


def _canonical(match: re.Match[str]) -> str:
    # case, spaces, bold marks and a final period aside: "**Score:** 100." is "score:100"
    rest = re.sub(r"\s+", "", match["rest"].replace("*", "")).rstrip(".").lower()
    return f"{match['label'].lower()}:{rest}"


def _fenced(lines: Sequence[str]) -> frozenset[int]:  # lines in code fences, fences included
    inside: set[int] = set()
    fence: str | None = None
    for i, line in enumerate(lines):
        opening = _FENCE.match(line)
        if fence is None:
            if opening is not None:
                fence = opening["fence"]
                inside.add(i)
        else:
            inside.add(i)
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
    return frozenset(inside)


def _missing(name: str, text: str, quoted: Sequence[str], echoed: frozenset[str]) -> str:
    label = _NAMES[name]
    own = [q for q in quoted if q.lower().lstrip("*").startswith(name)]
    if not own:
        shown = repr(text.strip()[:80]) if text.strip() else "empty"
        return f"the reply has no '{label}' line; it was {shown}"
    if any(m is not None and _canonical(m) in echoed for m in map(_LABEL.match, own)):
        return (
            f"the reply has no '{label}' line of its own: its {own[0]!r:.60} repeats a line of "
            f"the answer being judged, which the answer wrote, not you; write your own "
            f"'{label}' line (if your verdict is the same, write it in another form, e.g. "
            f"'Score: 100/100')"
        )
    return (
        f"the reply has no '{label}' line of its own: its {own[0]!r:.60} is inside a code "
        f"fence (quoted text); write the verdict outside any fence"
    )
