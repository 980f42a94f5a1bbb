"""A run as a notebook shows it (``RunResult._repr_html_``): the headline, a row of figures per target, the report's link.

Small and self-contained (inline styles only: a notebook's page has its own
CSS); every value from the run is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from evalx.results.display import show_id
from evalx.results.figures import ci as _ci
from evalx.results.figures import pct as _pct
from evalx.results.outcome import exit_reason, interruption

__all__ = ["run_html"]

_CELL = "padding:2px 10px;text-align:right"
_HEAD = "padding:2px 10px;text-align:right;border-bottom:1px solid #999"


def run_html(summary: Mapping[str, Any], exit_code: int, report_href: str | None) -> str:
    """The HTML a notebook shows for a finished run; ``report_href``: the link to its ``report.html`` (None: no link)."""
    totals = summary.get("totals") or {}
    parts = ['<div class="evalx-run">']
    stopped = interruption(summary)
    if stopped:
        parts.append(f'<p style="color:#c0392b;font-weight:bold">{escape(stopped[0])}<br><code>{escape(stopped[1])}</code></p>')
    name = f" {escape(str(summary['name']))}" if summary.get("name") else ""
    parts.append(
        f"<p><b>evalx run <code>{escape(str(summary.get('run_id') or ''))}</code></b>{name} · "
        f"{int(totals.get('cells') or 0):,} cells · {escape(exit_reason(summary, exit_code))}</p>"  # type: ignore[arg-type]
    )
    per_target = summary.get("per_target") or {}
    if per_target:
        headers = ["pass rate", "95% CI", "pass", "fail", "error", "skipped"]
        parts.append('<table style="border-collapse:collapse">')
        parts.append(
            '<tr><th style="padding:2px 10px;text-align:left;border-bottom:1px solid #999">target</th>'
            + "".join(f'<th style="{_HEAD}">{h}</th>' for h in headers)
            + "</tr>"
        )
        for target_id, t in per_target.items():
            cells = [
                _pct(t.get("pass_rate")),
                _ci(t.get("pass_rate_ci")),
                *(str(t.get(k, 0)) for k in ("pass", "fail", "error", "skipped")),
            ]
            parts.append(
                f'<tr><td style="padding:2px 10px;text-align:left"><code>{escape(show_id(target_id))}</code></td>'
                + "".join(f'<td style="{_CELL}">{escape(c)}</td>' for c in cells)
                + "</tr>"
            )
        parts.append("</table>")
    if report_href:
        parts.append(
            f'<p><a href="{escape(report_href, quote=True)}" target="_blank">{escape(report_href)}</a>: every cell\'s input, output and reasons</p>'
        )
    parts.append("</div>")
    return "\n".join(parts)
