"""Every ``loop-agents`` command and option the docs name exists.

The pages (README.md, BENCHMARKS.md, docs/**/*.md, libs/*/README.md) name commands in code:
inline code spans and fenced blocks. Each ``loop-agents SUBCOMMAND`` there must be a
subcommand of the installed command, each ``--option`` after it on the same line one of that
subcommand's options, and a word where ``eval`` takes its task set a bundled set, a file or
a placeholder. A page that names ``loop-agents eval report`` (which never existed) fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from loop_agents_cli.parser import build_parser
from loop_agents_evals.tasks import BUNDLED_SETS
from tests.conftest import ROOT

PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "BENCHMARKS.md",
        *(ROOT / "libs").glob("*/README.md"),
        *(ROOT / "docs").rglob("*.md"),
    ]
)
CALL = re.compile(r"(?<![\w-])loop-agents[ \t]+(?P<rest>[^`\n]*)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


@dataclass(frozen=True)
class Named:
    where: str
    text: str  # from the subcommand on: "eval code --arms single"


def code_of(text: str) -> list[tuple[int, str]]:
    """The code of a page: its fenced blocks line by line, and its inline code spans (a span
    may wrap to the next line of its paragraph), each with its line number."""
    found: list[tuple[int, str]] = []
    fenced = False
    paragraph: list[tuple[int, str]] = []

    def spans() -> None:
        if paragraph:
            joined = " ".join(line for _, line in paragraph)
            found.extend((paragraph[0][0], span) for span in SPAN.findall(joined))
            paragraph.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            spans()
            fenced = not fenced
        elif fenced:
            found.append((number, line))
        elif line.strip():
            paragraph.append((number, line))
        else:
            spans()
    spans()
    return found


def commands_named(path: Path) -> list[Named]:
    """Each ``loop-agents ...`` of a page's code, from the subcommand on (comments and pipes
    left out)."""
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    named = []
    for number, code in code_of(path.read_text(encoding="utf-8")):
        for match in CALL.finditer(code):
            rest = match["rest"].split("#", 1)[0].split(" | ", 1)[0].strip()
            if rest:
                named.append(Named(f"{label}:{number}", rest))
    return named


def options_of(parser) -> set[str]:
    return set(OPTION.findall(parser.format_help()))


PARSER, COMMANDS = build_parser()
TOP_OPTIONS = options_of(PARSER)


def problems_of(named: Named) -> list[str]:
    words = named.text.split()
    first = words[0]
    if first.startswith("-"):  # `loop-agents --help`
        return [] if first in TOP_OPTIONS else [f"{named.where}: no option {first}"]
    if not re.fullmatch(r"[a-z][a-z-]*", first):
        return []  # a placeholder such as `loop-agents COMMAND`, or prose
    if first not in COMMANDS:
        return [f"{named.where}: `loop-agents {first}` is no subcommand ({', '.join(COMMANDS)})"]
    known = options_of(COMMANDS[first])
    problems = [
        f"{named.where}: `loop-agents {first}` has no option {option}"
        for option in OPTION.findall(named.text)
        if option not in known
    ]
    if first == "eval" and len(words) > 1 and not words[1].startswith("-"):
        task_set = words[1].strip("'\"")
        if not (
            task_set in BUNDLED_SETS
            or "." in task_set
            or "/" in task_set
            or task_set.isupper()
            or task_set.startswith(("$", "<", "["))
        ):
            problems.append(
                f"{named.where}: `loop-agents eval {task_set}`: no bundled set or task file "
                f"of that name ({', '.join(BUNDLED_SETS)}, or a .jsonl file)"
            )
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_and_option_a_page_names_exists(page: Path) -> None:
    problems = [problem for named in commands_named(page) for problem in problems_of(named)]
    assert problems == []


def test_the_pages_name_the_commands_at_all() -> None:
    named = {n.text.split()[0] for page in PAGES for n in commands_named(page)}
    assert {"run", "resume", "runs", "show", "eval", "demo"} <= named


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("`loop-agents eval report`", "no bundled set or task file of that name"),
        ("the runs (`loop-agents eval\nreport` shows them)", "no bundled set or task file"),
        ("`loop-agents evals code`", "is no subcommand"),
        ("`loop-agents run x --rubrik r`", "has no option --rubrik"),
        ("```bash\nloop-agents show ID --jsn\n```", "has no option --jsn"),
    ],
)
def test_a_page_that_names_what_does_not_exist_is_caught(tmp_path: Path, text, problem) -> None:
    page = tmp_path / "page.md"
    page.write_text(text + "\n", encoding="utf-8")
    found = [p for n in commands_named(page) for p in problems_of(n)]
    assert len(found) == 1
    assert problem in found[0]


def test_the_right_names_pass(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "`loop-agents eval code --arms single,loop --limit 5`, `loop-agents eval tasks.jsonl`,\n"
        "`loop-agents eval --from out.json`, `loop-agents run TASK --rubric R --json`\n",
        encoding="utf-8",
    )
    assert [p for n in commands_named(page) for p in problems_of(n)] == []
