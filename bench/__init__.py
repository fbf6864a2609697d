"""Benchmarks: entry points and their reports (``python -m bench.<name>``). What they share with the tests and
the demo lives in tools/, which never imports bench."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPORTS = Path(__file__).resolve().parents[1] / "reports" / "bench"


def write_report(path: Path, report: Any, markdown: str | None = None) -> None:
    """``report`` as JSON in ``path`` (its folder made); with ``markdown``, that beside it (``.md``) and printed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if markdown is not None:
        path.with_suffix(".md").write_text(markdown.rstrip("\n") + "\n")
        print(markdown)


def table_head(columns: str) -> list[str]:
    """A markdown table's header row and its rule."""
    return [f"| {columns} |", "|" + "---|" * (columns.count(" | ") + 1)]
