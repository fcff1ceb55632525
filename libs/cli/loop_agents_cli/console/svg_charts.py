"""Small charts as inline SVG: bars with intervals, a scatter with its frontier, lines.

Each returns one ``<svg class="chart">`` as `Html`, every label escaped; the marks carry
classes (``bar``, ``interval``, ``point``, ``frontier``, ``line``, ``marker``,
``reference``).

Example:
    ```python
    svg = interval_bars([Bar("loop", 0.79, 0.63, 0.90, "#0072b2", "27/34")])
    ```
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loop_agents_cli.console.html_page import Html, escape, join

PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f7f7f")
"""Okabe and Ito's colours, told apart with every common colour blindness."""

Format = Callable[[float], str]

_CHAR = 6.8  # the width of one character of the 12 px labels, roughly
_PLOT_MARGIN = (12, 16, 44, 52)  # top, right, bottom, left


def percent(value: float) -> str:
    """``0.794`` -> ``79%`` (a share too large to be one, ``1e+20``, as the number it is)."""
    if not abs(value) < 1e13:
        return f"{value:.3g} (not a share)"
    return f"{100 * value:.0f}%"


def _number(value: float) -> str:
    if abs(value) >= 1e15:  # 1e+300, not three hundred digits
        return f"{value:.3g}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"


def _f(value: float) -> str:
    """A coordinate, short."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


SCALE_LIMIT = 1e300
"""The largest magnitude a chart's scale reaches: values beyond it (any float up to 1.8e308
can come from a file) are drawn at its edge, and the arithmetic of the ticks stays finite."""

_SMALLEST_STEP = 1e-300


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values from ``low`` to at least ``high`` (1, 2 or 5 times a power of 10).

    Bounds beyond ``±SCALE_LIMIT`` are taken at it; `ValueError` for ``inf`` or ``nan``.

    Example:
        ```python
        assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
        ```
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"a chart's scale needs finite bounds; got {low!r} to {high!r}")
    low = min(max(low, -SCALE_LIMIT), SCALE_LIMIT)
    high = min(max(high, -SCALE_LIMIT), SCALE_LIMIT)
    if not high > low:
        high = low + max(1.0, abs(low))
    raw = max((high - low) / max(count, 1), _SMALLEST_STEP)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    digits = 10 - math.floor(math.log10(step))  # drops the float noise of 3 * 0.2
    ticks: list[float] = []
    for index in range(4 * max(count, 1) + 4):  # a bound, whatever the floats do
        value = float(start + index * step)
        ticks.append(round(value, digits))
        if index and value >= high - step * 1e-9:
            break
    return ticks


def _drawable(*values: float | None) -> bool:
    """Whether every value is a finite number (``None``, ``inf`` and ``nan`` are not)."""
    return all(v is not None and math.isfinite(v) for v in values)


def _svg(width: float, height: float, label: str, content: Html) -> Html:
    return Html(
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{_f(width)}" '
        f'height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>{content}</svg>'
    )


def _text(x: float, y: float, text: object, *, anchor: str = "start", cls: str = "") -> Html:
    css = f' class="{cls}"' if cls else ""
    return Html(f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{css}>{escape(text)}</text>')


def _line(x1: float, y1: float, x2: float, y2: float, cls: str, extra: str = "") -> Html:
    return Html(
        f'<line class="{cls}" x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}"{extra}/>'
    )


# -- bars with intervals -------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One bar: a rate from 0 to 1, with its interval and a note written beside it."""

    label: str
    value: float
    low: float | None
    high: float | None
    color: str
    note: str = ""


def interval_bars(bars: Sequence[Bar], *, title: str = "Pass rate", width: int = 720) -> Html:
    """Horizontal bars on a 0-100% scale, each with its interval as a whisker.

    Example:
        ```python
        svg = interval_bars([Bar("single", 0.5, 0.34, 0.66, PALETTE[0], "17/34")])
        ```
    """
    label_width = min(170.0, max((len(b.label) for b in bars), default=4) * _CHAR + 16)
    note_width = min(240.0, max((len(b.note) for b in bars), default=0) * _CHAR + 16)
    left, right, top, row = label_width, width - note_width, 8.0, 30.0
    height = top + row * len(bars) + 30
    span = right - left

    def x(value: float) -> float:
        return left + span * min(max(value, 0.0), 1.0)

    parts: list[Html] = []
    for tick in nice_ticks(0.0, 1.0):
        parts.append(_line(x(tick), top, x(tick), top + row * len(bars), "grid"))
        parts.append(_text(x(tick), height - 12, percent(tick), anchor="middle", cls="tick"))
    for index, bar in enumerate(bars):
        middle = top + row * index + row / 2
        parts.append(_text(left - 8, middle + 4, bar.label, anchor="end"))
        parts.append(
            Html(
                f'<rect class="bar" x="{_f(left)}" y="{_f(middle - 9)}" '
                f'width="{_f(x(bar.value) - left)}" height="18" rx="2" '
                f'fill="{escape(bar.color)}" fill-opacity="0.85"/>'
            )
        )
        if bar.low is not None and bar.high is not None:
            low, high = x(bar.low), x(bar.high)
            parts.append(
                Html(
                    f'<g class="interval" stroke="#1d2330" stroke-width="1.5">'
                    f"{_line(low, middle, high, middle, 'whisker')}"
                    f"{_line(low, middle - 6, low, middle + 6, 'cap')}"
                    f"{_line(high, middle - 6, high, middle + 6, 'cap')}</g>"
                )
            )
        parts.append(_text(right + 10, middle + 4, bar.note))
    parts.append(_line(left, top, left, top + row * len(bars), "axis"))
    return _svg(width, height, title, join(parts))


# -- a scatter with its frontier ---------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One labelled point, with an optional vertical interval."""

    label: str
    x: float
    y: float
    color: str
    low: float | None = None
    high: float | None = None


def frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats: none is as cheap (x) and better (y).

    Example:
        ```python
        frontier([Point("a", 1, 0.5, c), Point("b", 2, 0.4, c), Point("c", 3, 0.8, c)])  # a, c
        ```
    """
    best: list[Point] = []
    for point in sorted(points, key=lambda p: (p.x, -p.y)):
        if not best or point.y > best[-1].y:
            best.append(point)
    return best


def _frame(
    width: float,
    height: float,
    x_ticks: Sequence[float],
    y_ticks: Sequence[float],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    labels: tuple[str, str],
    formats: tuple[Format, Format],
) -> list[Html]:
    top, right, bottom, left = _PLOT_MARGIN
    parts: list[Html] = []
    for tick in y_ticks:
        parts.append(_line(left, y_of(tick), width - right, y_of(tick), "grid"))
        parts.append(_text(left - 6, y_of(tick) + 4, formats[1](tick), anchor="end", cls="tick"))
    for tick in x_ticks:
        parts.append(_line(x_of(tick), height - bottom, x_of(tick), height - bottom + 4, "axis"))
        parts.append(
            _text(x_of(tick), height - bottom + 16, formats[0](tick), anchor="middle", cls="tick")
        )
    parts.append(_line(left, height - bottom, width - right, height - bottom, "axis"))
    parts.append(_line(left, top, left, height - bottom, "axis"))
    parts.append(_text((left + width - right) / 2, height - 8, labels[0], anchor="middle"))
    parts.append(
        Html(
            f'<text x="12" y="{_f((top + height - bottom) / 2)}" text-anchor="middle" '
            f'transform="rotate(-90 12 {_f((top + height - bottom) / 2)})">'
            f"{escape(labels[1])}</text>"
        )
    )
    return parts


def scatter(
    points: Sequence[Point],
    *,
    title: str,
    x_label: str,
    y_label: str = "pass rate",
    width: int = 520,
    height: int = 300,
    x_format: Format = _number,
    y_format: Format = percent,
    y_range: tuple[float, float] = (0.0, 1.0),
) -> Html:
    """Points (x: a cost, y: a rate with its interval) and the frontier through the best.

    Example:
        ```python
        svg = scatter([Point("loop", 1.8, 0.79, PALETTE[1], 0.63, 0.9)], title="calls",
                      x_label="model calls per task")
        ```
    """
    top, right, bottom, left = _PLOT_MARGIN
    points = [p for p in points if _drawable(p.x, p.y)]
    widest = min(max((p.x for p in points), default=1.0), SCALE_LIMIT)
    x_ticks = nice_ticks(0.0, widest * 1.08 or 1.0)
    y_ticks = nice_ticks(*y_range)
    x_max, (y_low, y_high) = x_ticks[-1], (y_ticks[0], y_ticks[-1])

    def x_of(value: float) -> float:
        return left + (width - left - right) * min(max(value, 0.0), x_max) / x_max

    def y_of(value: float) -> float:
        share = (value - y_low) / (y_high - y_low)
        return height - bottom - (height - top - bottom) * min(max(share, 0.0), 1.0)

    parts = _frame(
        width, height, x_ticks, y_ticks, x_of, y_of, (x_label, y_label), (x_format, y_format)
    )
    best = frontier(points)
    if len(best) > 1:
        path = " ".join(f"{_f(x_of(p.x))},{_f(y_of(p.y))}" for p in best)
        parts.append(
            Html(
                f'<polyline class="frontier" points="{path}" fill="none" stroke="#5b6475" '
                f'stroke-width="1.5" stroke-dasharray="5 4"/>'
            )
        )
    taken: list[tuple[float, float]] = []
    for point in sorted(points, key=lambda p: -p.y):
        px, py = x_of(point.x), y_of(point.y)
        if point.low is not None and point.high is not None and _drawable(point.low, point.high):
            parts.append(
                _line(
                    px,
                    y_of(point.low),
                    px,
                    y_of(point.high),
                    "interval",
                    f' stroke="{escape(point.color)}" stroke-width="2" stroke-opacity="0.6"',
                )
            )
        parts.append(
            Html(
                f'<circle class="point" cx="{_f(px)}" cy="{_f(py)}" r="6" '
                f'fill="{escape(point.color)}" stroke="#fff" stroke-width="1.5"/>'
            )
        )
        anchor, lx = ("end", px - 10) if px > width - right - 90 else ("start", px + 10)
        ly = py - 8 if py - 8 > top + 10 else py + 18  # under the point at the top edge
        while any(abs(ly - y) < 14 and abs(lx - x) < 90 for x, y in taken):
            ly += 14
        taken.append((lx, ly))
        parts.append(_text(lx, ly, point.label, anchor=anchor))
    return _svg(width, height, title, join(parts))


# -- lines ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One line: a value (or ``None``, no value) at x = 1, 2, ..."""

    label: str
    color: str
    values: Sequence[float | None]


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    y_format: Format = _number,
    reference: tuple[float, str] | None = None,
    width: int = 520,
    height: int = 300,
) -> Html:
    """Lines over the steps 1..n, with a marker per value and a legend under them.

    A series of one value among longer ones is drawn as a dotted level. ``y_range`` defaults
    to the values' (0 included); ``reference`` is a dashed line at a value, with its label.

    Example:
        ```python
        svg = line_chart([Series("loop", PALETTE[1], [0.5, 0.7])], title="by attempt",
                         x_label="answers", y_label="pass rate", y_format=percent)
        ```
    """
    legend_rows = math.ceil(len(series) / 4) if len(series) > 1 else 0
    plot_height = height - 18 * legend_rows
    top, right, bottom, left = _PLOT_MARGIN
    steps = max((len(s.values) for s in series), default=1) or 1
    series = [
        Series(s.label, s.color, [v if _drawable(v) else None for v in s.values]) for s in series
    ]
    values = [v for s in series for v in s.values if v is not None]
    if reference is not None and not _drawable(reference[0]):
        reference = None
    if reference is not None:
        values.append(reference[0])
    if y_range is None:
        low, high = min([0.0, *values]), max([1.0, *values])
        y_range = (low, high)
    y_ticks = nice_ticks(*y_range)
    y_low, y_high = y_ticks[0], y_ticks[-1]
    inner = width - left - right

    def x_of(step: float) -> float:
        return left + inner * ((step - 0.5) / steps)

    def y_of(value: float) -> float:
        share = (value - y_low) / (y_high - y_low)
        return plot_height - bottom - (plot_height - top - bottom) * min(max(share, 0.0), 1.0)

    x_ticks = [float(step) for step in range(1, steps + 1)]
    parts = _frame(
        width,
        plot_height,
        x_ticks,
        y_ticks,
        x_of,
        y_of,
        (x_label, y_label),
        (lambda v: f"{v:.0f}", y_format),
    )
    if reference is not None:
        ry = y_of(reference[0])
        parts.append(
            _line(
                left, ry, width - right, ry, "reference", ' stroke="#a3262a" stroke-dasharray="6 4"'
            )
        )
        parts.append(_text(width - right - 4, ry - 5, reference[1], anchor="end"))
    for line in series:
        points = [(x_of(i + 1), y_of(v)) for i, v in enumerate(line.values) if v is not None]
        color = escape(line.color)
        if len(line.values) == 1 and points and steps > 1:  # one step: a level to compare with
            parts.append(
                _line(
                    points[0][0], points[0][1], x_of(steps), points[0][1], "line level",
                    f' stroke="{color}" stroke-width="2" stroke-dasharray="2 4"',
                )
            )  # fmt: skip
        if len(points) > 1:
            path = " ".join(f"{_f(px)},{_f(py)}" for px, py in points)
            parts.append(
                Html(
                    f'<polyline class="line" points="{path}" fill="none" stroke="{color}" '
                    f'stroke-width="2.5"/>'
                )
            )
        for px, py in points:
            parts.append(
                Html(
                    f'<circle class="marker" cx="{_f(px)}" cy="{_f(py)}" r="4.5" fill="{color}" '
                    f'stroke="#fff" stroke-width="1.2"/>'
                )
            )
    for index, line in enumerate(series if legend_rows else ()):
        lx = left + (index % 4) * (inner / 4)
        ly = plot_height + 2 + 18 * (index // 4)
        parts.append(
            Html(
                f'<rect x="{_f(lx)}" y="{_f(ly)}" width="12" height="12" rx="2" '
                f'fill="{escape(line.color)}"/>'
            )
        )
        parts.append(_text(lx + 17, ly + 10, line.label))
    return _svg(width, height, title, join(parts))
