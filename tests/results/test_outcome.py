"""A run's outcome (evalx.results.outcome): the exit-status table, and summary.json assembled in one place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from evalx.results.model import CostGuardReport, GateReport, RunSummary, SummaryFigures
from evalx.results.outcome import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    RUN_KEYS,
    RunFacts,
    decide_exit,
    finish_summary,
    restore_summary,
)
from evalx.results.summary import SummaryBuilder


def test_exit_codes_are_the_documented_ones() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE) == (0, 1, 2, 3)
    import evalx.cli

    assert (evalx.cli.EXIT_USAGE, evalx.cli.EXIT_INCOMPLETE) == (EXIT_USAGE, EXIT_INCOMPLETE)  # one definition


def _summary(
    *, fail: int = 0, error: int = 0, skipped: int = 0, cell_fail: int = 0, interrupted: bool = False,
    gates: bool | None = None, gates_active: bool = True, guard_skipped: int | None = None, graded: bool = True,
) -> RunSummary:  # fmt: skip
    """Just what decide_exit reads: cell and case-level counts (they may differ, with repeats), gates, cost guard."""
    passed = 1 if graded else 0
    cells = passed + cell_fail + skipped + error
    summary: dict[str, Any] = {
        "totals": {
            "cells": cells,
            "pass": passed,
            "fail": cell_fail,
            "error": error,
            "skipped": skipped,
            "case_level": {"pass": passed, "fail": fail, "error": error, "skipped": skipped},
        },
        "interrupted": interrupted,
    }
    if gates is not None:
        report: GateReport = {"active": gates_active, "baseline": None, "baseline_ref": None, "warnings": [], "results": [],
                              "breached": 0 if gates else 1, "passed": gates}  # fmt: skip
        summary["gates"] = report
    if guard_skipped is not None:
        guard: CostGuardReport = {"limit_usd": 1.0, "spent_usd": 1.0, "skipped": guard_skipped, "message": "stopped"}
        summary["cost_guard"] = guard
    return cast(RunSummary, summary)


# DESIGN.md "Exit status": 0 nothing failed or errored (skipped is fine) and gates held; 1 a case failed or
# errored, or a gate breached (with gates: the gates decide), or the cost guard stopped the run; 3 incomplete.
TABLE = [
    ("all passed", {}, False, EXIT_OK),
    ("skipped is fine", {"skipped": 2}, False, EXIT_OK),
    ("nothing graded: every cell skipped", {"skipped": 2, "graded": False}, False, EXIT_FAILED),
    ("nothing graded beats held gates", {"skipped": 2, "graded": False, "gates": True}, False, EXIT_FAILED),
    ("a case failed", {"fail": 1}, False, EXIT_FAILED),
    ("a case errored", {"error": 1}, False, EXIT_FAILED),
    ("a repeat failed, the case passed by its rule", {"cell_fail": 1}, False, EXIT_OK),
    ("interrupted", {"interrupted": True}, False, EXIT_INCOMPLETE),
    ("every cell of a target errored", {"error": 3}, True, EXIT_INCOMPLETE),
    ("gates held: they decide, failures notwithstanding", {"fail": 2, "gates": True}, False, EXIT_OK),
    ("a gate breached", {"gates": False}, False, EXIT_FAILED),
    ("gates not active: the cases decide", {"fail": 1, "gates": True, "gates_active": False}, False, EXIT_FAILED),
    ("inactive breached report is ignored", {"gates": False, "gates_active": False}, False, EXIT_OK),
    ("the cost guard skipped cells", {"guard_skipped": 2}, False, EXIT_FAILED),
    ("the cost guard skipped cells, gates held", {"guard_skipped": 1, "gates": True}, False, EXIT_FAILED),
    ("a cost guard that skipped nothing", {"guard_skipped": 0}, False, EXIT_OK),
    ("interrupted beats gates and the guard", {"interrupted": True, "gates": True, "guard_skipped": 1}, False, EXIT_INCOMPLETE),
    ("a failed target beats held gates", {"gates": True}, True, EXIT_INCOMPLETE),
]


@pytest.mark.parametrize(("why", "facts", "target_failed", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_decide_exit_table(why: str, facts: dict[str, Any], target_failed: bool, expected: int) -> None:
    assert decide_exit(_summary(**facts), target_failed=target_failed) == expected, why


def _figures(run_id: str = "r2") -> SummaryFigures:
    builder = SummaryBuilder(run_id, "n", "2026-01-01T00:00:00+00:00")
    builder.add(cast(Any, {"index": 0, "target": "t", "dataset": "d", "case_id": "c", "repeat": 0, "status": "pass"}))
    return builder.finish("2026-01-01T00:00:01+00:00", 1.0)


def test_finish_summary_adds_what_the_run_knew_after_the_figures(tmp_path: Path) -> None:
    figures = _figures()
    guard: CostGuardReport = {"limit_usd": 1.0, "spent_usd": 0.5, "skipped": 0, "message": None}
    facts = RunFacts(config="evalconfig.yaml", interrupted=False, cells_planned=4, cost_guard=guard)
    summary, warnings = finish_summary(figures, facts, gates={"min_pass_rate": 0.5}, baseline_ref=None,
                                       output_dir=tmp_path, run_dir=tmp_path / "r2")  # fmt: skip
    assert warnings == []
    assert list(summary)[: len(figures)] == list(figures) and all(summary[k] == v for k, v in figures.items())  # type: ignore[literal-required]
    assert list(summary)[len(figures) :] == ["config", "interrupted", "cells_planned", "cost_guard", "gates"]
    assert summary["gates"]["active"] and [r["held"] for r in summary["gates"]["results"]] == [True]
    assert "comparison" not in figures  # the builder's own result is left alone


def test_a_missing_baseline_is_a_warning(tmp_path: Path) -> None:
    facts = RunFacts(config="c.yaml", interrupted=True, cells_planned=0)
    summary, warnings = finish_summary(_figures(), facts, gates={"baseline": "latest"}, baseline_ref=None,
                                       output_dir=tmp_path, run_dir=tmp_path / "r2")  # fmt: skip
    assert len(warnings) == 1 and "baseline gates are skipped" in warnings[0]
    assert "gates" not in summary and "comparison" not in summary and summary["interrupted"] is True


def test_restore_summary_keeps_the_run_s_keys_from_the_stored_one() -> None:
    stored = {**_figures("old"), "config": "c.yaml", "interrupted": False, "cells_planned": 3, "baseline": {"run_id": "b"}}
    restored = restore_summary(_figures("new"), json.loads(json.dumps(stored)))
    assert restored["run_id"] == "new"  # the figures are the fresh ones
    assert [k for k in restored if k in RUN_KEYS] == ["config", "interrupted", "cells_planned", "baseline"]
