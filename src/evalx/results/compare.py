"""Compare two stored runs: headline deltas per target and case-level changes.

A *case* is (target, dataset, case id). With repeats, each case gets one
verdict from its cells under the run's ``repeat_pass_rule`` (decided by
:mod:`evalx.results.repeats`, as everywhere else), so a flaky case that passed 2
of 3 times is compared as a case, not as three cells. Run A is the baseline,
run B the new run; deltas are B − A.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from evalx.common.json_types import JSONObject, as_object
from evalx.common.reading import CONFIG_COPY, SUMMARY, read_text, stored_json
from evalx.results.display import markdown_code, markdown_text, one_line, show_id
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd
from evalx.results.model import (
    BaselineView,
    CaseChange,
    Comparison,
    FailureRow,
    FlakyChange,
    Metric,
    RunHeader,
    RunSummary,
    SummaryFigures,
    TargetDelta,
    TargetFigures,
    failure_reason,
)
from evalx.results.reviews import summary_is_current
from evalx.results.store import RESULTS, read_results

__all__ = [
    "CaseVerdict",
    "baseline_view",
    "case_verdicts",
    "compare_runs",
    "comparison_table",
    "format_comparison",
    "format_vs_previous",
    "markdown_comparison",
]

#: cases listed in each of newly failing / newly passing / flaky changed
MAX_CASES = 200

_FAILING = ("fail", "error")


@dataclass
class CaseVerdict:
    target: str
    dataset: str
    case_id: str
    category: str
    runs: int = 0  # decided cells (skipped excluded)
    passes: int = 0
    errors: int = 0
    cells: int = 0
    reason: str | None = None  # why the first failing cell failed
    status: str = "skipped"

    @property
    def flaky(self) -> bool:
        return 0 < self.passes < self.runs

    def change(self, was: CaseVerdict) -> CaseChange:
        """This case (the new run's verdict) as a newly failing or newly passing entry; ``was`` is the baseline's."""
        return {
            "target": self.target,
            "dataset": self.dataset,
            "case_id": self.case_id,
            "category": self.category,
            "status": self.status,
            "passed": self.passes,
            "runs": self.runs,
            # why it fails now; for a newly passing case, why it failed before
            "reason": was.reason if self.status == "pass" else self.reason,
            "was": was.status,
        }

    def flaky_change(self, was: CaseVerdict) -> FlakyChange:
        """This case as a "flaky status changed" entry; ``was`` is the baseline's verdict."""
        return {
            "target": self.target,
            "dataset": self.dataset,
            "case_id": self.case_id,
            "category": self.category,
            "status": self.status,
            "passed": self.passes,
            "runs": self.runs,
            "reason": self.reason,
            "was_flaky": was.flaky,
            "now_flaky": self.flaky,
            "was_passed": was.passes,
            "was_runs": was.runs,
        }


def _rule_of(run_dir: Path) -> str:
    """The run's ``repeat_pass_rule``: as its summary recorded it, else from the config it stored."""
    from evalx.results.repeats import DEFAULT_RULE, RULES

    rule = as_object(stored_json(run_dir / "summary.json", SUMMARY)).get("repeat_pass_rule")
    if rule not in RULES:
        try:
            data = yaml.safe_load(read_text(run_dir / "config.yaml", CONFIG_COPY))
            rule = ((data or {}).get("defaults") or {}).get("repeat_pass_rule")
        except (OSError, ValueError, yaml.YAMLError, AttributeError):
            rule = None
    return rule if rule in RULES else DEFAULT_RULE


CellKey = tuple[str, str, str, int]


def _cell_key(r: Mapping[str, Any]) -> CellKey:
    repeat = r.get("repeat")
    return (str(r.get("target") or ""), str(r.get("dataset") or ""), str(r.get("case_id") or ""), repeat if isinstance(repeat, int) else 0)


def case_verdicts(
    run_dir: Path,
    rule: str | None = None,
    *,
    only: set[CellKey] | None = None,
    builder: Any = None,
    keys: set[CellKey] | None = None,
) -> dict[tuple[str, str, str], CaseVerdict]:
    """One verdict a (target, dataset, case id), from a run's ``results.jsonl``.

    ``only``: count just these cells (the cells two compared runs share);
    ``builder``: a :class:`~evalx.results.summary.SummaryBuilder` fed the same cells;
    ``keys``: a set that gets every cell's (target, dataset, case id, repeat), in the same read.
    """
    rule = rule or _rule_of(run_dir)
    cases: dict[tuple[str, str, str], CaseVerdict] = {}
    path = run_dir / RESULTS
    if not os.path.lexists(path):  # there but not a regular file (a FIFO): read_results names it
        return cases
    for r in read_results(path):
        if only is not None or keys is not None:
            cell = _cell_key(r)
            if keys is not None:
                keys.add(cell)
            if only is not None and cell not in only:
                continue
        if builder is not None:
            builder.add(r)
        key = (str(r.get("target") or ""), str(r.get("dataset") or ""), str(r.get("case_id") or ""))
        v = cases.get(key)
        if v is None:
            v = cases[key] = CaseVerdict(*key, category=str(r.get("category") or "general"))
        v.cells += 1
        status = r.get("status")
        if status == "skipped":
            continue
        v.runs += 1
        if status == "pass":
            v.passes += 1
        else:
            v.errors += status == "error"
            if v.reason is None:
                v.reason = failure_reason(r)
    from evalx.results.repeats import status_of

    for v in cases.values():
        v.status = status_of(v.passes, v.runs - v.passes - v.errors, v.errors, rule)
    return cases


def _summary_of(run_dir: Path) -> SummaryFigures:
    data = stored_json(run_dir / "summary.json", SUMMARY)
    stored: JSONObject = data if isinstance(data, dict) else {}
    if stored and summary_is_current(run_dir, stored):
        return cast(RunSummary, stored)  # as stored: readers below tolerate missing keys
    # no summary (a killed run), or review marks newer than it: rebuild the figures from the results
    from evalx.results.summary import SummaryBuilder

    builder = SummaryBuilder(
        str(stored.get("run_id") or run_dir.name),
        str(stored.get("name") or ""),
        str(stored.get("started_at") or ""),
        repeat_pass_rule=_rule_of(run_dir),
    )
    if os.path.lexists(run_dir / RESULTS):
        for r in read_results(run_dir / RESULTS):
            builder.add(r)
    return builder.finish(str(stored.get("finished_at") or ""), 0.0)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _metric(a: Any, b: Any) -> Metric:
    a, b = _num(a), _num(b)
    delta = None if a is None or b is None else b - a
    relative = None if delta is None or not a else delta / abs(a)
    return {"a": a, "b": b, "delta": delta, "relative": relative}


#: the figures compared, in the order shown
FIGURES = ("pass_rate", "cost_usd", "p50_ms", "p99_ms", "tokens_input", "tokens_output")


def _figures(pass_rate: float | None, s: SummaryFigures | TargetFigures | None) -> dict[str, float | None]:
    """The compared figures (:data:`FIGURES`) of a run's summary or of one target (None: a target the run did not have).

    Read with care: a stored summary may come from an older evalx.
    """
    if s is None:
        return dict.fromkeys(FIGURES)
    latency, tokens = s.get("latency_ms"), s.get("tokens")
    return {
        "pass_rate": pass_rate,
        "cost_usd": s.get("cost_usd"),
        "p50_ms": latency.get("p50") if latency else None,
        "p99_ms": latency.get("p99") if latency else None,
        "tokens_input": tokens.get("input") if tokens else None,
        "tokens_output": tokens.get("output") if tokens else None,
    }


def _run_figures(s: SummaryFigures) -> dict[str, float | None]:
    totals = s.get("totals")
    return _figures(totals.get("pass_rate") if totals else None, s)


def _target_figures(t: TargetFigures | None) -> dict[str, float | None]:
    return _figures(t.get("pass_rate") if t else None, t)


def _deltas(fa: dict[str, float | None], fb: dict[str, float | None]) -> dict[str, Metric]:
    return {k: _metric(fa[k], fb[k]) for k in FIGURES}


def _target_delta(a: TargetFigures | None, b: TargetFigures | None, shared: int = 0) -> TargetDelta:
    d = _deltas(_target_figures(a), _target_figures(b))
    return {
        "in_a": a is not None,
        "in_b": b is not None,
        "cells_compared": shared,
        "pass_rate": d["pass_rate"],
        "cost_usd": d["cost_usd"],
        "p50_ms": d["p50_ms"],
        "p99_ms": d["p99_ms"],
        "tokens_input": d["tokens_input"],
        "tokens_output": d["tokens_output"],
    }


def _run_header(run_dir: Path, summary: SummaryFigures) -> RunHeader:
    return {
        "run_id": summary.get("run_id") or run_dir.name,
        "path": str(run_dir),
        "name": summary.get("name"),
        "started_at": summary.get("started_at"),
    }


def _shared_figures(run_dir: Path, shared: set[CellKey]) -> tuple[SummaryFigures, dict[tuple[str, str, str], CaseVerdict]]:
    """A run's figures and case verdicts over the ``shared`` cells only."""
    from evalx.results.summary import SummaryBuilder

    stored = _summary_of(run_dir)
    builder = SummaryBuilder(str(stored.get("run_id") or run_dir.name), str(stored.get("name") or ""), str(stored.get("started_at") or ""))
    verdicts = case_verdicts(run_dir, only=shared, builder=builder)
    figures = builder.finish(str(stored.get("finished_at") or ""), 0.0)
    figures["run_id"] = str(stored.get("run_id") or run_dir.name)
    return figures, verdicts


def compare_runs(a_dir: Path, b_dir: Path, *, b_summary: SummaryFigures | None = None) -> Comparison:
    """Compare baseline run ``a_dir`` with run ``b_dir`` (``b_summary`` when it is not written yet).

    Figures and case changes are computed on the cells both runs have (same
    target, dataset, case and repeat): a quick run on a few categories against
    a full baseline compares those categories, not a pooled rate over cells
    only one side ran. The cells only one side has are counted, not compared.
    """
    keys_a: set[CellKey] = set()
    keys_b: set[CellKey] = set()
    va, vb = case_verdicts(a_dir, keys=keys_a), case_verdicts(b_dir, keys=keys_b)  # one read of each run
    all_vb = vb
    shared = keys_a & keys_b
    if keys_a == keys_b:  # the same selection (the common case): the stored figures are the shared ones
        sa = _summary_of(a_dir)
        sb = b_summary if b_summary is not None else _summary_of(b_dir)
    else:  # another selection: a second read of each run, of the shared cells only
        (sa, va), (sb, vb) = _shared_figures(a_dir, shared), _shared_figures(b_dir, shared)
    cases_a, cases_b = {k[:3] for k in keys_a}, {k[:3] for k in keys_b}

    newly_failing: list[CaseChange] = []
    newly_passing: list[CaseChange] = []
    flaky_changed: list[FlakyChange] = []
    for key, now in vb.items():
        before = va.get(key)
        if before is None:
            continue
        if now.status in _FAILING and before.status not in _FAILING:
            # skipped → fail counts too: the case was not failing before (e.g. it had no judge)
            newly_failing.append(now.change(before))
        elif now.status == "pass" and before.status in _FAILING:
            newly_passing.append(now.change(before))
        if (before.flaky != now.flaky) and (before.runs > 1 or now.runs > 1):
            flaky_changed.append(now.flaky_change(before))
    new_cases = [k for k in cases_b if k not in cases_a]
    removed = [k for k in cases_a if k not in cases_b]
    shared_by_target: dict[str, int] = {}
    for cell in shared:
        shared_by_target[cell[0]] = shared_by_target.get(cell[0], 0) + 1

    ta, tb = sa.get("per_target") or {}, sb.get("per_target") or {}
    per_target = {
        target: _target_delta(ta.get(target), tb.get(target), shared_by_target.get(target, 0))
        for target in [*tb, *(t for t in ta if t not in tb)]
    }
    ca, cb = sa.get("per_category") or {}, sb.get("per_category") or {}
    per_category = {c: {"pass_rate": _metric(ca[c].get("pass_rate"), cb[c].get("pass_rate"))} for c in cb if c in ca}
    return {
        "a": _run_header(a_dir, sa),
        "b": _run_header(b_dir, sb),
        "overall": _deltas(_run_figures(sa), _run_figures(sb)),
        "per_target": per_target,
        "per_category": per_category,
        "newly_failing": newly_failing[:MAX_CASES],
        "newly_failing_total": len(newly_failing),
        "newly_passing": newly_passing[:MAX_CASES],
        "newly_passing_total": len(newly_passing),
        "flaky_changed": flaky_changed[:MAX_CASES],
        "flaky_changed_total": len(flaky_changed),
        "new_cases": len(new_cases),
        "new_cases_failing": sum(1 for k in new_cases if all_vb[k].status in _FAILING),
        "removed_cases": len(removed),
        "cells_compared": len(shared),
        "cells_only_in_baseline": len(keys_a - shared),
        "cells_only_in_run": len(keys_b - shared),
    }


def baseline_view(comparison: Comparison) -> BaselineView:
    """The ``baseline`` a report shows: the baseline's figures and the case changes."""
    overall = comparison["overall"]
    return {
        "run_id": comparison["a"]["run_id"],
        "pass_rate": overall["pass_rate"]["a"],
        "cost_usd": overall["cost_usd"]["a"],
        "p99_ms": overall["p99_ms"]["a"],
        "newly_failing": comparison["newly_failing"],
        "newly_passing": comparison["newly_passing"],
    }


# ---------------------------------------------------------------- rendering


def _safe(text: Any, width: int = 160) -> str:
    """Untrusted text (reasons quote model output) as one clean terminal line: controls and hidden characters escaped."""
    line = one_line(text)
    return line if len(line) <= width else line[: width - 1] + "…"


def _int(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


_FORMATS = {"pass_rate": _pct, "cost_usd": _usd, "p50_ms": _ms, "p99_ms": _ms, "tokens_input": _int, "tokens_output": _int}
_LABELS = {
    "pass_rate": "pass rate",
    "cost_usd": "cost",
    "p50_ms": "p50",
    "p99_ms": "p99",
    "tokens_input": "tokens in",
    "tokens_output": "tokens out",
}


def _delta(key: str, m: Metric) -> str:
    d = m["delta"]
    if d is None:
        return "—"
    if key == "pass_rate":
        return f"{d * 100:+.1f}pp"
    sign = "+" if d >= 0 else "-"
    text = {"cost_usd": f"{sign}{_usd(abs(d))}", "p50_ms": f"{sign}{_ms(abs(d))}", "p99_ms": f"{sign}{_ms(abs(d))}"}.get(key, f"{d:+,.0f}")
    if m["relative"] is not None:
        text += f" ({m['relative'] * 100:+.0f}%)"
    return text


def _target_metrics(m: TargetDelta) -> list[tuple[str, Metric]]:
    return [
        ("pass_rate", m["pass_rate"]),
        ("cost_usd", m["cost_usd"]),
        ("p50_ms", m["p50_ms"]),
        ("p99_ms", m["p99_ms"]),
        ("tokens_input", m["tokens_input"]),
        ("tokens_output", m["tokens_output"]),
    ]


def _case_line(c: CaseChange | FlakyChange) -> str:
    return f"{show_id(c['target'])}  {show_id(c['dataset'])}/{show_id(c['case_id'])}"


def _runs_suffix(c: CaseChange | FlakyChange | Mapping[str, Any]) -> str:
    return f" [{c['passed']}/{c['runs']} passed]" if c.get("runs", 0) > 1 else ""


def format_comparison(cmp: Comparison) -> str:
    from tabulate import tabulate  # type: ignore[import-untyped,unused-ignore]

    a, b = cmp["a"], cmp["b"]
    lines = [f"Comparing {a['run_id']} (A, baseline) → {b['run_id']} (B)", ""]
    rows = [[_LABELS[k], _FORMATS[k](m["a"]), _FORMATS[k](m["b"]), _delta(k, m)] for k, m in cmp["overall"].items()]
    lines.append(
        str(
            tabulate(
                rows,
                headers=["overall", "A", "B", "Δ"],
                tablefmt="simple",
                disable_numparse=True,
                colalign=["left", "right", "right", "right"],
            )
        )
    )
    if cmp["per_target"]:
        rows = []
        for t, td in cmp["per_target"].items():
            note = "" if td["in_a"] and td["in_b"] else (" (only in B)" if td["in_b"] else " (only in A)")
            rows.append(
                [_safe(t, 40) + note]
                + [f"{_pct(td['pass_rate']['a'])} → {_pct(td['pass_rate']['b'])}"]
                + [_delta(k, metric) for k, metric in _target_metrics(td)]
            )
        lines += [
            "",
            str(
                tabulate(
                    rows,
                    headers=["target", "pass rate", "Δ pass", "Δ cost", "Δ p50", "Δ p99", "Δ tokens in", "Δ tokens out"],
                    tablefmt="simple",
                    disable_numparse=True,
                )
            ),
        ]
    for key, title, items, total in (
        ("newly_failing", "Newly failing", cmp["newly_failing"], cmp["newly_failing_total"]),
        ("newly_passing", "Newly passing", cmp["newly_passing"], cmp["newly_passing_total"]),
    ):
        lines += ["", f"{title} ({total}):" if total else f"{title}: none"]
        for c in items:
            why = f" — {_safe(c['reason'])}" if c.get("reason") else ""
            was = " (was failing: " if key == "newly_passing" else ""
            if was:
                lines.append(f"  {_safe(_case_line(c), 100)}{_runs_suffix(c)}{was}{_safe(c.get('reason') or c['was'])})")
            else:
                lines.append(f"  {_safe(_case_line(c), 100)}{_runs_suffix(c)}{why}")
        if total > len(items):
            lines.append(f"  … and {total - len(items)} more")
    if cmp["flaky_changed_total"]:
        lines += ["", f"Flaky status changed ({cmp['flaky_changed_total']}):"]
        for f in cmp["flaky_changed"]:
            change = "now flaky" if f["now_flaky"] else "no longer flaky"
            lines.append(f"  {_safe(_case_line(f), 100)}: {change} ({f['was_passed']}/{f['was_runs']} → {f['passed']}/{f['runs']} passed)")
    extra = []
    if cmp["new_cases"]:
        extra.append(f"{cmp['new_cases']} cases only in B ({cmp['new_cases_failing']} failing)")
    if cmp["removed_cases"]:
        extra.append(f"{cmp['removed_cases']} cases only in A")
    if extra:
        lines += ["", "; ".join(extra)]
    return "\n".join(lines) + "\n"


def comparison_table(cmp: Comparison) -> tuple[list[str], list[list[str]], list[str]]:
    """The comparison as a table for a page: (headers, rows: overall figures then each target's, notes: the changed cases)."""
    head = ["", "A (baseline)", "B", "Δ"]
    rows = [[_LABELS[k], _FORMATS[k](m["a"]), _FORMATS[k](m["b"]), _delta(k, m)] for k, m in cmp["overall"].items()]
    for t, td in cmp["per_target"].items():
        note = "" if td["in_a"] and td["in_b"] else (" (only in B)" if td["in_b"] else " (only in A)")
        delta = _delta("pass_rate", td["pass_rate"])
        rows.append([f"pass rate of {_safe(t, 80)}{note}", _pct(td["pass_rate"]["a"]), _pct(td["pass_rate"]["b"]), delta])
    notes = []
    for title, items, total in (
        ("Newly failing", cmp["newly_failing"], cmp["newly_failing_total"]),
        ("Newly passing", cmp["newly_passing"], cmp["newly_passing_total"]),
    ):
        shown = ", ".join(_safe(_case_line(c), 100) for c in items[:10])
        more = f" and {total - min(len(items), 10)} more" if total > min(len(items), 10) else ""
        notes.append(f"{title} ({total}): {shown}{more}" if total else f"{title}: none")
    if cmp["flaky_changed_total"]:
        notes.append(f"Flaky status changed: {cmp['flaky_changed_total']}")
    if cmp["new_cases"]:
        notes.append(f"{cmp['new_cases']} cases only in B ({cmp['new_cases_failing']} failing)")
    if cmp["removed_cases"]:
        notes.append(f"{cmp['removed_cases']} cases only in A")
    return head, rows, notes


def _arrow(key: str, m: Metric, *, higher_is_better: bool) -> str:
    fmt = _FORMATS[key]
    d = m["delta"]
    if m["a"] is None or m["b"] is None or d is None:
        return f"{fmt(m['a'])} → {fmt(m['b'])}"
    if abs(d) < 1e-12:
        verdict = "no change"
    else:
        better = (d > 0) == higher_is_better
        verdict = _delta(key, m) + ("" if better else ", regression")
    return f"{fmt(m['a'])} → {fmt(m['b'])} ({verdict})"


def format_vs_previous(cmp: Comparison) -> str:
    """The short block printed after a run's summary when it has a baseline."""
    o = cmp["overall"]
    lines = [
        f"vs. previous run ({cmp['a']['run_id']}):",
        f"  Pass rate: {_arrow('pass_rate', o['pass_rate'], higher_is_better=True)}",
        f"  Cost: {_arrow('cost_usd', o['cost_usd'], higher_is_better=False)}",
        f"  P99: {_arrow('p99_ms', o['p99_ms'], higher_is_better=False)}",
        f"  Cases: {cmp['newly_failing_total']} newly failing, {cmp['newly_passing_total']} newly passing",
    ]
    for c in cmp["newly_failing"][:20]:
        why = f" — {_safe(c['reason'], 100)}" if c.get("reason") else ""
        lines.append(f"    ✗ {_safe(_case_line(c), 80)}{why}")
    for c in cmp["newly_passing"][:20]:
        lines.append(f"    ✓ {_safe(_case_line(c), 80)}")
    return "\n".join(lines) + "\n"


def md_escape(text: Any, width: int = 200) -> str:
    """Untrusted text as one line of Markdown text: nothing in it is markup, a mention or a reference (:func:`markdown_text`)."""
    return markdown_text(text, width)


def md_code(text: Any, width: int = 200, *, table: bool = False) -> str:
    """Untrusted text for a Markdown code span (:func:`markdown_code`)."""
    return markdown_code(text, width, table=table)


def markdown_cases(title: str, items: list[CaseChange] | list[FailureRow], total: int, max_rows: int = 50) -> list[str]:
    """A Markdown table of cases (at most ``max_rows`` rows, then ``… N more``) under ``**title (total)**``."""
    if not total:
        return []
    lines = [f"**{title} ({total})**", "", "| target | case | reason |", "|---|---|---|"]
    for c in items[:max_rows]:
        lines.append(
            f"| {md_escape(show_id(c['target']))} | {md_escape(show_id(c['dataset']))}/{md_escape(show_id(c['case_id']))}{_runs_suffix(c)} "
            f"| {md_escape(c.get('reason') or c.get('was') or '')} |"
        )
    if total > min(len(items), max_rows):
        lines.append(f"| … | {total - min(len(items), max_rows)} more | |")
    return lines + [""]


def markdown_comparison(cmp: Comparison) -> str:
    a, b = cmp["a"], cmp["b"]
    lines = [f"### evalx compare: `{md_code(a['run_id'])}` → `{md_code(b['run_id'])}`", "", "| | A | B | Δ |", "|---|--:|--:|--:|"]
    for k, m in cmp["overall"].items():
        lines.append(f"| {_LABELS[k]} | {_FORMATS[k](m['a'])} | {_FORMATS[k](m['b'])} | {_delta(k, m)} |")
    lines.append("")
    if cmp["per_target"]:
        lines += ["| target | pass rate A → B | Δ cost | Δ p99 |", "|---|--:|--:|--:|"]
        for t, td in cmp["per_target"].items():
            lines.append(
                f"| {md_escape(t)} | {_pct(td['pass_rate']['a'])} → {_pct(td['pass_rate']['b'])} "
                f"| {_delta('cost_usd', td['cost_usd'])} | {_delta('p99_ms', td['p99_ms'])} |"
            )
        lines.append("")
    lines += markdown_cases("Newly failing", cmp["newly_failing"], cmp["newly_failing_total"])
    lines += markdown_cases("Newly passing", cmp["newly_passing"], cmp["newly_passing_total"])
    if cmp["flaky_changed_total"]:
        lines += [f"**Flaky status changed ({cmp['flaky_changed_total']})**", ""]
        for f in cmp["flaky_changed"][:50]:
            lines.append(
                f"- {md_escape(f['target'])} {md_escape(f['dataset'])}/{md_escape(f['case_id'])}: "
                + ("now flaky" if f["now_flaky"] else "no longer flaky")
            )
        lines.append("")
    return "\n".join(lines)
