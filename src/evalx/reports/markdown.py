"""A run's Markdown summary for CI: the headline, the gates, the newly failing cases and per-target breakdowns.

Written to ``--markdown PATH`` and appended to ``$GITHUB_STEP_SUMMARY`` when
that is set (GitHub Actions shows it on the run's page). Model output is
untrusted: every cell is one line with ``|``, ``<`` and ``>`` escaped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from evalx.common.atomic import write_text
from evalx.errors import writing
from evalx.reports.breakdown import cross_table, score_text
from evalx.reports.pairwise import markdown_disagreements, markdown_pairwise
from evalx.reports.text import pooled_footnote, slow_line
from evalx.results.compare import markdown_cases, md_code, md_escape
from evalx.results.display import show_id
from evalx.results.figures import ci as _ci
from evalx.results.figures import finite, whole
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd
from evalx.results.model import RunSummary, TargetFigures
from evalx.results.outcome import interruption
from evalx.results.reviews import reviews_line
from evalx.results.summary import listed_failures

__all__ = ["MAX_FAILURE_ROWS", "failing_sections", "markdown_summary", "publish_markdown"]


def markdown_summary(summary: RunSummary) -> str:
    totals = summary["totals"]
    gates = summary.get("gates")
    if gates and gates["active"]:
        icon = "✅" if gates["passed"] else "❌"
    else:
        icon = "✅" if not (totals["fail"] or totals["error"]) else "❌"
    shard, merged = summary.get("shard"), summary.get("merged")
    if shard:  # a shard has no verdict: `evalx merge` of every shard gates
        icon = "🧩"
    name = f" — {md_escape(summary['name'])}" if summary.get("name") else ""
    cost = summary.get("cost_usd")
    p99 = (summary.get("latency_ms") or {}).get("p99")
    per_target = summary.get("per_target") or {}
    several = len(per_target) > 1  # different models: no pooled headline, a row and a table per target
    stopped = interruption(summary)
    if stopped:  # first, in the heading: the figures below are a part of the plan
        how = stopped[1].removeprefix("resume: ")
        lines = [
            f"## ⏹️ {stopped[0]} — evalx run `{md_code(summary.get('run_id', ''))}`{name}",
            "",
            f"> Resume: `{md_code(how, 300)}`" if how != stopped[1] else f"> {md_escape(how)}",
            "",
        ]
    else:
        lines = [f"## {icon} evalx run `{md_code(summary.get('run_id', ''))}`{name}", ""]
    lines += [
        (f"**{len(per_target)} targets**" if several else f"**Pass rate {_pct(totals.get('pass_rate'))}**")
        + f" · {whole(totals.get('cells', 0))} cells: {whole(totals.get('pass', 0))} pass · "
        f"{whole(totals.get('fail', 0))} fail · {whole(totals.get('error', 0))} error · {whole(totals.get('skipped', 0))} skipped"
        + (f" · cost {_usd(cost)}" if isinstance(cost, (int, float)) else "")
        + (f" · p99 {p99:.0f}ms" if isinstance(p99, (int, float)) else ""),
        "",
    ]
    if shard:
        lines += [
            f"Shard {whole(shard['index'])}/{whole(shard['count'])}: gates and the baseline are applied by `evalx merge` of every shard.",
            "",
        ]
    if merged:
        missing = ", ".join(f"{i}/{merged['count']}" for i in merged["missing"])
        lines += [f"Merged from {len(merged['shards'])} of {merged['count']} shards.", ""]
        lines += [f"> ⚠️ PARTIAL: shard {missing} missing; their cells are not in this run.", ""] if merged["partial"] else []
    if several:
        lines += ["| target | cells | pass rate | 95% CI | mean score |", "|---|--:|--:|--:|--:|"]
        lines += [
            f"| {md_escape(show_id(t))} | {whole(v.get('cells', 0))} | **{_pct(v.get('pass_rate'))}** | {_ci(v.get('pass_rate_ci'))} "
            f"| {score_text(finite(v.get('mean_score')))} |"
            for t, v in per_target.items()
        ]
        lines.append("")
    reviewed = reviews_line(summary)
    if reviewed:
        lines += [f"🧑‍⚖️ {reviewed}.", ""]
    lines += markdown_pairwise(summary.get("pairwise") or [])
    lines += markdown_disagreements(summary.get("judge_disagreements"))
    comparison = summary.get("comparison")
    if comparison:
        o = comparison["overall"]
        lines.append(
            f"vs. baseline `{md_code(comparison['a']['run_id'])}`: pass rate {_pct(o['pass_rate']['a'])} → {_pct(o['pass_rate']['b'])}, "
            f"{comparison['newly_failing_total']} newly failing, {comparison['newly_passing_total']} newly passing"
        )
        lines.append("")
    for w in gates["warnings"] if gates else []:
        lines += [f"> ⚠️ {md_escape(w, 300)}", ""]
    if gates and gates["results"]:
        lines += ["| gate | scope | result | detail |", "|---|---|---|---|"]
        for r in gates["results"]:
            word = "✅ held" if r["held"] else "❌ breached" if r["held"] is False else "n/a"
            lines.append(f"| `{md_code(r['gate'], table=True)}` | {md_escape(r['scope'])} | {word} | {md_escape(r['detail'], 300)} |")
        lines.append("")
    lines += failing_sections(summary)
    guard = summary.get("cost_guard")
    if guard and guard["skipped"]:
        lines += [f"> 💸 {md_escape(guard['message'] or '', 300)}", ""]
    for target_id, figures in per_target.items():
        lines += _breakdown(target_id, figures, several)
    lines += _output_sizes(per_target)
    slow = slow_line(summary)
    if slow:
        lines += [f"🐢 {md_escape(slow, 300)}", ""]
    if several:
        lines += [f"<sub>{md_escape(pooled_footnote(totals, len(per_target)), 300)}</sub>", ""]
    return "\n".join(lines) + "\n"


def _output_sizes(per_target: Mapping[str, TargetFigures]) -> list[str]:
    """Output tokens, characters and latency by difficulty, per target: do the hard cases answer at more length?"""
    rows = []
    for target_id, figures in per_target.items():
        for name, group in (figures.get("per_difficulty") or {}).items():
            sizes = group.get("outputs")
            if sizes is None:
                continue
            tokens, chars, latency = sizes["output_tokens"], sizes["output_chars"], sizes["latency_ms"]
            cells = [md_escape(show_id(target_id)), md_escape(show_id(name))]
            cells += [_number(tokens["mean"]), _number(tokens["p95"]), _number(chars["mean"]), _number(chars["p95"])]
            cells += [_ms(latency["mean"]), _ms(latency["p95"])]
            rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    head = "| target | difficulty | tokens out, mean | p95 | characters, mean | p95 | latency, mean | p95 |"
    return ["### Output size by difficulty", "", head, "|---|---|--:|--:|--:|--:|--:|--:|", *rows, ""]


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _breakdown(target_id: str, figures: TargetFigures, several: bool) -> list[str]:
    """A target's category × difficulty table with its mean score (the golden_qa runner's breakdown), in Markdown."""
    cross = cross_table(figures)
    if cross is None:
        return []
    scored = cross.total.scored
    mean = f"mean score **{score_text(cross.total.mean_score)}**"
    if scored:
        mean += f" over {scored} scored cell{'s' if scored != 1 else ''}"
    lines = [f"### By category and difficulty: `{md_code(show_id(target_id))}`" if several else "### By category and difficulty", ""]
    if several:
        lines += [f"Pass rate **{_pct(finite(figures.get('pass_rate')))}** (95% CI {_ci(figures.get('pass_rate_ci'))}) · {mean}", ""]
    else:
        lines += [mean[0].upper() + mean[1:], ""]
    headers = ["category", *(md_escape(d) for d in cross.difficulties), "all", "mean score"]
    lines += ["| " + " | ".join(headers) + " |", "|---|" + "--:|" * (len(headers) - 1)]
    for row in [*cross.rows, cross.total]:
        name = "**all**" if row is cross.total else md_escape(show_id(row.name))
        cells = [c.text() for c in row.cells]
        lines.append("| " + " | ".join([name, *cells, row.all.text(), score_text(row.mean_score)]) + " |")
    return [*lines, ""]


def publish_markdown(summary: RunSummary, path: Path | None) -> list[Path]:
    """Write ``path`` (if given) and append to ``$GITHUB_STEP_SUMMARY`` (if set)."""
    text = markdown_summary(summary)
    written = []
    if path is not None:
        write_text(path, text)
        written.append(path)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with writing(step), open(step, "a", encoding="utf-8") as f:
            f.write(text + "\n")
        written.append(Path(step))
    return written


#: rows of the failing cells' table
MAX_FAILURE_ROWS = 50


def failing_sections(summary: RunSummary, max_rows: int = MAX_FAILURE_ROWS) -> list[str]:
    """The failing cells, always: with a baseline, the newly failing cases first, then the cells still failing.

    A red job must name the failures that made it red: "0 newly failing" alone names none (issue 36).
    """
    comparison = summary.get("comparison")
    if not comparison:
        return _failing_cells(summary, "Failing cells", set(), max_rows)
    newly = comparison["newly_failing"]
    lines = markdown_cases("Newly failing", newly, comparison["newly_failing_total"], max_rows)
    keys = {(c["target"], c["dataset"], c["case_id"]) for c in newly}
    title = "Still failing" if not comparison.get("new_cases_failing") else "Still failing, or new since the baseline"
    return lines + _failing_cells(summary, title, keys, max_rows)


def _failing_cells(summary: RunSummary, title: str, exclude: set[tuple[str, str, str]], max_rows: int) -> list[str]:
    """The failing cells as a table (less those of the cases in ``exclude``), an error cells of a target share in one row."""
    listed = [item for item in listed_failures(summary) if (item.row["target"], item.row["dataset"], item.row["case_id"]) not in exclude]
    left_out = sum(1 for row in summary.get("failures") or [] if (row["target"], row["dataset"], row["case_id"]) in exclude)
    total = max(0, int(summary.get("failures_total", len(summary.get("failures") or [])) or 0) - left_out)
    if not total:
        return []
    shown = listed[:max_rows]
    lines = [f"**{title} ({total})**", "", "| target | case | reason |", "|---|---|---|"]
    for item in shown:
        f = item.row
        case = f"{md_escape(show_id(f['dataset']))}/{md_escape(show_id(f['case_id']))}"
        if item.count > 1:  # an error these cells share, said once
            case = f"{item.count} cells (first {case})"
        lines.append(f"| {md_escape(show_id(f['target']))} | {case} | {md_escape(f.get('reason') or '')} |")
    more = max(0, total - sum(item.count for item in shown))
    if more:
        lines.append(f"| … | {more} more | |")
    return lines + [""]
