"""The terminal view of a ``--matrix`` run: cases × target variants, side by side.

Rows are cases (matrix order), columns are the run's targets (a provider
target's variants each get one). A cell shows ✓ pass, ✗ fail, E error, – not
run or inconclusive; with repeats it shows ``k/N`` and the case verdict by
``repeat_pass_rule``. A footer gives, per column, the pass rate with its 95%
Wilson interval, cost, cost per passing cell and p50/p99 latency; then come
the pairwise comparisons (:mod:`evalx.reports.pairwise`: comparable cases,
Holm-adjusted exact McNemar) and the flaky cases. Everything but the case rows
comes from ``summary.json``, so the view agrees with it by construction.

Wide matrices stay readable without hiding what tells variants apart: a
header puts the base target on one line and each ``param=value`` on its own
(a part longer than a column wraps, never cut with ``…``); a table still
wider than the terminal becomes a per-target table with a note saying so.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable

from tabulate import SEPARATING_LINE, tabulate  # type: ignore[import-untyped,unused-ignore]  # no stubs shipped

from evalx.reports.pairwise import pairwise_lines
from evalx.reports.text import flaky_lines, show_id
from evalx.results.figures import ci as _ci
from evalx.results.figures import clip as _clip
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import target_cost
from evalx.results.figures import usd as _usd
from evalx.results.model import CellResult, RunSummary
from evalx.results.repeats import DEFAULT_RULE, Tally, case_status

__all__ = ["format_matrix"]

#: case rows shown; the rest are counted
MAX_ROWS = 50
#: widest header line of a column (a variant id's part), in characters; longer parts wrap
MAX_COLUMN = 22
#: widest case label
MAX_LABEL = 40
#: flaky cases listed
MAX_FLAKY_LINES = 20

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_ANSI = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}
_MARK = {"pass": "✓", "fail": "✗", "error": "E", "skipped": "–"}


def _header(target_id: str) -> str:
    """A column header: the base target on one line, then each ``param=value`` of a variant on its own.

    Every character of the id is shown (a part wider than :data:`MAX_COLUMN`
    wraps onto the next line): ``temperature=0`` and ``temperature=0.7``
    never read the same.
    """
    safe = show_id(target_id)
    base, bracket, rest = safe.partition("[")
    parts = [base]
    if bracket:
        params = rest.split(",")
        parts += [("[" if i == 0 else "") + param + ("," if i < len(params) - 1 else "") for i, param in enumerate(params)]
    lines: list[str] = []
    for part in parts:
        lines += [part[i : i + MAX_COLUMN] for i in range(0, len(part), MAX_COLUMN)] or [""]
    return "\n".join(lines)


def _visible_width(text: str) -> int:
    return max((len(_SGR.sub("", line)) for line in text.splitlines()), default=0)


class _Rows:
    """Per-case tallies for the first MAX_ROWS cases (by matrix index), and a count of all cases."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], tuple[float, dict[str, Tally]]] = {}
        self.others: set[int] = set()
        self.datasets: set[str] = set()

    def add(self, result: CellResult) -> None:
        key = (str(result.get("dataset") or ""), str(result.get("case_id") or ""))
        index = result.get("index")
        order = float(index) if isinstance(index, int) and not isinstance(index, bool) else float("inf")
        self.datasets.add(key[0])
        entry = self.kept.get(key)
        if entry is None:
            if len(self.kept) >= MAX_ROWS:
                self.others.add(hash(key))
                return
            entry = self.kept[key] = (order, {})
        elif order < entry[0]:
            entry = self.kept[key] = (order, entry[1])
        entry[1].setdefault(str(result.get("target") or ""), Tally()).add(str(result.get("status")))

    @property
    def total(self) -> int:
        return len(self.kept) + len(self.others)

    def ordered(self) -> list[tuple[tuple[str, str], dict[str, Tally]]]:
        return [(key, tallies) for key, (_, tallies) in sorted(self.kept.items(), key=lambda kv: (kv[1][0], kv[0]))]


def _columns(summary: RunSummary) -> list[str]:
    per_target = list((summary.get("per_target") or {}).keys())
    matrix = summary.get("matrix")
    variants = matrix.get("variants") or [] if matrix else []
    declared = [v["id"] for v in variants if isinstance(v, dict) and v.get("id") in per_target]
    return declared + [t for t in per_target if t not in declared]


def format_matrix(
    summary: RunSummary,
    results: Iterable[CellResult],
    *,
    color: bool = False,
    width: int | None = None,
) -> str:
    """The matrix view text for a run's ``summary`` and its ``results`` (``results.jsonl`` lines)."""

    def paint(text: str, *styles: str) -> str:
        if not color or not styles:
            return text
        return f"\x1b[{';'.join(_ANSI[s] for s in styles)}m{text}\x1b[0m"

    width = width or shutil.get_terminal_size((100, 24)).columns
    rule = str(summary.get("repeat_pass_rule") or DEFAULT_RULE)
    columns = _columns(summary)
    per_target = summary.get("per_target") or {}
    repeats = summary.get("repeats") or None
    rows = _Rows()
    for result in results:
        rows.add(result)

    def cell(tally: Tally | None) -> str:
        if tally is None or tally.decided == 0:
            return paint(_MARK["skipped"], "dim")
        status = case_status(tally, rule)
        style = "green" if status == "pass" else "red"
        if tally.runs == 1:
            return paint(_MARK[status], style)
        text = f"{tally.passed}/{tally.decided} {_MARK[status]}"
        return paint(text, "yellow" if tally.flaky and status == "pass" else style)

    headers: list[str] = ["case"] + [_header(t) for t in columns]
    several = len(rows.datasets) > 1
    body: list[list[str]] = []
    for (dataset, case_id), tallies in rows.ordered():
        label = f"{dataset}/{case_id}" if several else case_id
        body.append([_clip(show_id(label), MAX_LABEL)] + [cell(tallies.get(t)) for t in columns])

    def figures(target_id: str) -> dict[str, str]:
        t = per_target[target_id]  # columns are the summary's targets
        level = t.get("case_level")
        decided = level["cases"] - level["skipped"] if level else 0
        latency = t["latency_ms"]
        return {
            "pass rate": _pct(t.get("pass_rate")),
            "95% CI": _ci(t.get("pass_rate_ci")),
            f"cases ({rule})": f"{level.get('pass', 0)}/{decided}" if level else "—",
            "cases 95% CI": _ci(level.get("pass_rate_ci") if level else None),
            "flaky": str(level.get("flaky", 0) if level else 0),
            "cost": target_cost(t.get("cost_usd"), t.get("cost_missing_cells")),
            "cost / pass": _usd(t.get("cost_per_pass_usd")),
            "p50": _ms(latency.get("p50")),
            "p99": _ms(latency.get("p99")),
        }

    footer_keys = ["pass rate", "95% CI"]
    if repeats:
        footer_keys += [f"cases ({rule})", "cases 95% CI", "flaky"]
    footer_keys += ["cost", "cost / pass", "p50", "p99"]
    per_column = {t: figures(t) for t in columns}
    footer = [[key] + [per_column[t][key] for t in columns] for key in footer_keys]
    table = str(
        tabulate(
            [*body, SEPARATING_LINE, *footer],
            headers=headers,
            tablefmt="simple",
            disable_numparse=True,
            colalign=["left"] + ["center"] * len(columns),
        )
    )

    title = paint(f"Matrix: {rows.total} cases × {len(columns)} targets", "bold")
    if repeats:
        title += f" · up to {repeats.get('runs_per_case')} runs a case, a case passes by repeat_pass_rule: {rule}"
    lines = [title]
    if _visible_width(table) <= width:
        lines.append(table)
        if rows.total > len(rows.kept):
            lines.append(f"… and {rows.total - len(rows.kept)} more cases (every cell is in results.jsonl)")
        legend = "✓ pass · ✗ fail · E error · – not run or inconclusive"
        if repeats:
            legend = "k/N repeats passed, then the case verdict: " + legend
        lines.append(paint(legend, "dim"))
    else:
        summary_rows = [[show_id(t)] + [per_column[t][key] for key in footer_keys] for t in columns]
        narrow = str(
            tabulate(
                summary_rows,
                headers=["target", *footer_keys],
                tablefmt="simple",
                disable_numparse=True,
                colalign=["left"] + ["right"] * len(footer_keys),
            )
        )
        lines.append(narrow)
        lines.append(
            paint(
                f"(the case × target table is {_visible_width(table)} columns wide, wider than this terminal's {width}: "
                "figures per target instead; every cell is in results.jsonl and report.html)",
                "dim",
            )
        )

    pairs = summary.get("pairwise") or []
    if pairs:
        lines += ["", *pairwise_lines(pairs, paint)]

    flaky = (repeats.get("flaky") if repeats else None) or []
    if repeats:
        total = repeats.get("flaky_cases", len(flaky))
        if flaky:
            lines += ["", f"Flaky cases ({total}: passed some repeats, not all):"]
            lines += flaky_lines(flaky[:MAX_FLAKY_LINES], paint)
            if total > min(len(flaky), MAX_FLAKY_LINES):
                lines.append(f"  … and {total - min(len(flaky), MAX_FLAKY_LINES)} more (summary.json)")
        else:
            lines += ["", "Flaky cases: none"]
    return "\n".join(lines) + "\n"
