"""The terminal and ``summary.txt`` text of a run's summary (``summary.json``'s content).

Three lengths of one story, each opening with ``INTERRUPTED: ...`` and the
resume command when the run was interrupted:

- :func:`format_summary`, the full text: ``summary.txt`` and ``evalx run -v``;
- :func:`format_compact`, what ``evalx run`` prints: a headline per target,
  the failing cells with their reasons, and where the full report is (about
  twenty lines for the default run, however large the run);
- :func:`format_headline`, what ``--quiet`` prints (with the exit reason).

A cell is named the same way everywhere: ``dataset/case`` (and ``#rN`` for a
repeat), :func:`evalx.results.display.cell_label`. Tables have one style: a
header, a rule of ``-`` under each column, the rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tabulate import tabulate  # type: ignore[import-untyped,unused-ignore]  # no stubs shipped

from evalx.reports.pairwise import disagreement_lines, pairwise_lines
from evalx.results.display import cell_label, one_line, show_id
from evalx.results.figures import ci as _ci
from evalx.results.figures import clip as _clip
from evalx.results.figures import count as _count
from evalx.results.figures import duration as _duration
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import rate_limits_text, target_cost
from evalx.results.figures import usd as _usd
from evalx.results.model import CellCounts, Distribution, FlakyCase, FlakyTurn, GroupFigures, RunSummary, TargetFigures
from evalx.results.outcome import interruption
from evalx.results.reviews import reviews_line
from evalx.results.summary import listed_failures, unlisted

__all__ = [
    "cost_gaps",
    "flaky_lines",
    "flaky_turn_lines",
    "format_compact",
    "format_headline",
    "format_summary",
    "one_line",
    "pooled_footnote",
    "show_id",
    "text_table",
    "tokens_shown",
]

#: paints text with ANSI styles (``paint("3 fail", "red")``), or returns it as it is
Paint = Callable[..., str]

#: flaky cases listed in the text summary
MAX_FLAKY_LINES = 20
#: failing cases listed in the text summary
MAX_FAILURE_LINES = 30
#: failing cells, and targets, the compact summary lists
COMPACT_LINES = 10
#: rows of a table of targets, or of one target's categories / difficulties, before "… and N more": the
#: summary is as long for a million cells, or a matrix of thousands of variants, as for ten
MAX_TABLE_ROWS = 25
LINE_WIDTH = 120

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_ANSI = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


_NO_FIGURES: Distribution = {"p50": None, "p95": None, "p99": None, "mean": None, "total": None}


def _cells(n: int) -> str:
    return f"{n} cell{'s' if n != 1 else ''}"


def cost_gaps(missing: int | None, unknown: int | None) -> str | None:
    """What the run's cost leaves out: ``missing`` cells evalx could not price, ``unknown`` whose usage is unknown (None: nothing)."""
    if missing and unknown:
        return f"cost unknown for {_cells(missing)} (usage unknown for {_cells(unknown)})"
    if missing:
        return f"prices missing for {_cells(missing)}"
    if unknown:
        return f"usage unknown for {_cells(unknown)}"
    return None


def tokens_shown(tokens: int, unknown: int | None, cells: int | None) -> str:
    """A count of ``tokens`` over ``cells``: "—" when none of them reported usage (``unknown``), "≥ N" when some did not."""
    if unknown and unknown >= (cells or 0):
        return "—"
    return f"≥ {_count(tokens)}" if unknown else _count(tokens)


def _percentiles(figures: Distribution | None) -> list[str]:
    """p50, p95 and p99 of a latency distribution, formatted."""
    figures = figures or _NO_FIGURES
    return [_ms(figures.get("p50")), _ms(figures.get("p95")), _ms(figures.get("p99"))]


def flaky_lines(flaky: list[FlakyCase], paint: Paint) -> list[str]:
    """``  target  dataset/case  k/N  verdict`` lines for flaky cases, aligned."""
    if not flaky:
        return []
    labels = [cell_label(f.get("dataset"), f.get("case_id")) for f in flaky]
    width = max(len(show_id(f["target"])) for f in flaky)
    label_width = min(max(len(label) for label in labels), 60)
    out = []
    for f, label in zip(flaky, labels, strict=True):
        verdict = f.get("status")
        mark = paint("passes", "green") if verdict == "pass" else paint("fails", "red") if verdict else ""
        line = f"  {show_id(f['target']).ljust(width)}  {_clip(label, label_width).ljust(label_width)}  {f['passed']}/{f['runs']}"
        out.append(_clip(line, LINE_WIDTH) + (f"  {mark}" if mark else ""))
    return out


def flaky_turn_lines(flaky: list[FlakyTurn]) -> list[str]:
    """``  target  dataset/case  turn N  k/N`` lines for flaky turns of conversations, aligned."""
    if not flaky:
        return []
    labels = [cell_label(f.get("dataset"), f.get("case_id")) for f in flaky]
    width = max(len(show_id(f["target"])) for f in flaky)
    label_width = min(max(len(label) for label in labels), 60)
    turn_width = max(len(str(f["turn"])) for f in flaky)
    return [
        _clip(
            f"  {show_id(f['target']).ljust(width)}  {_clip(label, label_width).ljust(label_width)}"
            f"  turn {str(f['turn']).ljust(turn_width)}  {f['passed']}/{f['runs']}",
            LINE_WIDTH,
        )
        for f, label in zip(flaky, labels, strict=True)
    ]


def _more(total: int, what: str) -> list[str]:
    """``  … and N more WHAT (summary.json)`` when a table shows fewer than ``total`` rows."""
    left = total - MAX_TABLE_ROWS
    return [f"  … and {left:,} more {what} (summary.json)"] if left > 0 else []


def text_table(rows: list[list[str]], headers: list[str], numeric_from: int = 1) -> str:
    """evalx's one table style: the header, a rule of ``-`` sized to each column, the rows (numbers right-aligned)."""
    # "plain" with the header as a row, plus a rule sized to each column: tabulate's
    # header padding would otherwise add two blanks to every column
    widths = [max(len(_SGR.sub("", str(row[i]))) for row in [headers, *rows]) for i in range(len(headers))]
    rule = ["-" * w for w in widths]
    align = ["left"] * numeric_from + ["right"] * (len(headers) - numeric_from)
    return str(tabulate([headers, rule, *rows], tablefmt="plain", disable_numparse=True, colalign=align))


def _painter(color: bool) -> Paint:
    def paint(text: str, *styles: str) -> str:
        if not color or not styles:
            return text
        codes = ";".join(_ANSI[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    return paint


def _interrupted_lines(summary: RunSummary, paint: Paint) -> list[str]:
    """``INTERRUPTED: N of M planned cells`` and the resume command, first in every text; nothing for a finished run."""
    stopped = interruption(summary)
    return [paint(stopped[0], "red", "bold"), stopped[1]] if stopped else []


def _counts_text(c: CellCounts | GroupFigures, paint: Paint) -> str:
    parts = [paint(f"{c['pass']} pass", "green") if c["pass"] else "0 pass"]
    parts.append(paint(f"{c['fail']} fail", "red") if c["fail"] else "0 fail")
    if c["error"]:
        parts.append(paint(f"{c['error']} error", "red"))
    if c["skipped"]:
        parts.append(paint(f"{c['skipped']} skipped", "yellow"))
    return " · ".join(parts)


def _headline(summary: RunSummary, paint: Paint, limit: int) -> list[str]:
    """The run's first lines: interrupted or not, its id and name, and each target's pass rate with its counts."""
    totals = summary["totals"]
    per_target = summary.get("per_target") or {}
    duration = summary.get("duration_s")
    lines = _interrupted_lines(summary, paint)
    lines.append(
        paint(f"Run {summary['run_id']}", "bold")
        + (f"  {one_line(summary['name'])}" if summary.get("name") else "")
        + f"  ·  {totals['cells']:,} cell{'s' if totals['cells'] != 1 else ''}"
        + (f" in {_duration(duration)}" if isinstance(duration, (int, float)) else "")
    )
    rows = list(per_target.items())[:limit]
    if not rows:
        return lines
    ids = [show_id(target_id) for target_id, _ in rows]
    width = max(len("target"), *map(len, ids))
    for shown, (_, t) in zip(ids, rows):
        ci = f"  (95% CI {_ci(t['pass_rate_ci'])})" if t.get("pass_rate_ci") else ""
        lines.append(f"  {shown.ljust(width)}  {paint(_pct(t.get('pass_rate')).rjust(6), 'bold')}  {_counts_text(t, paint)}{ci}")
    if len(per_target) > limit:
        lines.append(f"  … and {len(per_target) - limit:,} more targets (summary.txt)")
    return lines


def _failure_lines(summary: RunSummary, paint: Paint, limit: int) -> list[str]:
    """``  target  dataset/case — reason`` for the failing and erroring cells, the first ``limit`` lines of them; an error
    cells of a target share is one line with their count (:func:`~evalx.results.summary.listed_failures`)."""
    listed = listed_failures(summary)[:limit]
    if not listed:
        return []
    width = max(len(show_id(entry.row["target"])) for entry in listed)
    lines = []
    for entry in listed:
        f = entry.row
        reason = one_line(f.get("reason") or "")
        if f.get("status") == "error":
            reason = f"error: {reason}"
        label = cell_label(f.get("dataset"), f.get("case_id"), f.get("repeat"))
        if entry.count > 1:  # an error these cells share, said once
            label = f"{entry.count} cells (first {label})"
        line = _clip(f"  {show_id(f['target']).ljust(width)}  {label} — {reason}", LINE_WIDTH)
        lines.append(paint(line, "red") if f.get("status") == "error" else line)
    not_listed = unlisted(summary, listed)
    if not_listed:
        lines.append(f"  … and {not_listed:,} more")
    return lines


def _inconclusive_text(summary: RunSummary) -> str | None:
    """Why cells were skipped, with what to do about a missing judge; None when every assertion was graded."""
    n = summary.get("inconclusive_assertions") or 0
    if not n:
        return None
    reasons = summary.get("inconclusive_reasons") or {}
    why = "; ".join(f"{count} {one_line(reason)}" for reason, count in list(reasons.items())[:3])
    text = f"{n} assertion{'s' if n != 1 else ''} could not be graded (no verdict, not failures)" + (f": {why}" if why else "")
    if any("no judge configured" in str(reason) for reason in reasons):
        text += " — add one: `judge: {target: ID}` names a model target (docs/judge.md)"
    return text


def format_headline(summary: RunSummary, *, color: bool = False) -> str:
    """What ``--quiet`` prints: the interrupted notice, the run line and each target's pass rate."""
    return "\n".join(_headline(summary, _painter(color), MAX_TABLE_ROWS)) + "\n"


def format_compact(summary: RunSummary, *, color: bool = False, where: str | None = None) -> str:
    """What ``evalx run`` prints: the headline per target, the failing cells with their reasons, and where the rest is.

    ``where``: the run's folder as the reader should see it (``runs/<id>``);
    the full summary is its ``summary.txt`` (or ``-v``), every cell its ``report.html``.
    """
    paint = _painter(color)
    lines = _headline(summary, paint, COMPACT_LINES)
    failures = _failure_lines(summary, paint, COMPACT_LINES)
    if failures:
        total = summary.get("failures_total", len(summary.get("failures") or []))
        lines += ["", f"Failing cells ({total:,}):", *failures]
    skipped = _inconclusive_text(summary)
    if skipped:
        lines += ["", paint(_clip(f"Skipped: {skipped}", 2 * LINE_WIDTH), "yellow")]
    slow = slow_line(summary)
    if slow:
        lines += ["", paint(slow, "yellow")]
    limited = rate_limits_text(summary.get("per_target"), show_id, only_waits=True)
    if limited:
        lines += ["", _clip(f"Rate limits: {limited}", 2 * LINE_WIDTH)]
    if where:
        lines += ["", f"Full summary: {where}/summary.txt (or -v) · every cell: {where}/report.html"]
    return "\n".join(lines) + "\n"


def format_summary(summary: RunSummary, *, color: bool = False, flaky_list: bool = True, pairwise: bool = True) -> str:
    """The text shown at the end of a run and stored as ``summary.txt``.

    ``flaky_list=False`` leaves out the names of flaky cases and
    ``pairwise=False`` the pairwise comparisons (the matrix view of a
    ``--matrix`` run shows both itself).
    """
    paint = _painter(color)

    def counts_row(c: CellCounts) -> list[str]:
        return [
            str(c["cells"]),
            paint(str(c["pass"]), "green") if c["pass"] else "0",
            paint(str(c["fail"]), "red") if c["fail"] else "0",
            paint(str(c["error"]), "red") if c["error"] else "0",
            paint(str(c["skipped"]), "yellow") if c["skipped"] else "0",
            _pct(c["pass_rate"]),
        ]

    table = text_table

    totals = summary["totals"]
    per_target = summary.get("per_target") or {}
    # several targets (or matrix variants) are different models: one pooled rate would
    # say nothing about any of them, so the headline and the breakdowns are per target
    several = len(per_target) > 1
    lines = [
        *_interrupted_lines(summary, paint),
        paint(f"Run {summary['run_id']}", "bold") + (f"  {one_line(summary['name'])}" if summary.get("name") else ""),
        (f"{len(per_target)} targets · " if several else "")
        + f"{totals['cells']} cells: "
        + " · ".join(
            [
                paint(f"{totals['pass']} pass", "green"),
                paint(f"{totals['fail']} fail", "red") if totals["fail"] else "0 fail",
                paint(f"{totals['error']} error", "red") if totals["error"] else "0 error",
                paint(f"{totals['skipped']} skipped", "yellow") if totals["skipped"] else "0 skipped",
            ]
        ),
    ]
    if several:
        lines += _headline_per_target(per_target, skipped=bool(totals["skipped"]), paint=paint)
    else:
        lines.append(
            f"Pass rate {paint(_pct(totals['pass_rate']), 'bold')}"
            + (f"  (95% CI {_ci(totals['pass_rate_ci'])})" if totals.get("pass_rate_ci") else "")
            + ("  skipped cells excluded" if totals["skipped"] else "")
        )

    if per_target:
        rows = []
        for target_id, t in list(per_target.items())[:MAX_TABLE_ROWS]:
            tokens = t["tokens"]["input"] + t["tokens"]["output"]
            rows.append(
                [show_id(target_id)]
                + counts_row(t)
                + [
                    _ms(t["latency_ms"]["p50"]),
                    _ms(t["latency_ms"]["p99"]),
                    tokens_shown(tokens, t.get("usage_unknown_cells"), t.get("cells")),
                    target_cost(t["cost_usd"], t.get("cost_missing_cells")),
                ]
            )
        headers = ["target", "cells", "pass", "fail", "error", "skip", "pass rate", "p50", "p99", "tokens", "cost"]
        lines += ["", table(rows, headers), *_more(len(per_target), "targets")]
        # streaming targets (engines, providers) report time to first token: show the
        # latency/TTFT percentiles, tokens and prompt-cache share per target
        if any((t.get("ttft_ms") or _NO_FIGURES).get("p50") is not None for t in per_target.values()):
            rows = []
            for target_id, t in list(per_target.items())[:MAX_TABLE_ROWS]:
                tok = t["tokens"]
                rows.append(
                    [show_id(target_id)]
                    + _percentiles(t["latency_ms"])
                    + _percentiles(t.get("ttft_ms"))
                    + [
                        tokens_shown(tok["input"], t.get("usage_unknown_cells"), t.get("cells")),
                        tokens_shown(tok["output"], t.get("usage_unknown_cells"), t.get("cells")),
                        _pct(t.get("cache_hit_ratio")),
                    ]
                )
            headers = ["target", "lat p50", "lat p95", "lat p99", "ttft p50", "ttft p95", "ttft p99", "tok in", "tok out", "cache hit"]
            lines += ["", table(rows, headers)]

    breakdowns: list[tuple[str, Mapping[str, GroupFigures] | None, dict[str, Mapping[str, GroupFigures] | None]]] = [
        ("category", summary.get("per_category"), {k: t.get("per_category") for k, t in per_target.items()}),
        ("difficulty", summary.get("per_difficulty"), {k: t.get("per_difficulty") for k, t in per_target.items()}),
    ]
    for title, pooled, own in breakdowns:
        if several and all(groups is not None for groups in own.values()):
            # one table, a block of rows a target: each target's own rates, never pooled
            rows = []
            left = 0  # rows not shown: at most 2 x MAX_TABLE_ROWS are
            for target_id, groups in own.items():
                listed = list((groups or {}).items())
                room = min(MAX_TABLE_ROWS, 2 * MAX_TABLE_ROWS - len(rows))
                left += max(0, len(listed) - room)
                for n, (name, c) in enumerate(listed[: max(room, 0)]):
                    rows.append([show_id(target_id) if n == 0 else "", show_id(name)] + counts_row(c) + [_ci(c["pass_rate_ci"])])
            if rows:
                headers = ["target", title, "cells", "pass", "fail", "error", "skip", "pass rate", "95% CI"]
                lines += ["", table(rows, headers, numeric_from=2)]
                lines += [f"  … and {left:,} more rows (summary.json)"] if left else []
        elif pooled:  # one target; or a summary from before per-target breakdowns, pooled and saying so
            named = list(pooled.items())
            rows = [[show_id(name)] + counts_row(c) + [_ci(c["pass_rate_ci"])] for name, c in named[:MAX_TABLE_ROWS]]
            label = title + (" (all targets pooled)" if several else "")
            lines += ["", table(rows, [label, "cells", "pass", "fail", "error", "skip", "pass rate", "95% CI"])]
            lines += _more(len(named), {"category": "categories", "difficulty": "difficulties"}.get(title, title))

    for title, pooled, own in breakdowns:  # do the harder cases answer at more length? (issue 35)
        lines += output_size_lines(title, pooled, own if several else {})

    repeats = summary.get("repeats")
    if repeats and repeats.get("per_target"):
        rule = summary.get("repeat_pass_rule") or repeats.get("repeat_pass_rule") or "majority"
        rows = []
        for target_id, r in repeats["per_target"].items():
            level = per_target[target_id].get("case_level") if target_id in per_target else None
            decided = level["cases"] - level["skipped"] if level else 0
            rows.append(
                [
                    show_id(target_id),
                    str(r["cases"]),
                    str(r["k"]),
                    f"{level['pass']}/{decided} {_pct(level.get('pass_rate'))}" if level else "—",
                    _ci(level.get("pass_rate_ci") if level else None),
                    _pct(r["pass_at_1"]),
                    _pct(r["pass_at_k"]),
                    _pct(r["pass_hat_k"]),
                    str(r["flaky_cases"]),
                ]
            )
        lines += ["", f"Repeats (up to {repeats['runs_per_case']} runs a case; a case passes by repeat_pass_rule: {rule}):"]
        lines.append(table(rows, ["target", "cases", "k", "cases passed", "95% CI", "pass@1", "pass@k", "pass^k", "flaky"]))
        flaky = repeats.get("flaky") or []
        if flaky and flaky_list:
            lines += ["", "Flaky cases (passed some repeats, not all):"]
            lines += flaky_lines(flaky[:MAX_FLAKY_LINES], paint)
            more = repeats.get("flaky_cases", len(flaky)) - min(len(flaky), MAX_FLAKY_LINES)
            if more > 0:
                lines.append(f"  … and {more} more (summary.json)")
        flaky_turns = repeats.get("flaky_turns") or []
        if flaky_turns and flaky_list:
            lines += ["", "Flaky turns (passed in some repeats, failed in others):"]
            lines += flaky_turn_lines(flaky_turns[:MAX_FLAKY_LINES])
            more = repeats.get("flaky_turns_total", len(flaky_turns)) - min(len(flaky_turns), MAX_FLAKY_LINES)
            if more > 0:
                lines.append(f"  … and {more} more (summary.json)")

    if pairwise and summary.get("pairwise"):
        lines += ["", *pairwise_lines(summary["pairwise"], paint)]
    disagreements = disagreement_lines(summary.get("judge_disagreements"))
    if disagreements:
        lines += ["", *disagreements]

    lines += slowest_lines(summary)
    failures = _failure_lines(summary, paint, MAX_FAILURE_LINES)
    if failures:
        lines += ["", "Failed cases:", *failures]

    lines.append("")
    cost = _usd(summary.get("cost_usd"))
    if summary.get("judge_cost_usd") is not None:
        cost += f" (+ {_usd(summary['judge_cost_usd'])} judge)"
    batched = summary.get("batched_cells") or 0
    if batched:
        cost += f" · {batched:,} cell{'s' if batched != 1 else ''} at the batch price"
    gaps = cost_gaps(summary.get("cost_missing_cells"), summary.get("usage_unknown_cells"))
    if gaps:
        cost += paint(f" · {gaps}", "yellow")
    latency = summary.get("latency_ms") or {}
    facts = [
        ("Cost", cost),
        ("Duration", _duration(summary.get("duration_s"))),
        ("Latency", f"p50 {_ms(latency.get('p50'))} · p95 {_ms(latency.get('p95'))} · p99 {_ms(latency.get('p99'))}"),
    ]
    cells = totals["cells"]
    if summary.get("cached_cells"):
        facts.append(
            (
                "Cache",
                f"{summary['cached_cells']} of {cells} cells from the response cache ({_pct(summary.get('response_cache_hit_ratio'))})",
            )
        )
    used = summary.get("tokens")
    if used and (used.get("input") or used.get("output")):
        text = f"{used['input']:,} in · {used['output']:,} out"
        if used.get("cache_hit"):
            text += f" · {used['cache_hit']:,} prompt-cache hits ({_pct(summary.get('cache_hit_ratio'))} of input)"
        facts.append(("Tokens", text))
    judge = summary.get("judge") or {}
    if judge.get("calls"):
        text = f"{judge['calls']:,} call{'s' if judge['calls'] != 1 else ''}"
        if judge.get("input_tokens") or judge.get("output_tokens"):
            text += f" · {judge['input_tokens']:,} in · {judge['output_tokens']:,} out"
        if summary.get("judge_cost_usd") is not None:
            text += f" · {_usd(summary['judge_cost_usd'])}"
        if judge.get("cached_calls"):
            text += f" · {judge['cached_calls']:,} from the response cache"
        facts.append(("Judge", text))
    truncated = summary.get("truncated_cells") or 0
    if truncated:
        facts.append(
            (
                "Truncated",
                paint(
                    f"{truncated} answer{'s' if truncated != 1 else ''} cut off at a token limit (the not_truncated check fails them)",
                    "yellow",
                ),
            )
        )
    inconclusive = _inconclusive_text(summary)
    if inconclusive:
        facts.append(("Inconclusive", paint(_clip(inconclusive, 2 * LINE_WIDTH), "yellow")))
    limited = rate_limits_text(summary.get("per_target"), show_id)
    if limited:
        facts.append(("Rate limits", _clip(limited, 2 * LINE_WIDTH)))
    reviewed = reviews_line(summary)
    if reviewed:
        facts.append(("Reviewed", paint(reviewed, "yellow")))
    label_width = max(len(label) for label, _ in facts)
    lines += [f"{label.ljust(label_width)}  {value}" for label, value in facts]
    if several:
        lines += ["", pooled_footnote(totals, len(per_target))]
    return "\n".join(lines) + "\n"


def _tokens_figure(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def output_size_lines(
    title: str, pooled: Mapping[str, GroupFigures] | None, own: Mapping[str, Mapping[str, GroupFigures] | None]
) -> list[str]:
    """A table of output tokens, characters and latency (mean and p95) by ``title`` (category or difficulty).

    Per target (``own``) when several targets ran, else ``pooled``; nothing for a summary without the figures.
    """
    blocks = [(target_id, groups) for target_id, groups in own.items() if groups] if own else [("", pooled)]
    rows: list[list[str]] = []
    left = 0  # rows not shown: at most MAX_TABLE_ROWS are (the counts tables above say which groups there are)
    for target_id, groups in blocks:
        listed = list((groups or {}).items())
        room = max(0, MAX_TABLE_ROWS - len(rows))
        left += max(0, len(listed) - room)
        for n, (name, figures) in enumerate(listed[:room]):
            sizes = figures.get("outputs")
            if sizes is None:
                continue
            tokens, chars, latency = sizes["output_tokens"], sizes["output_chars"], sizes["latency_ms"]
            row = [show_id(target_id) if n == 0 else ""] if own else []
            rows.append(
                row
                + [
                    show_id(name),
                    _tokens_figure(tokens["mean"]),
                    _tokens_figure(tokens["p95"]),
                    _tokens_figure(chars["mean"]),
                    _tokens_figure(chars["p95"]),
                    _ms(latency["mean"]),
                    _ms(latency["p95"]),
                ]
            )
    if not rows or (title == "category" and len(rows) < 2 and not own):
        return []  # one category and one target: the totals say it all
    headers = (["target"] if own else []) + [title, "tok out mean", "tok out p95", "chars mean", "chars p95", "lat mean", "lat p95"]
    more = [f"  … and {left:,} more rows (summary.json)"] if left else []
    return ["", f"Output size by {title}:", text_table(rows, headers, numeric_from=2 if own else 1), *more]


def slow_line(summary: RunSummary) -> str | None:
    """One line about the cells over ``defaults.slow_ms`` (the compact summary, Markdown), or None when none is."""
    slowest = summary.get("slowest")
    if not slowest or slowest.get("threshold_ms") is None or not slowest.get("over_threshold") or not slowest.get("cells"):
        return None
    over, first = slowest["over_threshold"], slowest["cells"][0]
    where = f"{cell_label(first['dataset'], first['case_id'], first['repeat'])} on {show_id(first['target'])}"
    return f"Slow: {over:,} cell{'s' if over != 1 else ''} over slow_ms {_ms(slowest['threshold_ms'])} (slowest: {where}, {_ms(first['latency_ms'])})"


def slowest_lines(summary: RunSummary) -> list[str]:
    """The slowest cells; with ``defaults.slow_ms``, those over it (the seeds' harness printed its slow cases)."""
    slowest = summary.get("slowest")
    if not slowest or not slowest.get("cells"):
        return []
    threshold, over = slowest.get("threshold_ms"), slowest.get("over_threshold")
    if threshold is not None and over:
        head = f"Slow cells ({over:,} over slow_ms {_ms(threshold)}):"
    else:
        head = "Slowest cells:" if threshold is None else f"Slowest cells (none over slow_ms {_ms(threshold)}):"
    rows = [
        [show_id(c["target"]), cell_label(c["dataset"], c["case_id"], c["repeat"]), c["status"], _ms(c["latency_ms"])]
        for c in slowest["cells"]
    ]
    lines = ["", head, text_table(rows, ["target", "case", "status", "latency"], numeric_from=3)]
    shown = len(slowest["cells"])
    if threshold is not None and over and over > shown:
        lines.append(f"  … and {over - shown:,} more over {_ms(threshold)} (the report lists every cell's latency)")
    return lines


def pooled_footnote(totals: GroupFigures | CellCounts, targets: int) -> str:
    """The one place a multi-target run's pooled pass rate appears: a footnote that says what it mixes."""
    decided = totals["cells"] - totals["skipped"]
    ci = f" (95% CI {_ci(totals['pass_rate_ci'])})" if totals.get("pass_rate_ci") else ""
    return (
        f"all targets pooled: {_pct(totals['pass_rate'])}{ci} of {decided} decided cell{'s' if decided != 1 else ''}"
        f" — {targets} targets mixed, not any one target's rate"
    )


def _headline_per_target(per_target: Mapping[str, TargetFigures], *, skipped: bool, paint: Paint) -> list[str]:
    """The headline of a run with several targets: each target's pass rate with its 95% interval."""
    shown = dict(list(per_target.items())[:MAX_TABLE_ROWS])
    ids = {target_id: show_id(target_id) for target_id in shown}
    cis = {k: f"(95% CI {_ci(t['pass_rate_ci'])})" if t.get("pass_rate_ci") else "" for k, t in shown.items()}
    width, ci_width = max(map(len, ids.values())), max(map(len, cis.values()))
    lines = ["Pass rate per target" + ("  (skipped cells excluded)" if skipped else "") + ":"]
    for target_id, t in shown.items():
        rate = paint(_pct(t.get("pass_rate")).rjust(6), "bold")
        decided = t["cells"] - t["skipped"]
        lines.append(f"  {ids[target_id].ljust(width)}  {rate}  {cis[target_id].ljust(ci_width)}  {t['pass']}/{decided} cells".rstrip())
    return lines + _more(len(per_target), "targets")
