"""The documentation site opened as files, as the README says (``site/index.html``).

A browser opening a page from the file system shows a folder listing for a link to a
folder (``concepts/``): every link between pages must name its ``.html`` file, and the file
must exist. Builds the site with ``mkdocs build --strict`` (as ``make docs`` does) into a
temporary folder: slow.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import pytest

from tests.conftest import ROOT

BUILD_LIMIT = 1800
"""Seconds after which the build is taken to hang (it takes about a minute)."""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)


@pytest.mark.slow
def test_every_link_of_the_site_opened_as_files_names_a_file(tmp_path):
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_LIMIT, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert site / "index.html" in pages
    checked = 0
    for page in pages:
        if page.name == "404.html":
            continue  # a web server's page for a missing one: never opened as a file
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("#", "data:", "mailto:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            assert not parts.path.endswith("/"), f"{page.relative_to(site)}: {link} is a folder"
            assert target.is_file(), f"{page.relative_to(site)}: {link} names no file"
            checked += 1
    assert checked > 100
    index = (site / "index.html").read_text(encoding="utf-8")
    assert re.search(r'href="concepts\.html"', index)  # a page, as a file
