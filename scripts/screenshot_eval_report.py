"""Make the documentation's picture of the eval report: docs/images/eval-report.png.

The page is drawn with the command users run, from the illustrative result in
docs/images/eval-example.json (the bundled instruction tasks, illustrative numbers):

    loop-agents eval instructions --from docs/images/eval-example.json --report PAGE.html

then photographed by headless Chromium (the Debian package `chromium`), offline, with a
fresh profile. Run it from the repository's root:

    .venv/bin/python scripts/screenshot_eval_report.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "images" / "eval-example.json"
PICTURE = ROOT / "docs" / "images" / "eval-report.png"
SIZE = "1100,1560"  # the verdict: the pass rates, the cost frontier, the per-attempt curves


def main() -> int:
    """Draw the page, photograph it, say where the picture is; 1 without Chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("chromium is not installed: scripts/install-test-servers.sh installs it")
        return 1
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "eval.html"
        command = [sys.executable, "-m", "loop_agents_cli", "eval", "instructions"]
        subprocess.run([*command, "--from", str(EXAMPLE), "--report", str(page)], check=True)
        subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={folder}/profile",
                "--hide-scrollbars", f"--window-size={SIZE}", f"--screenshot={PICTURE}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
