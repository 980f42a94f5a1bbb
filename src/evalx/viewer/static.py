"""`evalx report --history RUNS_DIR -o FILE`: the runs page and the case histories as one self-contained file (a CI artifact)."""

from __future__ import annotations

from pathlib import Path

from evalx.common.atomic import write_text
from evalx.errors import EvalxError
from evalx.reports.render import check_outputs
from evalx.viewer.index import load_history
from evalx.viewer.pages import history_document

__all__ = ["write_history_page"]


def write_history_page(runs_dir: Path, out: Path) -> int:
    """Write the history page of ``runs_dir`` to ``out`` (atomically); returns how many runs it shows."""
    if not runs_dir.is_dir():
        raise EvalxError(f"{runs_dir}: no such folder (give the runs folder, e.g. runs/)")
    check_outputs({"-o": out})  # not a directory, nor a run's own record
    history = load_history(runs_dir)
    text = history_document(history, title=f"Run history · {runs_dir.resolve().name}")
    write_text(out, text, errors="replace")
    return len(history.runs)
