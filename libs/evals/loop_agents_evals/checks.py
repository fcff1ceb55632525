r"""The rule checks of ``instructions`` tasks: a closed vocabulary in the style of IFEval.

A check is ``{"check": NAME, ...parameters}`` (an entry of `CHECKS`); it passes, or fails
with a sentence to the writer saying what to fix (the loop's feedback). How words,
sentences, lines and paragraphs are counted is in docs/eval.md ("The check vocabulary").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "CheckSpec",
    "CheckSpecError",
    "checks_feedback",
    "parse_check",
    "run_checks",
]

ParamKind = Literal["count", "text", "word", "words", "keys", "case"]
"""How a parameter is validated: a whole number >= 0, a non-empty text, one word, a
non-empty list of words or phrases, a list of JSON keys, or ``"lower"``/``"upper"``."""

WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|\n")
_BULLET = re.compile(r"^\s*[-*•]\s+\S", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]*[^\W_][^\[\]\n]*\](?!\()")
_TITLE = re.compile(r"<<[^<>\n]*[^\W_][^<>\n]*>>")
_HIGHLIGHT = re.compile(r"\*{1,2}[^\s*][^\n*]*\*{1,2}")
_FENCED_JSON = re.compile(r"^```(?:json)?[ \t]*\n(?P<body>.*)\n```$", re.DOTALL | re.IGNORECASE)


class CheckSpecError(ValueError):
    """A check in a task file is malformed: its ``field`` (or ``""``) and the ``problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class CheckSpec:
    """One entry of the vocabulary; ``run(answer, params)`` is ``None`` or the feedback."""

    name: str
    summary: str
    params: Mapping[str, ParamKind]
    run: Callable[[str, Mapping[str, Any]], str | None]
    required: frozenset[str] = frozenset()
    one_of: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one answer (``feedback``: what to fix, ``""`` if passed)."""

    check: Check
    passed: bool
    feedback: str = ""


@dataclass(frozen=True)
class Check:
    """One validated check of an instructions task: an entry of `CHECKS` and its parameters.

    Example:
        ```python
        check = Check.of("forbidden_words", words=["very"])
        assert not check.run("A very short note.").passed
        ```
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, **params: Any) -> Check:
        """Build and validate a check (`CheckSpecError` if it is not valid).

        Example:
            ```python
            check = Check.of("ends_with", text="Thank you.")
            ```
        """
        return parse_check({"check": name, **params})

    def run(self, answer: str) -> CheckResult:
        """Check ``answer``; the result carries the feedback when it fails.

        Example:
            ```python
            assert Check.of("case", case="lower").run("all lower").passed
            ```
        """
        problem = CHECKS[self.name].run(answer, self.params)
        return CheckResult(self, problem is None, problem or "")

    def to_json(self) -> dict[str, Any]:
        """The check as written in a task file."""
        return {"check": self.name, **self.params}


# -- counting ------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """The words of ``text`` (see the module docstring)."""
    return WORD.findall(text)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring)."""
    pieces = _SENTENCE_END.split(text)
    return [p.strip() for p in pieces if WORD.search(p)]


def lines(text: str) -> list[str]:
    """The non-blank lines of ``text``."""
    return [line for line in text.splitlines() if line.strip()]


def paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text``: blocks separated by blank lines."""
    return [p.strip() for p in re.split(r"\n[ \t]*\n", text.strip()) if p.strip()]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _bounds(params: Mapping[str, Any], noun: str, found: int) -> str | None:
    """Feedback when ``found`` is outside ``min``/``max``, else ``None``."""
    low: int | None = params.get("min")
    high: int | None = params.get("max")
    if (low is None or found >= low) and (high is None or found <= high):
        return None
    if low is not None and high is not None:
        wanted = f"exactly {_plural(low, noun)}" if low == high else f"{low} to {high} {noun}s"
    elif low is not None:
        wanted = f"at least {_plural(low, noun)}"
    else:
        wanted = f"at most {_plural(high or 0, noun)}"
    return f"Use {wanted}; the answer has {found}."


def _phrase(term: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive, any whitespace between the words of a phrase."""
    parts = [re.escape(part) for part in term.split()]
    return re.compile(r"(?<![^\W_])" + r"\s+".join(parts) + r"(?![^\W_])", re.IGNORECASE)


def _occurrences(term: str, text: str) -> int:
    return len(_phrase(term).findall(text))


# -- the checks -----------------------------------------------------------------------------

Run = Callable[[str, Mapping[str, Any]], str | None]
"""A check's function: ``(answer, params) -> None`` when it passes, else the feedback."""

CHECKS: dict[str, CheckSpec] = {}
"""Every check a task file may use, by name (each added by `_check`)."""

_BOUNDED = (frozenset({"min", "max"}),)


def _check(
    name: str,
    params: Mapping[str, ParamKind] | None = None,
    *,
    required: Iterable[str] = (),
    bounded: bool = False,
) -> Callable[[Run], Run]:
    """Add the decorated function to `CHECKS` (``bounded``: with ``min``/``max``)."""
    kinds: dict[str, ParamKind] = dict(params or {})
    if bounded:
        kinds |= {"min": "count", "max": "count"}

    def add(run: Run) -> Run:
        summary = " ".join((run.__doc__ or "").split())
        one_of = _BOUNDED if bounded else ()
        CHECKS[name] = CheckSpec(name, summary, kinds, run, frozenset(required), one_of)
        return run

    return add


def _counting(noun: str, count: Callable[[str], int], hint: str, summary: str) -> Run:
    """A check that the answer's number of ``noun``s is within min/max (``hint`` first)."""

    def run(answer: str, params: Mapping[str, Any]) -> str | None:
        problem = _bounds(params, noun, count(answer))
        return None if problem is None else f"{hint}{problem}"

    run.__doc__ = summary
    return run


for _name, _noun, _count, _hint, _summary in (
    ("word_count", "word", lambda a: len(words(a)), "",
     "The number of words is within min/max."),
    ("sentence_count", "sentence", lambda a: len(sentences(a)), "",
     "The number of sentences is within min/max."),
    ("line_count", "line", lambda a: len(lines(a)), "",
     "The number of non-blank lines is within min/max."),
    ("paragraph_count", "paragraph", lambda a: len(paragraphs(a)), "",
     "The number of paragraphs (separated by blank lines) is within min/max."),
    ("char_count", "character", lambda a: len(a.strip()), "",
     "The number of characters (surrounding whitespace excluded) is within min/max."),
    ("bullet_count", "bullet point", lambda a: len(_BULLET.findall(a)), "",
     "The number of Markdown bullet lines (`- `, `* ` or `• `) is within min/max."),
    ("numbered_count", "numbered item", lambda a: len(_NUMBERED.findall(a)), "",
     "The number of numbered lines (`1.` or `1)`) is within min/max."),
    ("placeholders", "placeholder", lambda a: len(_PLACEHOLDER.findall(a)),
     "Mark placeholders in square brackets, like [name]. ",
     "The number of square-bracket placeholders such as `[name]` is within min/max."),
    ("capital_words", "word", lambda a: sum(1 for w in words(a) if len(w) > 1 and w.isupper()),
     "Count the words written in ALL CAPITALS. ",
     "The number of words in ALL CAPITALS (two letters or more) is within min/max."),
    ("highlights", "highlighted part", lambda a: len(_HIGHLIGHT.findall(a)),
     "Highlight parts with Markdown asterisks, like *this*. ",
     "The number of parts highlighted with asterisks (`*part*` or `**part**`) is within "
     "min/max."),
):  # fmt: skip
    _check(_name, bounded=True)(_counting(_noun, _count, _hint, _summary))


@_check("include_words", {"words": "words"}, required=["words"])
def _include_words(answer: str, params: Mapping[str, Any]) -> str | None:
    """Every word or phrase of `words` appears (whole words, any case)."""
    missing = [w for w in params["words"] if not _occurrences(w, answer)]
    if not missing:
        return None
    return f"Use these words: {_listed(missing)}; the answer lacks them."


@_check("forbidden_words", {"words": "words"}, required=["words"])
def _forbidden_words(answer: str, params: Mapping[str, Any]) -> str | None:
    """No word or phrase of `words` appears (whole words, any case)."""
    used = [w for w in params["words"] if _occurrences(w, answer)]
    if not used:
        return None
    return f"Do not use these words: {_listed(used)}; the answer uses them."


@_check("word_frequency", {"word": "word"}, required=["word"], bounded=True)
def _word_frequency(answer: str, params: Mapping[str, Any]) -> str | None:
    """`word` appears a number of times within min/max (whole word, any case)."""
    word = params["word"]
    problem = _bounds(params, "time", _occurrences(word, answer))
    if problem is None:
        return None
    return f"Use the word {word!r} the right number of times. {problem}"


@_check("starts_with", {"text": "text"}, required=["text"])
def _starts_with(answer: str, params: Mapping[str, Any]) -> str | None:
    """The answer (leading whitespace ignored) starts with `text`, exactly."""
    text = params["text"]
    if answer.strip().startswith(text):
        return None
    return f"Start the answer with exactly {text!r}; it starts with {_opening(answer)!r}."


@_check("ends_with", {"text": "text"}, required=["text"])
def _ends_with(answer: str, params: Mapping[str, Any]) -> str | None:
    """The answer (trailing whitespace ignored) ends with `text`, exactly."""
    text = params["text"]
    if answer.strip().endswith(text):
        return None
    return f"End the answer with exactly {text!r}; it ends with {_closing(answer)!r}."


@_check("json", {"keys": "keys"})
def _json(answer: str, params: Mapping[str, Any]) -> str | None:
    """The whole answer is JSON; with `keys`, an object that has those keys.

    A ```json fence around it is allowed.
    """
    body = answer.strip()
    fenced = _FENCED_JSON.match(body)
    if fenced:
        body = fenced.group("body")
    try:
        value = json.loads(body)
    except ValueError as exc:
        return f"Reply with JSON only (no other text); the answer does not parse as JSON ({exc})."
    keys = params.get("keys")
    if keys:
        if not isinstance(value, dict):
            return (
                f"Reply with one JSON object with the keys {_listed(keys)}; got a JSON "
                f"{type(value).__name__}."
            )
        missing = [k for k in keys if k not in value]
        if missing:
            return f"Give the JSON object the keys {_listed(missing)}; they are missing."
    return None


@_check("case", {"case": "case"}, required=["case"])
def _case(answer: str, params: Mapping[str, Any]) -> str | None:
    """Every letter is lowercase (`"case": "lower"`) or uppercase (`"upper"`)."""
    case = params["case"]
    letters = [c for c in answer if c.isalpha()]
    if case == "lower":
        wrong = [c for c in letters if c != c.lower()]
    else:
        wrong = [c for c in letters if c != c.upper()]
    if letters and not wrong:
        return None
    if not letters:
        return f"Write the answer in {case}case letters; it has no letters."
    return (
        f"Write the whole answer in {case}case letters; {len(wrong)} letters are not "
        f"(e.g. {''.join(wrong[:5])!r})."
    )


@_check("sections", {"prefix": "text", "count": "count"}, required=["prefix", "count"])
def _sections(answer: str, params: Mapping[str, Any]) -> str | None:
    """Exactly `count` sections, numbered 1 to `count` in order.

    Each starts on its own line with `prefix` and its number (e.g. `Part 1`, `Part 2`).
    """
    prefix, count = params["prefix"], params["count"]
    marker = re.compile(rf"^\s*{re.escape(prefix)}\s+(\d+)\b", re.MULTILINE)
    found = [int(m.group(1)) for m in marker.finditer(answer)]
    wanted = list(range(1, count + 1))
    if found == wanted:
        return None
    headings = ", ".join(f"'{prefix} {n}'" for n in wanted)
    seen = ", ".join(f"{prefix} {n}" for n in found) or "none"
    return (
        f"Divide the answer into {_plural(count, 'section')}, each starting on its own line "
        f"with {headings} in order; found: {seen}."
    )


@_check("no_commas")
def _no_commas(answer: str, params: Mapping[str, Any]) -> str | None:
    """The answer has no comma."""
    found = answer.count(",")
    if not found:
        return None
    return f"Do not use any commas; the answer has {found}."


@_check("title")
def _title(answer: str, params: Mapping[str, Any]) -> str | None:
    """The answer has a title in double angle brackets, such as `<<Spring Rain>>`."""
    if _TITLE.search(answer):
        return None
    return "Give the answer a title wrapped in double angle brackets, like <<A Quiet Morning>>."


@_check("quoted")
def _quoted(answer: str, params: Mapping[str, Any]) -> str | None:
    """The whole answer is wrapped in double quotation marks."""
    body = answer.strip()
    if len(body) >= 2 and body.startswith('"') and body.endswith('"'):
        return None
    return 'Wrap the whole answer in double quotation marks: begin with " and end with ".'


@_check("postscript", {"marker": "text"}, required=["marker"])
def _postscript(answer: str, params: Mapping[str, Any]) -> str | None:
    """The last paragraph starts with `marker` (e.g. `P.S.`)."""
    marker = params["marker"]
    blocks = paragraphs(answer)
    if blocks and blocks[-1].startswith(marker):
        return None
    return f"End the answer with a postscript: a last paragraph that starts with {marker!r}."


def _listed(items: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in items)


def _opening(answer: str, size: int = 40) -> str:
    body = answer.strip()
    return body[:size] + ("..." if len(body) > size else "")


def _closing(answer: str, size: int = 40) -> str:
    body = answer.strip()
    return ("..." if len(body) > size else "") + body[-size:]


# -- parsing --------------------------------------------------------------------------------


def _param(name: str, kind: ParamKind, value: object) -> Any:
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckSpecError(name, f"must be a whole number >= 0; got {value!r}")
        return value
    if kind in ("text", "word"):
        if not isinstance(value, str) or not value.strip():
            raise CheckSpecError(name, f"must be a non-empty string; got {value!r}")
        if kind == "word" and not WORD.fullmatch(value.strip()):
            raise CheckSpecError(name, f"must be one word (letters or digits); got {value!r}")
        return value.strip() if kind == "word" else value
    if kind in ("words", "keys"):
        if not isinstance(value, list) or not value:
            raise CheckSpecError(name, f"must be a non-empty list of strings; got {value!r}")
        for index, item in enumerate(value):
            if not isinstance(item, str) or (kind == "words" and not WORD.search(item)):
                wanted = "a word or phrase" if kind == "words" else "a string"
                raise CheckSpecError(f"{name}[{index}]", f"must be {wanted}; got {item!r}")
        return list(value)
    if value not in ("lower", "upper"):
        raise CheckSpecError(name, f'must be "lower" or "upper"; got {value!r}')
    return value


def parse_check(value: object) -> Check:
    """Validate one check as written in a task file and return it.

    Args:
        value: A JSON object such as ``{"check": "bullet_count", "min": 3, "max": 3}``.

    Returns:
        The `Check`.

    Raises:
        CheckSpecError: not an object, an unknown check, an unknown, missing or
            malformed parameter; ``field`` names the offending field.

    Example:
        ```python
        check = parse_check({"check": "include_words", "words": ["river", "stone"]})
        ```
    """
    if not isinstance(value, Mapping):
        raise CheckSpecError(
            "", f'must be an object such as {{"check": "word_count", "max": 50}}; got {value!r:.60}'
        )
    name = value.get("check")
    if not isinstance(name, str) or name not in CHECKS:
        known = ", ".join(sorted(CHECKS))
        raise CheckSpecError("check", f"must name a known check ({known}); got {name!r}")
    spec = CHECKS[name]
    params: dict[str, Any] = {}
    for key, given in value.items():
        if key == "check":
            continue
        if key not in spec.params:
            allowed = ", ".join(spec.params) or "none"
            raise CheckSpecError(
                str(key), f"is not a parameter of {name!r} (its parameters: {allowed})"
            )
        params[str(key)] = _param(str(key), spec.params[str(key)], given)
    for key in sorted(spec.required - set(params)):
        raise CheckSpecError(key, f"is required by {name!r}")
    for group in spec.one_of:
        if not group & set(params):
            raise CheckSpecError("", f"{name!r} needs at least one of {', '.join(sorted(group))}")
    if "min" in params and "max" in params and params["min"] > params["max"]:
        raise CheckSpecError("max", f"is below min ({params['max']} < {params['min']})")
    if name == "sections" and params["count"] < 1:
        raise CheckSpecError("count", "must be at least 1")
    return Check(name, params)


def run_checks(checks: Sequence[Check], answer: str) -> list[CheckResult]:
    """Run every check on ``answer``, in order.

    Example:
        ```python
        results = run_checks([Check.of("no_commas")], "Yes, sir.")
        assert not results[0].passed
        ```
    """
    return [check.run(answer) for check in checks]


def checks_feedback(results: Sequence[CheckResult]) -> str:
    """The feedback for the failed checks: one line each, then what to do.

    Returns ``""`` when every check passed.

    Example:
        ```python
        text = checks_feedback(run_checks(task.checks, answer))
        ```
    """
    failed = [r for r in results if not r.passed]
    if not failed:
        return ""
    head = (
        "The answer breaks 1 requirement:"
        if len(failed) == 1
        else f"The answer breaks {len(failed)} requirements:"
    )
    body = "\n".join(f"- {r.feedback}" for r in failed)
    return f"{head}\n{body}\nReply with the complete revised answer, and nothing else."
