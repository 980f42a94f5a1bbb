"""The pairwise comparison of a run's targets in words, for the terminal and ``summary.txt`` (rows of ``summary.json``'s ``pairwise``).

Each pair gets a verdict line and its evidence: the cases both sides graded
(and how many were not comparable), wins, losses and ties, the two pass
rates and their difference with Newcombe's paired 95 % interval (labelled
unadjusted), and the raw and Holm-adjusted p-values. Nothing a decision rests
on is ever cut short: long target ids wrap onto the next line whole.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalx.display import show_id
from evalx.figures import p_value as _p
from evalx.figures import pct as _pct
from evalx.figures import points as _points
from evalx.results.compare import md_escape

__all__ = [
    "MAX_PAIR_LINES",
    "MAX_PAIR_ROWS",
    "adjusted_label",
    "adjustment_words",
    "html_pairwise",
    "interval_words",
    "markdown_pairwise",
    "pairwise_lines",
    "shown_pairs",
]

#: pairs described in the terminal (significant ones first, then by adjusted p); the rest are in summary.json
MAX_PAIR_LINES = 12
#: pairs in the Markdown and HTML tables (significant ones first, then by adjusted p)
MAX_PAIR_ROWS = 50
#: lines wrap at this width (a target id is never split)
WIDTH = 120


def adjustment_words(pairs: Sequence[Mapping[str, Any]]) -> str:
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


def adjusted_label(pairs: Sequence[Mapping[str, Any]]) -> str:
    """The adjusted p-value's column name: ``Holm-adjusted p``, or ``adjusted p`` (one pair: the same as p)."""
    method = next((str(p.get("adjustment")) for p in pairs if p.get("adjustment")), "none")
    return {"holm": "Holm-adjusted p", "bonferroni": "Bonferroni-adjusted p"}.get(method, "adjusted p (one pair: = p)")


def interval_words(row: Mapping[str, Any]) -> str:
    """``−75.0 pts (95% CI −91.2 to −41.5 pts, unadjusted)``: the pass-rate difference A − B with its paired interval."""
    ci = row.get("difference_ci")
    text = _points(row.get("difference"))
    if isinstance(ci, list) and len(ci) == 2:
        text += f" (95% CI {_points(ci[0]).removesuffix(' pts')} to {_points(ci[1])}, unadjusted)"
    return text


def shown_pairs(pairs: Sequence[Mapping[str, Any]], limit: int = MAX_PAIR_LINES) -> list[Mapping[str, Any]]:
    """The ``limit`` pairs worth showing first (significant, then lowest adjusted p), back in target order."""
    order = {id(p): i for i, p in enumerate(pairs)}

    def weight(p: Mapping[str, Any]) -> tuple[bool, float]:
        adjusted = p.get("p_adjusted", p.get("p_value"))
        return (not p.get("significant"), adjusted if isinstance(adjusted, (int, float)) else 2.0)

    chosen = sorted(pairs, key=weight)[:limit]
    return sorted(chosen, key=lambda p: order[id(p)])


def _wrap(text: str, indent: str, more: str = "  ") -> list[str]:
    """``text`` wrapped at :data:`WIDTH` between words (an id is never split), continued lines indented by ``more``."""
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent, subsequent_indent=indent + more, break_long_words=False, break_on_hyphens=False
    ) or [indent]


def pairwise_lines(pairs: Sequence[Mapping[str, Any]], paint: Callable[..., str], limit: int = MAX_PAIR_LINES) -> list[str]:
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
        if not comparable:
            lines += _wrap(counts + " (an error, no verdict or no cell on one side): no evidence either way", "    ")
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
    if len(pairs) > len(shown):
        lines.append(f"  … and {len(pairs) - len(shown)} more pairs, each with its adjusted p, in summary.json")
    return lines


def markdown_pairwise(pairs: Sequence[Mapping[str, Any]]) -> list[str]:
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
        a, b = md_escape(show_id(p.get("a")), 1000), md_escape(show_id(p.get("b")), 1000)
        conclusion = md_escape(show_id(p.get("conclusion")), 1000) if p.get("conclusion") else ""
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
    return lines


def _short_verdict(p: Mapping[str, Any]) -> str:
    """The verdict with the pair's sides as A and B (the HTML table labels them): ``A beats B``, ``no clear difference``..."""
    winner = p.get("winner")
    if winner is None:
        return str(p.get("conclusion") or "")
    return "A beats B" if winner == p.get("a") else "B beats A"


def _interval(p: Mapping[str, Any]) -> str:
    ci = p.get("difference_ci")
    if not (isinstance(ci, list) and len(ci) == 2):
        return ""
    return f"95% CI {_points(ci[0]).removesuffix(' pts')} to {_points(ci[1])}"


def html_pairwise(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the HTML report's pairwise section shows: a note and one row of display strings a pair (the template escapes them)."""
    if not pairs:
        return None
    shown = shown_pairs(pairs, MAX_PAIR_ROWS)
    rows = []
    for p in shown:
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
    }
