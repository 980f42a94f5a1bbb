"""Read a run's results.jsonl in tests: its cells, whatever the results format (v1 lines, or v2 with run and case records)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalx.results.store import read_results


def read_cells(where: Path) -> list[dict[str, Any]]:
    """Every cell of a run folder's (or a file's) results, each with every v1 key, in file order."""
    path = where / "results.jsonl" if where.is_dir() else where
    return [dict(r) for r in read_results(path)]


def cell_lines(path: Path) -> list[str]:
    """The raw lines of ``path`` that are cells (not a run or case record), torn ones too; [] when it does not exist."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if not (isinstance(value, dict) and value.get("kind") in ("run", "case")):
            out.append(line)
    return out
