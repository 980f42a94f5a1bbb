"""The pairwise comparison of a run's targets in words, for the terminal and ``summary.txt`` (rows of ``summary.json``'s ``pairwise``).

Each pair gets a verdict line and its evidence: the cases both sides graded
(and how many were not comparable), wins, losses and ties, the two pass
rates and their difference with Newcombe's paired 95 % interval (labelled
unadjusted), and the raw and Holm-adjusted p-values. Nothing a decision rests
on is ever cut short: long target ids wrap onto the next line whole.

With ``pairwise`` assertions, a pair also gets the judge's preference
(``judge_preference``): wins, ties (and how many because the two orders
disagreed), errors, pairs not compared, and how often the longer answer won.
The judge-vs-function disagreements (``judge_disagreements``) are listed here
too: :func:`disagreement_lines`, :func:`markdown_disagreements`,
:func:`html_disagreements`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalx.common.json_types import JSON, JSONObject, as_array
from evalx.results.display import markdown_text, one_line, show_id
from evalx.results.figures import p_value as _p
from evalx.results.figures import pct as _pct
from evalx.results.figures import points as _points
from evalx.results.model import JudgeDisagreement, JudgeDisagreements, JudgePreference, PairwiseRecord, PairwiseRow

__all__ = [
    "MAX_DISAGREEMENT_LINES",
    "MAX_PAIR_LINES",
    "MAX_PAIR_ROWS",
    "adjusted_label",
    "adjustment_words",
    "disagreement_lines",
    "html_disagreements",
    "html_pairwise",
    "interval_words",
    "judge_words",
    "markdown_disagreements",
    "markdown_pairwise",
    "pairwise_lines",
    "pairwise_verdict",
    "shown_pairs",
]

#: pairs described in the terminal (significant ones first, then by adjusted p); the rest are in summary.json
MAX_PAIR_LINES = 12
#: pairs in the Markdown and HTML tables (significant ones first, then by adjusted p)
MAX_PAIR_ROWS = 50
#: lines wrap at this width (a target id is never split)
WIDTH = 120
#: judge-vs-function disagreements listed in the terminal and Markdown (the rest: summary.json)
MAX_DISAGREEMENT_LINES = 10


def judge_words(p: PairwiseRow) -> str | None:
    """The judge's preference for a pair in words, or None without ``pairwise`` judging.

    ``judge preferred A 3 · B 1 · ties 2 (2 because the two orders disagreed) · 1 error · 1 not compared ·
    longer answer won 3 of 4 (75.0%)``.
    """
    j = p.get("judge_preference")
    if not isinstance(j, Mapping):
        return None
    a, b = show_id(p.get("a")), show_id(p.get("b"))
    text = f"judge preferred {a} {j.get('wins_a', 0)} · {b} {j.get('wins_b', 0)} · ties {j.get('ties', 0)}"
    if j.get("position_ties"):
        text += f" ({j['position_ties']} because the two orders disagreed)"
    if j.get("errors"):
        text += f" · {j['errors']} error{'s' if j['errors'] != 1 else ''} (unreadable or failed)"
    if j.get("not_compared"):
        text += f" · {j['not_compared']} not compared"
    text += " · " + longer_words(j)
    return text


def pairwise_verdict(record: PairwiseRecord | JSONObject) -> str:
    """One pairwise record in words: ``bad preferred in both orders``, ``tie: the two orders disagreed (...)``, ``error: ...``."""
    if record.get("not_compared"):
        return f"not compared: {record['not_compared']}"
    if record.get("error"):
        return f"error: {record['error']}"
    winner = record.get("winner")
    longer = record.get("longer_won")
    size = f" (len A − len B = {record.get('length_diff')} characters)" if record.get("length_diff") is not None else ""
    if winner == "tie":
        if record.get("position_tie"):
            said = "; ".join(
                f"{show_id(o.get('first'))} first → {show_id(o.get('prefers'))}"
                for o in as_array(record.get("orders"))
                if isinstance(o, dict)
            )
            return f"tie: the two orders disagreed ({said}){size}"
        return f"tie in both orders{size}"
    text = f"{show_id(winner)} preferred in both orders{size}"
    if isinstance(longer, bool):
        text += " — the longer answer won" if longer else " — the shorter answer won"
    return text


def longer_words(j: JudgePreference) -> str:
    """``longer answer won 3 of 4 (75.0%)``: the verbosity figure, over the decided pairs whose outputs differ in length."""
    decided = j.get("length_decided") or 0
    if not decided:
        return "longer answer won — (no decided pair of unequal length)"
    return f"longer answer won {j.get('longer_won', 0)} of {decided} ({_pct(j.get('longer_won_share'))})"


def adjustment_words(pairs: Sequence[PairwiseRow]) -> str:
    """The test and the rule, in words: ``exact McNemar test, Holm-adjusted over 3 pairs; a win is claimed when the adjusted p < 0.05``."""
    row = next((p for p in pairs if p.get("adjustment")), None)
    method = str(row.get("adjustment")) if row else "none"
    family = int(row.get("family") or 0) if row else 0
    if method == "holm":
        how = f"Holm-adjusted over {family} pairs"
    elif method == "bonferroni":
        how = f"Bonferroni-adjusted over {family} pairs (more pairs than listed)"
    else:
        return "exact McNemar test (one pair tested: no adjustment); a win is claimed when p < 0.05"
    return f"exact McNemar test, {how}; a win is claimed when the adjusted p < 0.05"


def adjusted_label(pairs: Sequence[PairwiseRow]) -> str:
    """The adjusted p-value's column name: ``Holm-adjusted p``, or ``adjusted p`` (one pair: the same as p)."""
    method = next((str(p.get("adjustment")) for p in pairs if p.get("adjustment")), "none")
    return {"holm": "Holm-adjusted p", "bonferroni": "Bonferroni-adjusted p"}.get(method, "adjusted p (one pair: = p)")


def interval_words(row: PairwiseRow) -> str:
    """``−75.0 pts (95% CI −91.2 to −41.5 pts, unadjusted)``: the pass-rate difference A − B with its paired interval."""
    ci = row.get("difference_ci")
    text = _points(row.get("difference"))
    if isinstance(ci, list) and len(ci) == 2:
        text += f" (95% CI {_points(ci[0]).removesuffix(' pts')} to {_points(ci[1])}, unadjusted)"
    return text


def shown_pairs(pairs: Sequence[PairwiseRow], limit: int = MAX_PAIR_LINES) -> list[PairwiseRow]:
    """The ``limit`` pairs worth showing first (significant, then lowest adjusted p), back in target order."""
    order = {id(p): i for i, p in enumerate(pairs)}

    def weight(p: PairwiseRow) -> tuple[bool, float]:
        adjusted = p.get("p_adjusted", p.get("p_value"))
        return (not p.get("significant"), adjusted if isinstance(adjusted, (int, float)) else 2.0)

    chosen = sorted(pairs, key=weight)[:limit]
    return sorted(chosen, key=lambda p: order[id(p)])


def _wrap(text: str, indent: str, more: str = "  ") -> list[str]:
    """``text`` wrapped at :data:`WIDTH` between words (an id is never split), continued lines indented by ``more``."""
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent, subsequent_indent=indent + more, break_long_words=False, break_on_hyphens=False
    ) or [indent]


def pairwise_lines(pairs: Sequence[PairwiseRow], paint: Callable[..., str], limit: int = MAX_PAIR_LINES) -> list[str]:
    """The pairwise section: a heading that says how p was adjusted, then a verdict and its evidence per pair."""
    if not pairs:
        return []
    heading = (
        f"Pairwise ({len(pairs)} pair{'s' if len(pairs) != 1 else ''}; on the cases both sides graded, an error or no verdict "
        f"on either side is not comparable; {adjustment_words(pairs)}):"
    )
    lines = _wrap(heading, "", "")
    shown = shown_pairs(pairs, limit)
    for p in shown:
        a, b = show_id(p.get("a")), show_id(p.get("b"))
        conclusion = str(p.get("conclusion") or "")
        style = ("bold",) if p.get("significant") else ("yellow",) if conclusion == "not comparable" else ()
        comparable = p.get("comparable", p.get("cases", 0))
        not_comparable = p.get("not_comparable", 0)
        lines += _wrap(f"{a} vs {b} → {paint(conclusion, *style)}", "  ")
        counts = f"{comparable} cases comparable, {not_comparable} not comparable"
        judged = judge_words(p)
        if not comparable:
            lines += _wrap(counts + " (an error, no verdict or no cell on one side): no evidence either way", "    ")
            if judged:
                lines += _wrap(judged, "    ")
            continue
        lines += _wrap(f"{counts} · {a} wins {p.get('only_a', 0)} · {b} wins {p.get('only_b', 0)} · ties {p.get('ties', 0)}", "    ")
        lines += _wrap(
            f"pass rate {a} {_pct(p.get('pass_rate_a'))} · {b} {_pct(p.get('pass_rate_b'))} · difference {interval_words(p)}",
            "    ",
        )
        method = p.get("adjustment")
        evidence = f"p = {_p(p.get('p_value'))}"
        if method in ("holm", "bonferroni"):
            evidence += f" · {'Holm' if method == 'holm' else 'Bonferroni'}-adjusted p = {_p(p.get('p_adjusted'))}"
        else:
            evidence += " (one pair: no adjustment)"
        lines += _wrap(evidence, "    ")
        if judged:
            lines += _wrap(judged, "    ")
    if len(pairs) > len(shown):
        lines.append(f"  … and {len(pairs) - len(shown)} more pairs, each with its adjusted p, in summary.json")
    return lines


def markdown_pairwise(pairs: Sequence[PairwiseRow]) -> list[str]:
    """The pairwise table for ``--markdown`` (GitHub's step summary): one row a pair, every figure in full."""
    if not pairs:
        return []
    shown = shown_pairs(pairs, MAX_PAIR_ROWS)
    lines = [
        f"**Pairwise** ({len(pairs)} pair{'s' if len(pairs) != 1 else ''}; on the cases both sides graded; {adjustment_words(pairs)})",
        "",
        "| A vs B | verdict | comparable | not comparable | A wins · B wins · ties | pass rate A · B "
        f"| difference A − B (95% CI, unadjusted) | p | {adjusted_label(pairs)} |",
        "|---|---|--:|--:|--:|--:|---|--:|--:|",
    ]
    for p in shown:
        a, b = markdown_text(show_id(p.get("a")), 1000), markdown_text(show_id(p.get("b")), 1000)
        conclusion = markdown_text(show_id(p.get("conclusion")), 1000) if p.get("conclusion") else ""
        verdict = f"**{conclusion}**" if p.get("significant") else conclusion
        compared = bool(p.get("comparable", p.get("cases", 0)))
        lines.append(
            f"| {a} vs {b} | {verdict} | {p.get('comparable', p.get('cases', 0))} | {p.get('not_comparable', 0)} | "
            + (
                f"{p.get('only_a', 0)} · {p.get('only_b', 0)} · {p.get('ties', 0)} | "
                f"{_pct(p.get('pass_rate_a'))} · {_pct(p.get('pass_rate_b'))} | {interval_words(p)} | "
                f"{_p(p.get('p_value'))} | {_p(p.get('p_adjusted'))} |"
                if compared
                else "— | — | — | — | — |"
            )
        )
    if len(pairs) > len(shown):
        lines.append(f"\n… and {len(pairs) - len(shown)} more pairs in summary.json")
    lines.append("")
    judged = [p for p in shown if isinstance(p.get("judge_preference"), Mapping)]
    if judged:
        lines += [
            "**Judge preference** (`pairwise`: each pair of cells asked in both orders; answers that disagree are a tie)",
            "",
            "| A vs B | A preferred | B preferred | ties | of which the orders disagreed | errors | not compared | longer answer won |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for p in judged:
            j = p["judge_preference"]
            a, b = markdown_text(show_id(p.get("a")), 1000), markdown_text(show_id(p.get("b")), 1000)
            longer = longer_words(j).removeprefix("longer answer won ")
            lines.append(
                f"| {a} vs {b} | {j.get('wins_a', 0)} | {j.get('wins_b', 0)} | {j.get('ties', 0)} | {j.get('position_ties', 0)} | "
                f"{j.get('errors', 0)} | {j.get('not_compared', 0)} | {markdown_text(longer, 200)} |"
            )
        lines.append("")
    return lines


def _short_verdict(p: PairwiseRow) -> str:
    """The verdict with the pair's sides as A and B (the HTML table labels them): ``A beats B``, ``no clear difference``..."""
    winner = p.get("winner")
    if winner is None:
        return str(p.get("conclusion") or "")
    return "A beats B" if winner == p.get("a") else "B beats A"


def _interval(p: PairwiseRow) -> str:
    ci = p.get("difference_ci")
    if not (isinstance(ci, list) and len(ci) == 2):
        return ""
    return f"95% CI {_points(ci[0]).removesuffix(' pts')} to {_points(ci[1])}"


def html_pairwise(pairs: Sequence[PairwiseRow]) -> JSONObject | None:
    """What the HTML report's pairwise section shows: a note and one row of display strings a pair (the template escapes them)."""
    if not pairs:
        return None
    shown = shown_pairs(pairs, MAX_PAIR_ROWS)
    rows: list[JSON] = []
    judged = False
    for p in shown:
        judge = _html_judge(p.get("judge_preference"))
        judged = judged or judge is not None
        compared = bool(p.get("comparable", p.get("cases", 0)))
        rows.append(
            {
                "a": show_id(p.get("a")),
                "b": show_id(p.get("b")),
                "verdict": show_id(p.get("conclusion") or ""),
                "short": _short_verdict(p),
                "significant": bool(p.get("significant")),
                "comparable": int(p.get("comparable", p.get("cases", 0)) or 0),
                "not_comparable": int(p.get("not_comparable", 0) or 0),
                "wins_a": p.get("only_a", 0) if compared else "—",
                "wins_b": p.get("only_b", 0) if compared else "—",
                "ties": p.get("ties", 0) if compared else "—",
                "rates": f"{_pct(p.get('pass_rate_a'))} · {_pct(p.get('pass_rate_b'))}" if compared else "—",
                "difference": _points(p.get("difference")) if compared else "—",
                "interval": _interval(p) if compared else "",
                "p": _p(p.get("p_value")),
                "p_adjusted": _p(p.get("p_adjusted")),
                "judge": judge,
            }
        )
    return {
        "note": (
            f"{len(pairs)} pair{'s' if len(pairs) != 1 else ''}, each on the cases both sides graded (pass or fail): an error or no "
            "verdict on either side makes a case not comparable, so a target that errored is never a loser. "
            f"E{adjustment_words(pairs)[1:]}. The 95% interval of the difference "
            "is Newcombe's paired interval, not adjusted for the number of pairs."
        ),
        "adjusted_label": adjusted_label(pairs),
        "rows": rows,
        "more": len(pairs) - len(shown),
        "judged": judged,
    }


def _html_judge(j: JudgePreference | None) -> JSONObject | None:
    """A pair's judge preference as the HTML table shows it (display strings), or None."""
    if not isinstance(j, Mapping):
        return None
    return {
        "wins_a": j.get("wins_a", 0),
        "wins_b": j.get("wins_b", 0),
        "ties": j.get("ties", 0),
        "position_ties": j.get("position_ties", 0),
        "errors": j.get("errors", 0),
        "not_compared": j.get("not_compared", 0),
        "longer": longer_words(j).removeprefix("longer answer won "),
    }


def _disagreement_case(row: JudgeDisagreement) -> str:
    case = f"{show_id(row.get('dataset'))}/{show_id(row.get('case_id'))}"
    if isinstance(row.get("repeat"), int) and row["repeat"] > 0:
        case += f" #r{row['repeat']}"
    return case


def _verdicts(row: JudgeDisagreement) -> str:
    said: dict[Any, str] = {True: "passed", False: "failed"}
    return f"function {said.get(row.get('function'), '?')}, judge {said.get(row.get('judge'), '?')}"


def disagreement_lines(block: JudgeDisagreements | None, limit: int = MAX_DISAGREEMENT_LINES) -> list[str]:
    """The terminal's judge-vs-function block: the cells to read by hand, capped, with "and N more"."""
    if not isinstance(block, Mapping) or not block.get("total"):
        return []
    rows = [r for r in block.get("rows") or [] if isinstance(r, Mapping)]
    total = int(block.get("total") or 0)
    lines = [f"Judge vs function ({total} of {block.get('checked', 0)} checks sharing a name disagree — read these by hand):"]
    for r in rows[:limit]:
        lines += _wrap(
            f"{show_id(r.get('target'))} {_disagreement_case(r)} {show_id(r.get('name'))!s}: {_verdicts(r)}"
            + (f" — {one_line(str(r.get('reason')))}" if r.get("reason") else ""),
            "  ",
        )
    if total > min(len(rows), limit):
        lines.append(f"  … and {total - min(len(rows), limit)} more (summary.json)")
    return lines


def markdown_disagreements(block: JudgeDisagreements | None, limit: int = MAX_DISAGREEMENT_LINES) -> list[str]:
    """The judge-vs-function list for ``--markdown``: one row a cell, capped."""
    if not isinstance(block, Mapping) or not block.get("total"):
        return []
    rows = [r for r in block.get("rows") or [] if isinstance(r, Mapping)]
    total = int(block.get("total") or 0)
    lines = [
        f"**Judge vs function**: {total} of {block.get('checked', 0)} checks sharing a name disagree — read these by hand",
        "",
        "| target | case | name | function | judge | reason |",
        "|---|---|---|---|---|---|",
    ]
    said: dict[Any, str] = {True: "pass", False: "fail"}
    for r in rows[:limit]:
        lines.append(
            f"| {markdown_text(show_id(r.get('target')), 200)} | {markdown_text(_disagreement_case(r), 300)} | {markdown_text(show_id(r.get('name')), 200)} "
            f"| {said.get(r.get('function'), '?')} | {said.get(r.get('judge'), '?')} | {markdown_text(one_line(str(r.get('reason') or '')), 200)} |"
        )
    if total > min(len(rows), limit):
        lines.append(f"\n… and {total - min(len(rows), limit)} more in summary.json")
    lines.append("")
    return lines


def html_disagreements(block: JudgeDisagreements | None) -> JSONObject | None:
    """What the HTML report's judge-vs-function section shows (display strings; the template escapes them), or None."""
    if not isinstance(block, Mapping) or not block.get("total"):
        return None
    rows = [r for r in block.get("rows") or [] if isinstance(r, Mapping)]
    said: dict[Any, str] = {True: "pass", False: "fail"}
    return {
        "total": int(block.get("total") or 0),
        "checked": int(block.get("checked") or 0),
        "rows": [
            {
                "target": show_id(r.get("target")),
                "case": _disagreement_case(r),
                "name": show_id(r.get("name")),
                "function": said.get(r.get("function"), "?"),
                "judge": said.get(r.get("judge"), "?"),
                "function_types": ", ".join(str(t) for t in r.get("function_types") or []),
                "judge_types": ", ".join(str(t) for t in r.get("judge_types") or []),
                "reason": one_line(str(r.get("reason") or "")),
            }
            for r in rows
        ],
        "more": max(0, int(block.get("total") or 0) - len(rows)),
    }
