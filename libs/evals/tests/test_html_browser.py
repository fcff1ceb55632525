"""The report pages in a real browser: headless Chromium draws the eval's page and a run's
page (a screenshot that is not blank, the charts' colours in it), and parses a page full
of hostile text into a DOM without a single element of it.

Chromium is the Debian package ``chromium`` (scripts/install-test-servers.sh installs it);
where it is missing these tests are skipped, except on CI, where they must run. They are
marked ``browser``: ``make test BROWSER_TESTS=no`` (``pytest -m "not browser"``) leaves
them out and does not install Chromium.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from loop_agents_cli.console.run_page import run_page
from loop_agents_evals.html_report import ARM_COLORS, eval_page
from loop_agents_evals.tasks import load_tasks
from tests.conftest import ROOT
from tests.html_pages import Page, png_pixels

pytestmark = [pytest.mark.slow, pytest.mark.browser]

EXAMPLE = ROOT / "docs" / "images" / "eval-example.json"
WHITE = (255, 255, 255)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (scripts/install-test-servers.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {reason}")
        pytest.skip(reason)
    return found


def headless(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium, headless, offline as far as it goes, with a fresh profile, on ``page``."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars",
        *args, page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def screenshot(tmp_path: Path, page: Path, size: str) -> list[tuple[int, int, int]]:
    shot = tmp_path / f"{page.stem}.png"
    headless(tmp_path, page, f"--window-size={size}", f"--screenshot={shot}")
    width, height, pixels = png_pixels(shot)
    assert f"{width},{height}" == size
    return pixels


def near(pixels: list[tuple[int, int, int]], color: str, opacity: float = 1.0) -> int:
    """How many pixels have ``color`` (drawn at ``opacity`` over white), give or take."""
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    want = [round(opacity * c + (1 - opacity) * 255) for c in rgb]
    return sum(1 for p in pixels if all(abs(a - b) <= 10 for a, b in zip(p, want, strict=True)))


def test_the_eval_page_is_drawn_with_its_charts(tmp_path):
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    page = tmp_path / "eval.html"
    page.write_text(eval_page(data, tasks=load_tasks("instructions")), encoding="utf-8")
    pixels = screenshot(tmp_path, page, "1100,1400")
    drawn = sum(1 for p in pixels if p != WHITE)
    assert drawn > 0.05 * len(pixels), f"only {drawn} of {len(pixels)} pixels are not white"
    for arm in data["arms"]:  # each arm's bar (drawn at 85% opacity) is on the screen
        assert near(pixels, ARM_COLORS[arm], 0.85) > 500, arm


def test_a_runs_page_is_drawn_with_its_scores(tmp_path):
    records = [
        {
            "iteration": i,
            "answer": f"Draft {i}",
            "score": score,
            "feedback": "More.",
            "stop": i == 3,
        }
        for i, score in ((1, 40), (2, 65), (3, 88))
    ]
    result = {"run_id": "3f9a2c1b", "answer": "Draft 3", "stop_reason": "accepted",
              "iterations": 3, "selected_iteration": 3, "selected_score": 88,
              "records": records}  # fmt: skip
    page = tmp_path / "run.html"
    page.write_text(run_page(result, title="Run 3f9a2c1b", threshold=80), encoding="utf-8")
    pixels = screenshot(tmp_path, page, "900,900")
    assert sum(1 for p in pixels if p != WHITE) > 0.03 * len(pixels)
    assert near(pixels, "#0072b2") > 100  # the score line and its markers


def test_hostile_text_is_parsed_as_text_by_the_browser(tmp_path):
    hostile = "<img src=x onerror=alert(1)></pre></details><script>alert(2)</script>"
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data["settings"]["model"] = hostile
    for result in data["results"]:
        result["task_id"] += hostile
        for step in result["transcript"]:
            step["answer"] = step["feedback"] = hostile
    page = tmp_path / "hostile.html"
    page.write_text(eval_page(data), encoding="utf-8")
    dom = Page(headless(tmp_path, page, "--dump-dom").stdout)
    assert "img" not in dom.tags()
    assert "script" not in dom.tags()
    assert dom.text.count(hostile) > 100
