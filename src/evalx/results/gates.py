"""CI gates: decide a run's exit status from ``gates:`` and a baseline comparison.

Top-level gates apply to every target of the run, each on its own figures;
``gates.targets.<id>`` replaces values for that target; ``gates.categories.<name>``
adds gates for that category's cells (across targets). Gates that compare with
a baseline (``max_pass_rate_drop``, ``no_new_failures``, ``max_cost_increase``,
``max_p99_increase``) are *n/a* without one: a first run on a branch warns and
goes on; they compare the cells both runs have (:func:`evalx.results.compare.compare_runs`).
Latency and cost gates breach only past a ratio *and* an absolute floor
(``{ratio: 0.2, min_ms: 50}``; a bare number is the ratio with
:data:`DEFAULT_FLOORS`), so 5 ms → 8 ms is not a regression. When any gate is
set, the gates decide the exit status (errors count against the pass rate); a
breach exits 1. Every gate line says which cells it was computed on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from evalx.common.json_types import JSONObject
from evalx.common.typeschema import Fraction, NonNegative, Schema, build
from evalx.results.display import one_line, show_id
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as usd_figure
from evalx.results.model import CaseChange, CellCounts, Comparison, GateReport, GateResult, Metric, RunSummary, SummaryFigures

__all__ = [
    "GATE_KEYS",
    "GateSet",
    "Gates",
    "active_gates",
    "evaluate",
    "format_gate_report",
    "format_outcome",
    "gates_spec",
    "prepare_baseline",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class CostGate:
    """``max_cost_increase`` with its floor: breach past ``ratio`` *and* ``min_usd``."""

    ratio: NonNegative
    min_usd: NonNegative | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyGate:
    """``max_p99_increase`` with its floor: breach past ``ratio`` *and* ``min_ms``."""

    ratio: NonNegative
    min_ms: NonNegative | None = None


@dataclass(frozen=True, kw_only=True)
class GateSet:
    """The gates one scope switches on: the whole run, a target (``gates.targets.<id>``) or a category."""

    min_pass_rate: Fraction | None = None
    max_pass_rate_drop: Fraction | None = None
    no_new_failures: bool | None = None
    max_cost_increase: Annotated[
        NonNegative | CostGate | None,
        Schema(description="Breach when cost rises by more than this ratio and by more than min_usd (default $0.01)."),
    ] = None
    max_p99_increase: Annotated[
        NonNegative | LatencyGate | None,
        Schema(description="Breach when p99 latency rises by more than this ratio and by more than min_ms (default 50 ms)."),
    ] = None
    max_skipped_rate: Annotated[
        Fraction | None, Schema(description="Breach when more than this share of a target's cells was skipped.")
    ] = None


@dataclass(frozen=True, kw_only=True)
class Gates(GateSet):
    """The config's ``gates:``: the run-wide set, the baseline, and the per-target and per-category sets."""

    baseline: Annotated[str | None, Schema(description="A run id, a path, or `latest`.")] = None
    targets: Mapping[str, GateSet] | None = None
    categories: Mapping[str, GateSet] | None = None


def gates_spec(section: Mapping[str, object] | Gates | None) -> Gates:
    """The record of a ``gates:`` mapping the schema accepted (None: no gates); a record is returned as is."""
    return section if isinstance(section, Gates) else build(Gates, section or {})


GATE_KEYS = ("min_pass_rate", "max_pass_rate_drop", "no_new_failures", "max_cost_increase", "max_p99_increase", "max_skipped_rate")
_BASELINE_GATES = ("max_pass_rate_drop", "no_new_failures", "max_cost_increase", "max_p99_increase")
_EPS = 1e-9
#: the absolute increase below which a latency or cost change is noise, whatever its ratio (DESIGN.md "Gates with floors")
DEFAULT_FLOORS = {"max_p99_increase": 50.0, "max_cost_increase": 0.01}
_FLOOR_KEYS = {"max_p99_increase": "min_ms", "max_cost_increase": "min_usd"}


def ratio_and_floor(gate: str, threshold: Any) -> tuple[float, float]:
    """A latency/cost gate's (ratio, absolute floor): from ``{ratio: R, min_ms|min_usd: F}`` or a bare ratio."""
    if isinstance(threshold, Mapping):
        floor = threshold.get(_FLOOR_KEYS[gate])
        return float(threshold["ratio"]), float(DEFAULT_FLOORS[gate] if floor is None else floor)
    return float(threshold), DEFAULT_FLOORS[gate]


def _written(value: Any) -> Any:
    """A gate's threshold as the config wrote it (stored in ``summary.json``): a number, or ``{ratio, min_ms|min_usd}``."""
    if isinstance(value, CostGate | LatencyGate):
        return {k: v for k, v in dataclasses.asdict(value).items() if v is not None}
    return value


def _set_of(values: GateSet | None) -> JSONObject:
    """The gates a set switches on, by name (``no_new_failures: false`` is off)."""
    out: JSONObject = {}
    for key in GATE_KEYS:
        value = getattr(values, key, None)
        if value is None or value is False:
            continue
        out[key] = _written(value)
    return out


def _switched_off(values: GateSet | None) -> list[str]:
    """The gates a target's set turns off (``no_new_failures: false`` over a run-wide ``true``)."""
    return [key for key in GATE_KEYS if getattr(values, key, None) is False]


def active_gates(gates: Mapping[str, object] | Gates | None) -> bool:
    spec = gates_spec(gates)
    groups = [*(spec.targets or {}).values(), *(spec.categories or {}).values()]
    return bool(_set_of(spec)) or any(_set_of(v) for v in groups)


def prepare_baseline(
    ref: str | None, output_dir: Path, *, name: str, run_id: str, run_dir: Path, summary: SummaryFigures
) -> tuple[Comparison | None, str | None]:
    """Compare the run with baseline ``ref``: (comparison, None), or (None, a warning)."""
    if not ref:
        return None, None
    from evalx.results.compare import compare_runs
    from evalx.results.history import RunNotFound, resolve_run

    try:
        base_dir = resolve_run(ref, output_dir, name=name, exclude=run_id)
    except RunNotFound as exc:
        return None, f"{exc}; baseline gates are skipped (a first run on a branch has none)"
    if base_dir.resolve() == run_dir.resolve():
        return None, f"baseline {ref!r} is this run; gates that need a baseline are skipped"
    return compare_runs(base_dir, run_dir, b_summary=summary), None


def _result(gate: str, scope: str, value: float | None, threshold: Any, held: bool | None, detail: str) -> GateResult:
    return {"gate": gate, "scope": scope, "value": value, "threshold": threshold, "held": held, "detail": detail}


def _cells(n: int, what: str) -> str:
    return f"on {n} {what} cell{'s' if n != 1 else ''}"


#: the counts of a scope without cells
_NO_CELLS: CellCounts = {"cells": 0, "pass": 0, "fail": 0, "error": 0, "skipped": 0, "pass_rate": None, "pass_rate_ci": None}


def _check(
    gate: str,
    threshold: Any,
    scope: str,
    group: CellCounts | None,
    base: Mapping[str, Metric] | None,
    failing: list[CaseChange] | None,
    compared: int | None = None,
) -> GateResult:
    """One gate on one scope whose cell counts are ``group``; ``base`` is the scope's comparison (None: no baseline for it).

    ``compared``: the cells of the scope both runs have (what a baseline gate is computed on).
    """
    group = group if group is not None else _NO_CELLS
    if gate == "min_pass_rate":
        rate = group.get("pass_rate")
        decided = int(group.get("pass") or 0) + int(group.get("fail") or 0) + int(group.get("error") or 0)
        if rate is None:
            return _result(gate, scope, None, threshold, None, f"no graded cell ({int(group.get('cells') or 0)} cells, all skipped)")
        held = rate + _EPS >= threshold
        return _result(gate, scope, rate, threshold, held, f"pass rate {_pct(rate)} (min {_pct(threshold)}) {_cells(decided, 'graded')}")
    if gate == "max_skipped_rate":
        cells, skipped = int(group.get("cells") or 0), int(group.get("skipped") or 0)
        if not cells:
            return _result(gate, scope, None, threshold, None, "no cells")
        rate = skipped / cells
        detail = f"{skipped} of {cells} cells skipped ({_pct(rate)}, max {_pct(threshold)})"
        return _result(gate, scope, rate, threshold, rate <= threshold + _EPS, detail)
    if base is None:
        return _result(gate, scope, None, threshold, None, "no baseline")
    on = f" {_cells(compared, 'shared')}" if compared is not None else ""
    if gate == "no_new_failures":
        names = [f"{show_id(c['target'])} {show_id(c['dataset'])}/{show_id(c['case_id'])}" for c in failing or []]
        n = len(names)
        detail = "no newly failing case" if not n else f"{n} newly failing: " + ", ".join(names[:5]) + (" …" if n > 5 else "")
        return _result(gate, scope, n, 0, n == 0, detail + on)
    if gate == "max_pass_rate_drop":
        m = base.get("pass_rate")
        if m is None or m["a"] is None or m["b"] is None:
            return _result(gate, scope, None, threshold, None, "no pass rate to compare" + on)
        drop = m["a"] - m["b"]
        return _result(
            gate,
            scope,
            drop,
            threshold,
            drop <= threshold + _EPS,
            f"pass rate {_pct(m['a'])} → {_pct(m['b'])} (drop {drop * 100:+.1f}pp, max {threshold * 100:.1f}pp){on}",
        )
    key = "cost_usd" if gate == "max_cost_increase" else "p99_ms"
    m = base.get(key)
    if m is None or m["a"] is None or m["b"] is None or m["delta"] is None:
        why = "no cost recorded" if key == "cost_usd" else "no latency recorded"
        return _result(gate, scope, None, threshold, None, f"{why} in both runs{on}")
    ratio, floor = ratio_and_floor(gate, threshold)
    rel, delta = m["relative"], m["delta"]
    # a rise from zero has no ratio: it breaches on the floor alone
    breached = delta > floor + _EPS and (rel is None or rel > ratio + _EPS)
    if key == "cost_usd":
        before, after, change, limit = usd_figure(m["a"]), usd_figure(m["b"]), f"{delta:+.4g} USD", f"${floor:g}"
    else:
        before, after, change, limit = f"{m['a']:.0f}ms", f"{m['b']:.0f}ms", f"{delta:+.0f}ms", f"{floor:g}ms"
    pct = f"{rel * 100:+.1f}%, " if rel is not None else ""
    detail = f"{before} → {after} ({pct}{change}; breaches past +{ratio * 100:g}% and +{limit}){on}"
    return _result(gate, scope, rel if rel is not None else delta, threshold, not breached, detail)


def evaluate(
    gates: Mapping[str, object] | Gates | None,
    summary: SummaryFigures,
    comparison: Comparison | None,
    *,
    baseline_ref: str | None = None,
    warnings: list[str] | None = None,
) -> GateReport:
    """The gate report stored as ``summary.json["gates"]``."""
    spec = gates_spec(gates)
    results: list[GateResult] = []
    global_set = _set_of(spec)
    overrides = spec.targets or {}
    newly = comparison["newly_failing"] if comparison is not None else []
    for target, figures in (summary.get("per_target") or {}).items():
        effective = {**global_set, **_set_of(overrides.get(target))}
        for key in _switched_off(overrides.get(target)):
            effective.pop(key, None)  # an override may switch a global gate off
        if not effective:
            continue
        base: dict[str, Metric] | None = None
        compared: int | None = None
        if comparison is not None:
            entry = comparison["per_target"].get(target)
            if entry is not None and entry["in_a"]:
                base = {"pass_rate": entry["pass_rate"], "cost_usd": entry["cost_usd"], "p99_ms": entry["p99_ms"]}
                compared = entry.get("cells_compared")
        failing = [c for c in newly if c["target"] == target]
        for gate, threshold in effective.items():
            results.append(_check(gate, threshold, f"target {target}", figures, base, failing, compared))
    for category, values in (spec.categories or {}).items():
        group = (summary.get("per_category") or {}).get(category)
        for gate, threshold in _set_of(values).items():
            scope = f"category {category}"
            if group is None:
                results.append(_result(gate, scope, None, threshold, None, "no cells in this category"))
                continue
            base = None
            if comparison is not None:
                base = (comparison.get("per_category") or {}).get(category)
            if gate in ("max_cost_increase", "max_p99_increase"):
                results.append(_result(gate, scope, None, threshold, None, "not measured per category"))
                continue
            failing = [c for c in newly if c.get("category") == category]
            results.append(_check(gate, threshold, scope, group, base, failing))
    breached = sum(1 for r in results if r["held"] is False)
    return {
        "active": bool(results),
        "baseline": comparison["a"]["run_id"] if comparison is not None else None,
        "baseline_ref": baseline_ref,
        "warnings": list(warnings or []),
        "results": results,
        "breached": breached,
        "passed": breached == 0,
    }


# ---------------------------------------------------------------- rendering


def format_gate_report(report: GateReport | None) -> str:
    if not report or not report.get("results"):
        return ""
    width_gate = max(len(r["gate"]) for r in report["results"])
    width_scope = max(len(r["scope"]) for r in report["results"])
    base = f" (baseline {report['baseline']})" if report.get("baseline") else " (no baseline)"
    lines = [f"Gates{base}:"]
    for r in report["results"]:
        mark, word = ("✓", "held") if r["held"] else ("✗", "BREACHED") if r["held"] is False else ("–", "n/a")
        lines.append(f"  {mark} {r['gate'].ljust(width_gate)}  {r['scope'].ljust(width_scope)}  {word:<8}  {one_line(r['detail'])}")
    n = report["breached"]
    lines.append(f"Gates: {n} breached → exit 1" if n else "Gates: all held")
    return "\n".join(lines) + "\n"


def format_outcome(summary: RunSummary) -> str:
    """The "vs. previous run" block and the gate report, for the terminal and summary.txt."""
    parts = []
    shard, merged = summary.get("shard"), summary.get("merged")
    if shard:
        empty = " It is empty: the plan has fewer cases than shards." if not summary["totals"]["cells"] else ""
        parts.append(
            f"Shard {shard['index']}/{shard['count']} ({shard['plan_cells']} cells in the whole plan): gates and the baseline "
            f"are applied by `evalx merge` of every shard.{empty}\n"
        )
    if merged:
        parts.append(f"Merged from {len(merged['shards'])} of {merged['count']} shards.\n")
        if merged["partial"]:
            missing = ", ".join(f"{i}/{merged['count']}" for i in merged["missing"])
            plural = "s" if len(merged["missing"]) != 1 else ""
            parts.append(f"PARTIAL: shard{plural} {missing} missing; their cells are not in this run.\n")
    comparison = summary.get("comparison")
    if comparison:
        from evalx.results.compare import format_vs_previous

        parts.append(format_vs_previous(comparison))
    gates = summary.get("gates")
    if gates and gates.get("results"):
        parts.append(format_gate_report(gates))
    budget = summary.get("cost_guard")
    if budget and budget.get("skipped"):
        parts.append(f"{budget['message'] or ''}\n")
    return "\n".join(parts)
