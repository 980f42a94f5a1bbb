"""What a huge run prints stays the same size: the terminal summary does not grow with targets, categories or cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalx.reports.text import MAX_TABLE_ROWS, format_summary
from evalx.results.outcome import RunFacts, finish_summary
from evalx.results.summary import SummaryBuilder

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest


def _summary(targets: int, categories: int, cells: int, where: Path) -> str:
    builder = SummaryBuilder("20261126-120000-abcdef", "big", "s", per_case=targets > 1)
    for i in range(cells):
        status = "fail" if i % 7 == 0 else "pass"
        builder.add(
            {  # type: ignore[typeddict-item]
                "index": i, "target": f"t{i % targets}", "dataset": "d", "case_id": f"c{i // targets}", "repeat": 0,
                "category": f"cat{i % categories}", "status": status, "latency_ms": 1.0, "assertions": [],
                "output": {"text": "x"},
            }
        )  # fmt: skip
    figures = builder.finish("f", 1.0)
    facts = RunFacts(config="c", interrupted=False, cells_planned=cells, cost_guard=None)
    summary, _ = finish_summary(figures, facts, gates=None, baseline_ref=None, output_dir=where, run_dir=where / "r")
    return format_summary(summary, pairwise=False)


def test_the_terminal_summary_is_as_long_for_many_groups_as_for_a_few(tmp_path: Path) -> None:
    few = _summary(targets=1, categories=MAX_TABLE_ROWS, cells=2000, where=tmp_path).splitlines()
    many = _summary(targets=1, categories=5000, cells=20000, where=tmp_path).splitlines()
    assert len(many) <= len(few) + 2  # one "… and N more" line under the counts table, one under the output-size table
    assert "  … and 4,975 more categories (summary.json)" in many
    several = _summary(targets=400, categories=3, cells=4000, where=tmp_path).splitlines()
    assert "  … and 375 more targets (summary.json)" in several
    more = _summary(targets=2000, categories=3, cells=20000, where=tmp_path).splitlines()
    assert len(more) == len(several) < 8 * MAX_TABLE_ROWS, len(several)
