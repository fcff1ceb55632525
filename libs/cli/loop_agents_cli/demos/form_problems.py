"""The form of 相见欢 as data (`PATTERN`), and how each problem is worded (``zh`` or ``en``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Language = Literal["zh", "en"]
ProblemKind = Literal["length", "break", "missing", "extra", "merged", "stanza", "foreign", "empty"]

PATTERN: tuple[tuple[int, ...], ...] = ((6, 3, 9), (3, 3, 3, 9))
"""Phrase lengths of 相见欢, per stanza."""

SLOTS: tuple[tuple[int, int, int], ...] = tuple(
    (stanza, position, length)
    for stanza, lengths in enumerate(PATTERN, 1)
    for position, length in enumerate(lengths, 1)
)
"""The seven phrases as ``(stanza, position in the stanza, length)``."""

TOTAL = sum(sum(lengths) for lengths in PATTERN)
"""The characters of the whole ci: 36."""


def is_han(char: str) -> bool:
    """Tell whether ``char`` is a Chinese character (what the form counts)."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x3134F
        or char == "〇"
    )


@dataclass(frozen=True)
class Segment:
    """A stretch of the draft between two breaks: its Chinese characters, and its block."""

    text: str
    block: int


@dataclass(frozen=True)
class FormProblem:
    """One thing wrong with a draft's form.

    ``kind`` is ``length``, ``break`` (broken in the wrong place), ``missing``, ``extra``,
    ``merged`` (two phrases without a break), ``stanza``, ``foreign`` or ``empty``; ``phrase``
    the pattern's phrase (1-7) or ``None``; ``text`` the draft's text; ``message`` the fix.
    """

    kind: ProblemKind
    phrase: int | None
    text: str
    message: str


def good_break(parts: Sequence[int], length: int) -> bool:
    """A phrase written in several parts is fine only as a 9 broken after its 6th."""
    return length == 9 and len(parts) == 2 and parts[0] == 6


def _where(phrase: int, language: Language) -> str:
    stanza, position, length = SLOTS[phrase - 1]
    if language == "zh":
        return f"第{phrase}句（{'上下'[stanza - 1]}片第{position}句，应为{length}字）"
    return f"Phrase {phrase} (stanza {stanza}, phrase {position}; {length} characters)"


def _quote(text: str, language: Language) -> str:
    return f"“{text}”" if language == "zh" else f'"{text}"'


def _break_advice(length: int, language: Language) -> str:
    if language == "zh":
        if length == 9:
            return "九字句应一气读下，或在第6字后断开（6+3），如“笑把青丝低绾、倚层楼”"
        return f"{length}字句中间不应断开"
    if length == 9:
        return (
            "a nine-character phrase reads as one line or breaks after its 6th character "
            '(6+3), as in "笑把青丝低绾、倚层楼"'
        )
    return f"a {length}-character phrase has no break"


def missing_problem(phrase: int, after: str, language: Language) -> FormProblem:
    """Phrase ``phrase`` is missing; it belongs after the text ``after``."""
    if language == "zh":
        where = f"应在{_quote(after, language)}之后" if after else "应在词首"
        return FormProblem("missing", phrase, "", f"{_where(phrase, language)}缺失，{where}。")
    where = f"after {_quote(after, language)}" if after else "at the start"
    return FormProblem(
        "missing", phrase, "", f"{_where(phrase, language)} is missing; it belongs {where}."
    )


def extra_problem(parts: Sequence[Segment], before: int, language: Language) -> FormProblem:
    """``parts`` are extra, found after phrase ``before``."""
    text = "，".join(s.text for s in parts)
    total = sum(len(s.text) for s in parts)
    if language == "zh":
        message = (
            f"多出一句{_quote(text, language)}（{total}字）：词谱中没有这一句，"
            f"请删去或并入相邻的句子。"
        )
    else:
        message = (
            f"{_quote(text, language)} ({total} characters) is extra: the pattern has no "
            f"phrase for it; remove it or work it into a neighbouring phrase."
        )
    return FormProblem("extra", before or None, text, message)


def merged_problem(segment: Segment, phrase: int, count: int, language: Language) -> FormProblem:
    """``count`` phrases from ``phrase`` on are written as one ``segment``."""
    sizes = [length for _, _, length in SLOTS[phrase - 1 : phrase - 1 + count]]
    numbers = [str(phrase + k) for k in range(count)]
    total, expected = len(segment.text), sum(sizes)
    quoted = _quote(segment.text, language)
    if language == "zh":
        plan = "、".join(map(str, sizes))
        fix = (
            f"应按{plan}字断开"
            if total == expected
            else f"这几句共应{expected}字，现为{total}字，应按{plan}字重写"
        )
        message = f"第{'、'.join(numbers)}句连成一句，没有断开：{quoted}，{fix}。"
    else:
        plan = ", ".join(map(str, sizes))
        fix = (
            f"break it as {plan} characters"
            if total == expected
            else f"together they have {expected} characters, not {total}; rewrite them as {plan}"
        )
        message = f"Phrases {', '.join(numbers)} run together without a break: {quoted}; {fix}."
    return FormProblem("merged", phrase, segment.text, message)


def phrase_problem(parts: Sequence[Segment], phrase: int, language: Language) -> FormProblem | None:
    """The problem of a phrase written as ``parts``, or ``None`` when it is right."""
    length = SLOTS[phrase - 1][2]
    lengths = [len(s.text) for s in parts]
    total, split = sum(lengths), "+".join(map(str, lengths))
    bad_break = len(parts) > 1 and not good_break(lengths, length)
    text = "，".join(s.text for s in parts)
    quoted, where = _quote(text, language), _where(phrase, language)
    zh = language == "zh"
    if total == length and not bad_break:
        return None
    if total == length:
        if zh:
            message = (
                f"{where}断在第{lengths[0]}字后（{split}）：{quoted}。"
                f"{_break_advice(length, language)}。"
            )
        else:
            message = (
                f"{where} breaks after its {_ordinal(lengths[0])} character ({split}): "
                f"{quoted}; {_break_advice(length, language)}."
            )
        return FormProblem("break", phrase, text, message)
    diff = total - length
    shown = str(total) if len(parts) == 1 else f"{split}={total}"
    if zh:
        more = f"多{diff}字" if diff > 0 else f"少{-diff}字"
        message = f"{where}现为{shown}字（{more}）：{quoted}。"
        if bad_break:
            message += f"{_break_advice(length, language)}。"
    else:
        more = f"{diff} too many" if diff > 0 else f"{-diff} too few"
        message = f"{where} has {shown} characters ({more}): {quoted}."
        if bad_break:
            message += f" Also, {_break_advice(length, language)}."
    return FormProblem("length", phrase, text, message)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def stanza_problem(
    segments: Sequence[Segment], second_starts: int | None, language: Language
) -> list[FormProblem]:
    """A problem when the draft has two blocks but they do not split after phrase 3."""
    blocks = sorted({s.block for s in segments})
    if len(blocks) != 2 or second_starts is None:
        return []
    first_block_end = max(k for k, s in enumerate(segments) if s.block == blocks[0]) + 1
    if first_block_end == second_starts:
        return []
    last = segments[first_block_end - 1].text
    if language == "zh":
        message = (
            f"分片位置不对：上片应在第3句（九字句）后结束，现在结束于{_quote(last, language)}。"
        )
    else:
        message = (
            f"The stanza break is misplaced: the first stanza ends after phrase 3 (the "
            f"nine-character phrase), but here it ends at {_quote(last, language)}."
        )
    return [FormProblem("stanza", None, last, message)]


def foreign_problem(run: str, language: Language) -> FormProblem:
    """Letters or digits that are not Chinese in the verse."""
    if language == "zh":
        message = f"词中有非汉字{_quote(run, language)}：词只用汉字写成，请删去或改写。"
    else:
        message = (
            f"{_quote(run, language)} is not Chinese: a ci is written in Chinese "
            f"characters only; remove or rewrite it."
        )
    return FormProblem("foreign", None, run, message)
