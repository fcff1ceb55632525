"""The form of the ci pattern 相见欢 (Li Yu's "无言独上西楼"), checked phrase by phrase.

36 characters in two stanzas: phrases of 6, 3 and 9, then 3, 3, 3 and 9; a nine-character
phrase is one breath or breaks after its sixth character. Titles, headings and punctuation
are not counted. `check_xiangjianhuan` aligns the draft's segments with the seven phrases
(edit distance) to say which phrase is missing, too long or short, broken wrongly, run
together or extra (the wording: `loop_agents_cli.demos.form_problems`);
`xiangjianhuan_form` is the checker as an evaluator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.evaluators.base import check_name, make_evaluator
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents_cli.demos.form_problems import (
    PATTERN,
    SLOTS,
    TOTAL,
    FormProblem,
    Language,
    Segment,
    extra_problem,
    foreign_problem,
    good_break,
    is_han,
    merged_problem,
    missing_problem,
    phrase_problem,
    stanza_problem,
)

TUNE_NAMES = (
    "相见欢",
    "相見歡",
    "乌夜啼",
    "烏夜啼",
    "秋夜月",
    "上西楼",
    "上西樓",
    "忆真妃",
    "月上瓜洲",
)
"""The tune's names; a first line that starts with one of them is a title."""

_SHOWN = 12
"""The most problems listed in the feedback (a long answer can have dozens)."""

NEAREST_SCORE = 70
"""The score of a draft with one problem of form (`FormReport.score`)."""

PROBLEM_FACTOR = 0.9
"""What each further problem of form keeps of the score: it takes off a tenth."""

_HEADING = re.compile(r"^\s*(?:[#>]+\s*)?(?:【[^】]*】|《[^》]*》|〈[^〉]*〉|\[[^\]]*\])\s*$")
_STANZA_LABEL = re.compile(
    r"^\s*[（(【\[]?\s*(?:上|下)\s*(?:片|阕|闋|阙)\s*[）)】\]]?\s*[:：]?\s*$"
)
_TITLE_SEPARATORS = "·・•.．-—－ ：:（(【《"
_BREAK = "、，,。.；;：:！!？?"
_MARKUP = re.compile(r"[*_#>`~]+")


def _is_foreign(char: str) -> bool:
    return char.isalnum() and not is_han(char)


@dataclass(frozen=True)
class FormReport:
    """The result of checking a draft against the form of 相见欢.

    Attributes:
        ok: The draft has the form.
        characters: The Chinese characters counted (title, headings, punctuation excluded).
        phrases: The draft's text for each of the seven phrases ("" when missing).
        problems: What is wrong, in reading order.
        layout: The phrase lengths found per stanza (``"4+5"``: a phrase in two parts).
        language: The language of the messages.
    """

    ok: bool
    characters: int
    phrases: tuple[str, ...]
    problems: tuple[FormProblem, ...] = field(default=())
    layout: tuple[tuple[str, ...], ...] = field(default=())
    language: Language = "zh"

    @property
    def score(self) -> float:
        """How near the draft is to the form, 0 to 100 (100 with it).

        Without it `NEAREST_SCORE` for one problem, a tenth less for each further one: always
        below the demo's pass mark.
        """
        if self.ok:
            return 100.0
        if any(p.kind == "empty" for p in self.problems):
            return 0.0
        return round(NEAREST_SCORE * PROBLEM_FACTOR ** (len(self.problems) - 1), 1)

    @property
    def feedback(self) -> str:
        """A summary line, then one line per problem: the text sent to the composer."""
        if self.language == "zh":
            if self.ok:
                return f"《相见欢》格式正确：上片6、3、9字，下片3、3、3、9字，共{TOTAL}字。"
            found = "，".join(
                f"{'上下'[k]}片{'、'.join(lengths)}" for k, lengths in enumerate(self.layout)
            )
            head = (
                f"《相见欢》格式不合：应为上片6、3、9字，下片3、3、3、9字，共{TOTAL}字；"
                f"现为{self.characters}字" + (f"（{found}）。" if found else "。")
            )
        else:
            if self.ok:
                return (
                    f"The 相见欢 form is met: phrases of 6, 3, 9 characters, then 3, 3, 3, 9 "
                    f"({TOTAL} characters)."
                )
            found = "; ".join(
                f"stanza {k + 1}: {', '.join(lengths)}" for k, lengths in enumerate(self.layout)
            )
            head = (
                f"The 相见欢 form is not met: it has phrases of 6, 3, 9 characters, then "
                f"3, 3, 3, 9 ({TOTAL} characters); this draft has {self.characters}"
                + (f" ({found})." if found else ".")
            )
        lines = [head, *(f"- {p.message}" for p in self.problems[:_SHOWN])]
        hidden = len(self.problems) - _SHOWN
        if hidden > 0:
            lines.append(
                f"- ……另有{hidden}处问题。" if self.language == "zh" else f"- ... {hidden} more."
            )
        return "\n".join(lines)


# -- reading the draft -----------------------------------------------------------------


def _strip_markup(line: str) -> str:
    return _MARKUP.sub("", line).strip()


def _is_title(line: str, next_blank: bool) -> bool:
    if not any(is_han(c) for c in line):
        return True  # a Latin-letter title (or a line of symbols)
    for tune in TUNE_NAMES:
        if line.startswith(tune):
            rest = line[len(tune) :]
            if not rest or rest[0] in _TITLE_SEPARATORS:
                return True
    if "相见欢" in line and not any(c in _BREAK for c in line):
        return True
    han = sum(1 for c in line if is_han(c))
    return next_blank and han <= 10 and not any(c in _BREAK or c.isspace() for c in line)


def body_lines(text: str) -> list[tuple[int, str]]:
    """The draft's lines of verse with their block numbers: no title, no headings."""
    lines = [_strip_markup(line) for line in text.splitlines()]
    kept: list[tuple[int, str]] = []
    block, seen_verse, blank_before = 0, False, False
    for index, line in enumerate(lines):
        if not line:
            blank_before = True
            continue
        if _HEADING.match(line) or _STANZA_LABEL.match(line):
            if seen_verse:
                blank_before = True  # a heading inside the poem separates stanzas
            continue
        next_blank = index + 1 >= len(lines) or not lines[index + 1]
        if not seen_verse and _is_title(line, next_blank):
            continue
        if seen_verse and blank_before:
            block += 1
        kept.append((block, line))
        seen_verse, blank_before = True, False
    return kept


def segments_of(lines: Sequence[tuple[int, str]]) -> list[Segment]:
    """Split verse lines at every break into segments of Chinese characters."""
    found: list[Segment] = []
    for block, line in lines:
        current: list[str] = []
        for char in [*line, "\n"]:
            if is_han(char):
                current.append(char)
            elif _is_foreign(char):
                continue  # reported separately; not counted
            elif current:
                found.append(Segment("".join(current), block))
                current = []
    return found


def _foreign_runs(lines: Sequence[tuple[int, str]]) -> list[str]:
    """Runs of letters or digits that are not Chinese (words joined by spaces kept)."""
    runs: list[str] = []
    for _, line in lines:
        current = ""
        for char in [*line, "\n"]:
            if _is_foreign(char) or (current and char in " '-"):
                current += char
                continue
            if current.strip(" '-"):
                runs.append(current.strip(" '-"))
            current = ""
    return runs


# -- aligning segments with the pattern ----------------------------------------------------

_Step = tuple[str, int, int]  # (operation, segments used, phrases used)


def _align(lengths: Sequence[int]) -> list[_Step]:
    """The cheapest alignment of segment lengths with the pattern's phrases."""
    slots = [length for _, _, length in SLOTS]
    n, m = len(lengths), len(slots)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int, _Step] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0

    def relax(i: int, j: int, ni: int, nj: int, price: float, step: _Step) -> None:
        if ni <= n and nj <= m and cost[i][j] + price < cost[ni][nj]:
            cost[ni][nj] = cost[i][j] + price
            back[ni][nj] = (i, j, step)

    for i in range(n + 1):
        for j in range(m + 1):
            if cost[i][j] == inf:
                continue
            if i < n and j < m:
                for k in (1, 2, 3):  # one phrase written as k segments
                    if i + k > n:
                        break
                    parts = lengths[i : i + k]
                    price = (sum(parts) != slots[j]) + (k > 1 and not good_break(parts, slots[j]))
                    relax(i, j, i + k, j + 1, price + 0.01 * (k - 1), ("phrase", k, 1))
                for k in (2, 3):  # k phrases run together in one segment
                    if j + k <= m:
                        price = 1 + (lengths[i] != sum(slots[j : j + k]))
                        relax(i, j, i + 1, j + k, price, ("merged", 1, k))
            if i < n:
                # an extra segment is placed as late as it can be (drafts grow at the end)
                relax(i, j, i + 1, j, 1.0 + 0.001 * (n - i), ("extra", 1, 0))
            if j < m:
                relax(i, j, i, j + 1, 1.0, ("missing", 0, 1))
    steps: list[_Step] = []
    i, j = n, m
    while (i, j) != (0, 0):
        entry = back[i][j]
        assert entry is not None  # every cell but (0, 0) that is reached has a way back
        i, j, step = entry
        steps.append(step)
    return steps[::-1]


def check_xiangjianhuan(text: str, *, language: Language = "zh") -> FormReport:
    """Check a draft against the form of 相见欢; say which phrase is wrong and how.

    ``language`` is that of the messages: ``"zh"`` (default) or ``"en"``.

    Example:
        ```python
        report = check_xiangjianhuan("无言独上西楼，月如钩。寂寞梧桐深院锁清秋。"
                                     "剪不断，理还乱，是离愁。别是一般滋味在心头。")
        assert report.ok and report.characters == 36
        ```
    """
    if language not in ("zh", "en"):
        raise ValueError(f"language must be 'zh' or 'en'; got {language!r}")
    lines = body_lines(text)
    segments = segments_of(lines)
    if not segments:
        message = "没有找到词的正文。" if language == "zh" else "No verse found in the answer."
        return FormReport(
            False,
            0,
            ("",) * len(SLOTS),
            (FormProblem("empty", None, "", message),),
            language=language,
        )
    phrases, problems, layout, second_stanza = _follow(segments, language)
    problems.extend(stanza_problem(segments, second_stanza, language))
    problems.extend(foreign_problem(run, language) for run in _foreign_runs(lines))
    return FormReport(
        ok=not problems,
        characters=sum(len(s.text) for s in segments),
        phrases=tuple(phrases),
        problems=tuple(problems),
        layout=tuple(tuple(stanza) for stanza in layout),
        language=language,
    )


def _follow(
    segments: Sequence[Segment], language: Language
) -> tuple[list[str], list[FormProblem], list[list[str]], int | None]:
    """Walk the best alignment of ``segments`` with the pattern.

    Returns the draft's seven phrases, the problems, the layout found per stanza, and
    the index of the first segment of phrase 4 or later (where the second stanza starts).
    """
    phrases = [""] * len(SLOTS)
    problems: list[FormProblem] = []
    layout: list[list[str]] = [[] for _ in PATTERN]
    second_stanza: int | None = None
    i = j = 0
    for op, used, count in _align([len(s.text) for s in segments]):
        parts = segments[i : i + used]
        if op in ("phrase", "merged") and j + count > len(PATTERN[0]) and second_stanza is None:
            second_stanza = i
        problem: FormProblem | None
        if op == "missing":
            problem = missing_problem(j + 1, segments[i - 1].text if i else "", language)
        elif op == "extra":
            problem = extra_problem(parts, j, language)
        elif op == "merged":
            problem = merged_problem(parts[0], j + 1, count, language)
        else:
            problem = phrase_problem(parts, j + 1, language)
        if problem is not None:
            problems.append(problem)
        if op != "missing":
            stanza = SLOTS[max(j - (op == "extra"), 0)][0]
            layout[stanza - 1].append("+".join(str(len(s.text)) for s in parts))
            if op != "extra":
                phrases[j] = "".join(s.text for s in parts)
        i, j = i + used, j + count
    return phrases, problems, layout, second_stanza


FORM_CRITERIA: dict[Language, str] = {
    "zh": (
        "词牌《相见欢》的格律：全词 36 字，分两片。上片三句，依次 6、3、9 字；下片四句，"
        "依次 3、3、3、9 字。九字句一气读下，或在第六字后断开（6+3）。标点与标题不计字数。"
    ),
    "en": (
        "The form of the ci pattern 相见欢: 36 characters in two stanzas. First stanza: "
        "phrases of 6, 3 and 9 characters; second stanza: 3, 3, 3 and 9. A nine-character "
        "phrase is read in one breath or breaks after its sixth character (6+3). "
        "Punctuation and a title are not counted."
    ),
}
"""What `xiangjianhuan_form` checks, as its ``criteria``, by feedback language."""


def xiangjianhuan_form(
    *, language: Language = "zh", name: str = "xiangjianhuan_form"
) -> Runnable[LoopContext, LoopEvaluation]:
    """An evaluator that checks the answer has the form of 相见欢 (no model call).

    A draft with the form passes (``stop=True``); else the composer is told what is wrong.
    The score is `FormReport.score`, so ``AnswerSelection("best")`` picks the nearest draft.

    Example:
        ```python
        evaluator = all_of(xiangjianhuan_form(), llm_judge(model, rubric, threshold=75))
        ```
    """
    if language not in ("zh", "en"):
        raise ValueError(f"language must be 'zh' or 'en'; got {language!r}")
    label = check_name(name, "xiangjianhuan_form")

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        report = check_xiangjianhuan(context["last_response"].text, language=language)
        return {"stop": report.ok, "feedback": report.feedback, "score": report.score}

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return evaluate(context, config)

    return make_evaluator(label, evaluate, aevaluate, criteria=FORM_CRITERIA[language])
