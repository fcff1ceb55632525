"""The examples' page lists every example program that has a page."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_the_examples_index_links_every_example_page():
    folder = ROOT / "docs" / "examples"
    index = (folder / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z_]+\.md)\)", index))
    pages = {p.name for p in folder.glob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/examples/index.md leaves out {sorted(pages - linked)}"
