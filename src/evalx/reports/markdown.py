"""A run's Markdown summary for CI: the headline, the gates and the newly failing cases.

Written to ``--markdown PATH`` and appended to ``$GITHUB_STEP_SUMMARY`` when
that is set (GitHub Actions shows it on the run's page). Model output is
untrusted: every cell is one line with ``|``, ``<`` and ``>`` escaped.
"""

from __future__ import annotations

import os
from pathlib import Path

from evalx.display import show_id
from evalx.errors import writing
from evalx.figures import pct as _pct
from evalx.figures import usd as _usd
from evalx.reports.pairwise import markdown_pairwise
from evalx.results.compare import markdown_cases, md_escape
from evalx.results.model import RunSummary

__all__ = ["markdown_summary", "publish_markdown"]


def markdown_summary(summary: RunSummary) -> str:
    totals = summary["totals"]
    gates = summary.get("gates")
    if gates and gates["active"]:
        icon = "✅" if gates["passed"] else "❌"
    else:
        icon = "✅" if not (totals["fail"] or totals["error"]) else "❌"
    name = f" — {md_escape(summary['name'])}" if summary.get("name") else ""
    cost = summary.get("cost_usd")
    p99 = (summary.get("latency_ms") or {}).get("p99")
    lines = [
        f"## {icon} evalx run `{md_escape(summary.get('run_id', ''))}`{name}",
        "",
        f"**Pass rate {_pct(totals.get('pass_rate'))}** · {totals.get('cells', 0)} cells: {totals.get('pass', 0)} pass · "
        f"{totals.get('fail', 0)} fail · {totals.get('error', 0)} error · {totals.get('skipped', 0)} skipped"
        + (f" · cost {_usd(cost)}" if isinstance(cost, (int, float)) else "")
        + (f" · p99 {p99:.0f}ms" if isinstance(p99, (int, float)) else ""),
        "",
    ]
    per_target = summary.get("per_target") or {}
    if len(per_target) > 1:
        lines += ["| target | cells | pass rate |", "|---|--:|--:|"]
        lines += [f"| {md_escape(show_id(t))} | {v.get('cells', 0)} | {_pct(v.get('pass_rate'))} |" for t, v in per_target.items()]
        lines.append("")
    lines += markdown_pairwise(summary.get("pairwise") or [])
    comparison = summary.get("comparison")
    if comparison:
        o = comparison["overall"]
        lines.append(
            f"vs. baseline `{md_escape(comparison['a']['run_id'])}`: pass rate {_pct(o['pass_rate']['a'])} → {_pct(o['pass_rate']['b'])}, "
            f"{comparison['newly_failing_total']} newly failing, {comparison['newly_passing_total']} newly passing"
        )
        lines.append("")
    for w in gates["warnings"] if gates else []:
        lines += [f"> ⚠️ {md_escape(w, 300)}", ""]
    if gates and gates["results"]:
        lines += ["| gate | scope | result | detail |", "|---|---|---|---|"]
        for r in gates["results"]:
            word = "✅ held" if r["held"] else "❌ breached" if r["held"] is False else "n/a"
            lines.append(f"| `{r['gate']}` | {md_escape(r['scope'])} | {word} | {md_escape(r['detail'], 300)} |")
        lines.append("")
    if comparison:
        lines += markdown_cases("Newly failing", comparison["newly_failing"], comparison["newly_failing_total"])
    elif summary.get("failures"):
        failures = summary["failures"]
        lines += markdown_cases("Failing cells", failures, summary.get("failures_total", len(failures)))
    guard = summary.get("cost_guard")
    if guard and guard["skipped"]:
        lines += [f"> 💸 {md_escape(guard['message'] or '', 300)}", ""]
    return "\n".join(lines) + "\n"


def publish_markdown(summary: RunSummary, path: Path | None) -> list[Path]:
    """Write ``path`` (if given) and append to ``$GITHUB_STEP_SUMMARY`` (if set)."""
    text = markdown_summary(summary)
    written = []
    if path is not None:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        written.append(path)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with writing(step), open(step, "a", encoding="utf-8") as f:
            f.write(text + "\n")
        written.append(Path(step))
    return written
