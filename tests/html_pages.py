"""Reading the HTML pages the reports write: their elements, their text, their SVG charts,
and a PNG screenshot's pixels (for the headless-browser tests)."""

from __future__ import annotations

import re
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

SVG = "{http://www.w3.org/2000/svg}"


class Page(HTMLParser):
    """Every element (name, attributes) and the text of a page, as a browser parses it."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.chunks: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def tags(self) -> set[str]:
        return {name for name, _ in self.elements}

    def ids(self) -> set[str]:
        return {attrs["id"] for _, attrs in self.elements if attrs.get("id")}

    def links(self) -> list[str]:
        return [attrs["href"] or "" for name, attrs in self.elements if name == "a"]


def charts(text: str) -> list[ElementTree.Element]:
    """Every inline ``<svg>`` of the page, parsed as XML (so each must be well formed)."""
    return [ElementTree.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", text, re.DOTALL)]


def marks(chart: ElementTree.Element, kind: str) -> list[ElementTree.Element]:
    """The chart's marks of one class (``bar``, ``point``, ``line``, ``marker``, ...)."""
    return [e for e in chart.iter() if kind in (e.get("class") or "").split()]


def title(chart: ElementTree.Element) -> str:
    found = chart.find(f"{SVG}title")
    return found.text or "" if found is not None else ""


def png_pixels(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks, header = 8, [], b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, interlace) == (8, 0), (depth, interlace)
    assert color in (2, 6), color  # RGB or RGBA
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    offset = 0
    for _ in range(height):
        kind, line = raw[offset], bytearray(raw[offset + 1 : offset + 1 + stride])
        offset += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        rows.append(line)
        previous = line
    pixels = [(row[i], row[i + 1], row[i + 2]) for row in rows for i in range(0, stride, channels)]
    return width, height, pixels
