"""Self-contained HTML pages: escaping, the page shell, tables, folded sections.

A page needs nothing else: inline style and SVG, no script, and a Content-Security-Policy
that forbids scripts and fetches. Every text goes through `escape` unless it is `Html`.

Example:
    ```python
    Path("page.html").write_text(page("An eval", heading("Results") + table(...)))
    ```
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from loop_agents.runtime.numbers import finite_float


class Html(str):
    """Markup that is safe as it is: built here from escaped text. Plain `str` is text."""

    __slots__ = ()

    def __add__(self, other: str) -> Html:
        return Html(str.__add__(self, escape(other)))

    def __radd__(self, other: str) -> Html:
        return Html(str.__add__(escape(other), self))


def escape(value: object) -> Html:
    """``value`` as HTML text: ``<``, ``>``, ``&`` and both quotes escaped (`Html` kept).

    Example:
        ```python
        assert escape("<img onerror=x>") == "&lt;img onerror=x&gt;"
        ```
    """
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def number_text(value: object, digits: int | None = 1) -> str:
    """A number as a page shows it; ``"—"`` for ``None``; anything else as its text.

    ``digits``: after the point, thousands separated; ``None``: as short as it is.

    Example:
        ```python
        assert number_text(1182.4, 0) == "1,182"
        ```
    """
    number = finite_float(value)
    if number is None:
        return "—" if value is None else str(value)
    return f"{number:g}" if digits is None else f"{number:,.{digits}f}"


def join(parts: Iterable[object], separator: str = "") -> Html:
    """The parts (text escaped, `Html` as is) one after the other."""
    return Html(escape(separator).join(escape(part) for part in parts))


def tag(name: str, content: object = "", /, **attributes: object) -> Html:
    """``<name attr="value">content</name>``; attribute values and text are escaped.

    ``None``/``False`` attributes are left out, ``True`` ones bare; ``class_`` is ``class``.

    Example:
        ```python
        tag("a", "see", href="#p1-2")  # '<a href="#p1-2">see</a>'
        ```
    """
    written = "".join(
        f" {key.rstrip('_').replace('_', '-')}" + ("" if value is True else f'="{escape(value)}"')
        for key, value in attributes.items()
        if value is not None and value is not False
    )
    return Html(f"<{name}{written}>{escape(content)}</{name}>")


def heading(text: object, *, level: int = 2, id: str | None = None) -> Html:
    """A section heading."""
    return tag(f"h{level}", text, id=id)


def preformatted(text: object, *, class_: str | None = None) -> Html:
    """Text shown as it is, in a monospace block that wraps long lines."""
    return tag("pre", text, class_=class_)


def folded(summary: object, content: object, *, id: str | None = None, open: bool = False) -> Html:
    """A ``<details>`` section: ``summary`` always shown, ``content`` on a click."""
    return tag("details", join([tag("summary", summary), content]), id=id, open=open)


def table(
    headers: Sequence[object],
    rows: Iterable[Sequence[object]],
    *,
    numeric: Iterable[int] = (),
    class_: str | None = None,
) -> Html:
    """A table; the columns numbered in ``numeric`` are right-aligned."""
    right = set(numeric)

    def cell(name: str, index: int, value: object) -> Html:
        return tag(name, value, class_="num" if index in right else None)

    head = tag("tr", join(cell("th", i, h) for i, h in enumerate(headers)))
    body = join(tag("tr", join(cell("td", i, v) for i, v in enumerate(row))) for row in rows)
    return tag("table", join([tag("thead", head), tag("tbody", body)]), class_=class_)


def definition_list(items: Mapping[str, object]) -> Html:
    """``key: value`` pairs (a nested mapping becomes a nested list, ``None`` a dash)."""
    parts: list[Html] = []
    for key, value in items.items():
        shown = definition_list(value) if isinstance(value, Mapping) else value
        shown = "—" if shown is None else shown
        parts.append(join([tag("dt", key), tag("dd", shown)]))
    return tag("dl", join(parts))


STYLE = """
:root { color-scheme: light; --ink: #1d2330; --muted: #5b6475; --line: #d9dde5;
  --pass: #1f7a46; --pass-bg: #e3f4ea; --fail: #a3262a; --fail-bg: #fbe6e6;
  --none-bg: #eef0f4; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: #fff; margin: 0; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.2em; margin: 36px 0 10px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 1.02em; margin: 22px 0 6px; }
p, .note { color: var(--muted); margin: 6px 0; }
.lead { color: var(--muted); margin: 0 0 8px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.92em; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left;
  vertical-align: top; }
th { font-weight: 600; background: #f6f7f9; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 18px 28px; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-size: 0.88em; color: var(--muted); max-width: 520px; }
svg.chart { display: block; font: 12px system-ui, -apple-system, "Segoe UI", sans-serif; }
svg.chart text { fill: var(--ink); }
svg.chart .axis { stroke: #9aa3b2; stroke-width: 1; }
svg.chart .grid { stroke: #e7e9ee; stroke-width: 1; }
svg.chart .tick { fill: var(--muted); }
.grid-table td { text-align: center; padding: 2px 6px; }
.grid-table td:first-child { text-align: left; }
.outcome { display: inline-block; min-width: 3.4em; padding: 1px 6px; border-radius: 4px;
  text-decoration: none; font-weight: 600; }
.outcome.pass { background: var(--pass-bg); color: var(--pass); }
.outcome.fail { background: var(--fail-bg); color: var(--fail); }
.outcome.none { background: var(--none-bg); color: var(--muted); }
.badge { display: inline-block; font-size: 0.8em; padding: 0 6px; border-radius: 8px;
  margin-left: 6px; background: var(--none-bg); color: var(--muted); }
.badge.pass { background: var(--pass-bg); color: var(--pass); }
.badge.fail { background: var(--fail-bg); color: var(--fail); }
details { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0;
  padding: 4px 10px; }
details[open] { padding-bottom: 10px; }
details:target { outline: 2px solid #0072b2; }
summary { cursor: pointer; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f7f9;
  border-radius: 4px; padding: 8px 10px; margin: 4px 0; font-size: 0.9em;
  max-height: 28em; overflow-y: auto; }
pre.feedback { background: #fff8e6; }
.attempt { margin: 10px 0 0; }
.attempt-head { font-weight: 600; font-size: 0.92em; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
dd dl { margin: 0; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
  margin-right: 6px; vertical-align: baseline; }
"""

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""No script, no fetch of anything: the page is whole as written."""


def page(title: object, body: object) -> str:
    """A whole HTML document: ``title`` in its head, ``body`` in its ``<main>``.

    Example:
        ```python
        text = page("Run 3f9a2c1b", heading("Scores") + chart)
        ```
    """
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body><main>\n{escape(body)}\n</main></body></html>\n"
    )


PAGE_SUFFIXES = (".html", ".htm")
"""What a page's file name may end in."""


def _same_file(first: Path, second: Path) -> bool:
    return first.expanduser().resolve() == second.expanduser().resolve()


def check_report_path(
    report: Path | None, *, out: Path | None = None, source: Path | None = None
) -> Path | None:
    """Check where the page goes: an ``.html`` file, not a folder, not ``out`` or ``source``.

    Raises `ValueError` saying what to give instead.

    Example:
        ```python
        check_report_path(Path("code.html"), out=Path("code.json"))  # Path('code.html')
        ```
    """
    if report is None:
        return None
    if report.is_dir():
        raise ValueError(
            f"--report {str(report)!r} is a folder; give a file name such as results.html"
        )
    if report.suffix.lower() not in PAGE_SUFFIXES:
        raise ValueError(
            f"--report {str(report)!r}: the report is an HTML page; give a file name ending "
            f"in .html"
        )
    for option, other in (("--out", out), ("--from", source)):
        if other is not None and _same_file(report, other):
            raise ValueError(f"--report and {option} name the same file; give each its own")
    return report
