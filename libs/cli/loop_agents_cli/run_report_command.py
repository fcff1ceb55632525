"""``loop-agents show RUN_ID --report PAGE.html``: a saved run as an HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loop_agents_checks.sandbox.text_files import utf8_text
from loop_agents_cli.errors import UsageError
from loop_agents_cli.store import SavedRun


def check_page_path(path: Path) -> Path:
    """``path`` if it names an HTML file (``.html``), else `UsageError`.

    Example:
        ```python
        check_page_path(Path("run.html"))
        ```
    """
    from loop_agents_cli.console.html_page import check_report_path

    try:
        return check_report_path(path) or path
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _threshold(run: SavedRun) -> float | None:
    """The judge's accepting score, when the run had a judge (a rubric)."""
    settings = run.settings
    threshold = settings.get("threshold")
    if not settings.get("rubric") or isinstance(threshold, bool):
        return None
    return float(threshold) if isinstance(threshold, int | float) else None


def write_run_report(run: SavedRun, result: dict[str, Any], path: Path) -> None:
    """Write the page of ``run`` (its result as ``show --json`` prints it) to ``path``.

    Example:
        ```python
        write_run_report(run, result_json(values, run_id=run.run_id), Path("run.html"))
        ```
    """
    from loop_agents_cli.console.run_page import run_page

    endpoint = run.settings.get("endpoint") or {}
    facts = {
        "started": run.started,
        "status": run.state + (f" ({run.stop_reason})" if run.stop_reason else ""),
        "model": endpoint.get("model"),
        "server": endpoint.get("base_url") or endpoint.get("kind"),
    }
    settings = {k: v for k, v in run.settings.items() if k not in ("task", "rubric", "version")}
    text = run_page(
        result,
        title=f"Run {run.run_id}",
        facts=facts,
        task=run.task,
        rubric=run.settings.get("rubric"),
        threshold=_threshold(run),
        settings=settings,
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(utf8_text(text), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the page {str(path)!r}: {exc}") from exc
