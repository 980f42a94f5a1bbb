"""One target's category × difficulty table, laid out once for the Markdown and HTML reports.

The golden_qa runner's report breaks accuracy down by category and
difficulty; evalx does the same per target (``per_target.<id>.
per_category_difficulty`` in ``summary.json``), never pooled across targets:
different models' rates mixed say nothing about either. A table has a row a
category, a column a difficulty (plus "(none)" for cases without one, when
some have one), an "all" column and row, and the mean score of each row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evalx.results.figures import finite
from evalx.results.figures import pct as _pct
from evalx.results.model import CellCounts, TargetFigures

__all__ = ["NO_DIFFICULTY", "Cross", "CrossCell", "CrossRow", "cross_table", "score_text"]

#: the column header of a category's cases that have no difficulty
NO_DIFFICULTY = "(none)"


@dataclass(frozen=True, slots=True)
class CrossCell:
    """Cells of one category and difficulty: ``passed`` of ``decided`` (``cells`` less the skipped ones)."""

    passed: int
    decided: int
    cells: int

    @property
    def rate(self) -> float | None:
        return self.passed / self.decided if self.decided else None

    def text(self) -> str:
        """``75.0% (3/4)``; ``–`` when every cell was skipped; empty when there is no cell."""
        if not self.cells:
            return ""
        if not self.decided:
            return "–"
        return f"{_pct(self.rate)} ({self.passed}/{self.decided})"


_EMPTY = CrossCell(0, 0, 0)


@dataclass(frozen=True, slots=True)
class CrossRow:
    """A category (or "all"): a cell a difficulty column, its total, its mean score."""

    name: str
    cells: list[CrossCell]
    all: CrossCell
    mean_score: float | None
    scored: int


@dataclass(frozen=True, slots=True)
class Cross:
    """One target's table: the difficulty columns (empty when no case has a difficulty), a row a category, the "all" row."""

    difficulties: list[str]
    rows: list[CrossRow]
    total: CrossRow


def _cell(counts: CellCounts | Mapping[str, object] | None) -> CrossCell:
    if not counts:
        return _EMPTY
    cells, skipped, passed = (int(finite(counts.get(k)) or 0) for k in ("cells", "skipped", "pass"))
    return CrossCell(passed, cells - skipped, cells)


def _add(a: CrossCell, b: CrossCell) -> CrossCell:
    return CrossCell(a.passed + b.passed, a.decided + b.decided, a.cells + b.cells)


def score_text(value: float | None) -> str:
    """A mean score: ``0.750`` (three decimals), or ``—`` when no cell was scored."""
    return "—" if value is None else f"{value:.3f}"


def cross_table(target: TargetFigures) -> Cross | None:
    """``target``'s category × difficulty table; None for a summary written before per-target breakdowns."""
    groups = target.get("per_category_difficulty")
    per_category = target.get("per_category")
    if groups is None or per_category is None:
        return None
    named = list(target.get("per_difficulty") or {})
    columns: list[str | None] = list(named)
    if named and any(g.get("difficulty") is None for g in groups):
        columns.append(None)
    index = {d: i for i, d in enumerate(columns)}
    by_category: dict[str, list[CrossCell]] = {name: [_EMPTY] * len(columns) for name in per_category}
    column_totals = [_EMPTY] * len(columns)
    for g in groups:
        category, difficulty = str(g.get("category")), g.get("difficulty")
        row = by_category.setdefault(category, [_EMPTY] * len(columns))
        column = index.get(difficulty)
        if column is None:  # no named difficulty anywhere: the "all" column says it
            continue
        row[column] = _add(row[column], _cell(g))
        column_totals[column] = _add(column_totals[column], _cell(g))
    rows = []
    for name, cells in by_category.items():
        figures = per_category.get(name)
        mean = finite(figures.get("mean_score")) if figures else None
        scored = int(finite(figures.get("scored_cells")) or 0) if figures else 0
        rows.append(CrossRow(name, cells, _cell(figures), mean, scored))
    total = CrossRow(
        "all",
        column_totals,
        _cell(target),
        finite(target.get("mean_score")),
        int(finite(target.get("scored_cells")) or 0),
    )
    return Cross([NO_DIFFICULTY if d is None else d for d in columns], rows, total)
