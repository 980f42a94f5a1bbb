"""A run as a pull-request comment (``evalx comment``): the headline per target, the gates, what changed, cost, a link.

The comment opens with a hidden marker (:func:`marker`), by which ``evalx
comment --post`` finds its own earlier comment and updates it instead of
adding one per push. It lists the failing cells always: the cases newly
failing against the baseline first, then those newly passing, then the
cells still failing. It stays within :data:`MAX_COMMENT_CHARS` (GitHub's
limit on a comment's body, counted in UTF-16 code units as GitHub counts
them): when the full lists do not fit, fewer rows are shown and each table
says how many more there are, with a link to the full report.

Model output is untrusted: every table cell goes through ``md_escape`` (one
line, no HTML, no pipes).
"""

from __future__ import annotations

import re

from evalx.reports.markdown import failing_sections
from evalx.results.compare import markdown_cases, md_code, md_escape
from evalx.results.display import show_id
from evalx.results.figures import pct, points, usd, whole
from evalx.results.model import Comparison, GateResult, RunSummary
from evalx.results.outcome import interruption

__all__ = ["MAX_COMMENT_CHARS", "comment_markdown", "marker", "size"]

#: GitHub's limit on a comment's body (GitLab's is larger)
MAX_COMMENT_CHARS = 65_536
#: rows of each table when everything fits
MAX_ROWS = 50
#: gate lines listed, breached ones first
MAX_GATE_LINES = 30

_MARKER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def marker(comment_id: str = "") -> str:
    """The hidden first line that identifies evalx's comment (one per ``comment_id``, so two configs keep two comments)."""
    if comment_id and not _MARKER_ID.match(comment_id):
        raise ValueError(f"comment id {comment_id!r}: letters, digits, '.', '_' and '-' only (at most 64)")
    return f"<!-- evalx-comment:{comment_id} -->" if comment_id else "<!-- evalx-comment -->"


def size(text: str) -> int:
    """``text``'s length as GitHub counts it (UTF-16 code units: an emoji is two)."""
    return len(text.encode("utf-16-le")) // 2


def comment_markdown(
    summary: RunSummary,
    *,
    comparison: Comparison | None = None,
    artifact_url: str | None = None,
    comment_id: str = "",
    note: str | None = None,
    limit: int = MAX_COMMENT_CHARS,
) -> str:
    """The comment for the run ``summary`` (compared with a baseline: ``comparison``, else the one the run stored)."""
    if comparison is not None:
        summary = {**summary, "comparison": comparison}
    rows = MAX_ROWS
    while True:
        text = _render(summary, rows, artifact_url, comment_id, note)
        if size(text) <= limit:
            return text
        if rows == 0:
            break
        rows //= 2
    # even without table rows it is too long (thousands of targets or gates): cut, and say so
    tail = "\n\n… (cut to fit a comment" + (f": [the full report]({artifact_url})" if artifact_url else "") + ")\n"
    budget = limit - size(tail)
    cut = text
    while size(cut) > budget:
        cut = cut[: max(0, len(cut) - (size(cut) - budget) - 1)]
    return cut.rsplit("\n", 1)[0] + tail


def _render(summary: RunSummary, rows: int, artifact_url: str | None, comment_id: str, note: str | None) -> str:
    comparison = summary.get("comparison")
    gates = summary.get("gates")
    totals = summary["totals"]
    failed = bool(totals.get("fail") or totals.get("error"))
    passed = gates["passed"] if gates and gates["active"] else not failed
    stopped = interruption(summary)
    icon = "⏹️" if stopped else "✅" if passed else "❌"
    name = str(summary.get("name") or "")
    lines = [marker(comment_id), f"## {icon} evalx{': ' + md_escape(name) if name else ''}", ""]
    about = f"run `{md_code(summary.get('run_id', ''))}`"
    if comparison:
        about += f" · vs. baseline `{md_code(comparison['a']['run_id'])}`"
    elif not (gates and gates.get("baseline")):
        about += " · no baseline"
    lines += [about, ""]
    if stopped:  # the figures below are a part of the plan: say so, and how to finish it
        how = stopped[1].removeprefix("resume: ")
        finish = f"Resume: `{how}`" if how != stopped[1] else md_escape(how, 300)
        lines += [f"> ⏹️ **{md_escape(stopped[0], 300)}**", ">", f"> {finish}", ""]
    if note:
        lines += [f"> {md_escape(note, 500)}", ""]
    lines += _targets(summary, comparison)
    lines += _gates(gates["results"] if gates else [], gates["warnings"] if gates else [])
    if comparison:
        lines += markdown_cases("Newly passing", comparison["newly_passing"], comparison["newly_passing_total"], rows)
    lines += failing_sections(summary, rows)
    lines += _cost(summary, comparison)
    if artifact_url:
        lines += [f"📦 [Full report: the run's files (report.html, junit.xml, results)]({artifact_url})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _targets(summary: RunSummary, comparison: Comparison | None) -> list[str]:
    per_target = summary.get("per_target") or {}
    if not per_target:
        return []
    deltas = comparison["per_target"] if comparison else {}
    lines = ["| target | pass rate | cells | pass · fail · error · skipped |" + (" vs. baseline |" if comparison else ""),
             "|---|--:|--:|---|" + ("--:|" if comparison else "")]  # fmt: skip
    for target, figures in per_target.items():
        row = (
            f"| {md_escape(show_id(target))} | **{pct(figures.get('pass_rate'))}** | {whole(figures.get('cells', 0))} "
            f"| {whole(figures.get('pass', 0))} · {whole(figures.get('fail', 0))} · {whole(figures.get('error', 0))} "
            f"· {whole(figures.get('skipped', 0))} |"
        )
        if comparison:
            delta = deltas.get(target)
            row += f" {points(delta['pass_rate']['delta']) if delta and delta['in_a'] else 'new'} |"
        lines.append(row)
    return [*lines, ""]


def _gates(results: list[GateResult], warnings: list[str]) -> list[str]:
    lines = [f"> ⚠️ {md_escape(w, 300)}" for w in warnings[:5]]
    lines += [""] if lines else []
    if not results:
        return lines
    ordered = sorted(results, key=lambda r: {False: 0, None: 2}.get(r["held"], 1))
    breached = sum(1 for r in results if r["held"] is False)
    lines += [f"**Gates: {breached} of {len(results)} breached**" if breached else f"**Gates: all {len(results)} held or n/a**", ""]
    for r in ordered[:MAX_GATE_LINES]:
        word = "✅" if r["held"] else "❌" if r["held"] is False else "➖"
        lines.append(f"- {word} `{md_code(r['gate'])}` ({md_escape(r['scope'])}): {md_escape(r['detail'], 300)}")
    if len(ordered) > MAX_GATE_LINES:
        lines.append(f"- … {len(ordered) - MAX_GATE_LINES} more gate lines in the run's summary")
    return [*lines, ""]


def _cost(summary: RunSummary, comparison: Comparison | None) -> list[str]:
    cost = summary.get("cost_usd")
    judge = summary.get("judge_cost_usd")
    if not isinstance(cost, (int, float)) and not isinstance(judge, (int, float)):
        return []
    line = f"💰 Cost {usd(cost)}"
    if comparison:
        before = comparison["overall"]["cost_usd"]["a"]
        if isinstance(before, (int, float)):
            line += f" (baseline {usd(before)})"
    if isinstance(judge, (int, float)) and judge:
        line += f" · judge {usd(judge)}"
    return [line, ""]
