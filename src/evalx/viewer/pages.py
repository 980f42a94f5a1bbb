"""The viewer's pages as HTML text: runs, case histories, a case, a comparison — shared by `evalx view` and the static history page.

Every page is one self-contained document: inline CSS, inline SVG charts
(:mod:`evalx.reports.charts`), a few lines of inline script for filtering;
nothing is loaded from the network. Every string from a run is escaped.
``live`` pages (the app) link to each other and carry review forms; the
static history page (``live=False``) has neither.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

from evalx.reports import charts
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd
from evalx.version import __version__
from evalx.viewer.index import CaseRow, History, RunIndex

__all__ = [
    "CaseHistory",
    "Page",
    "case_histories",
    "case_page",
    "cases_page",
    "compare_page",
    "history_document",
    "message_page",
    "review_page",
    "runs_page",
]

CaseKey = tuple[str, str, str]
FILTERS = ("all", "regressed", "flaky", "newly-failing", "never-passing")
#: rows the case list shows at once (a filter or a search narrows it)
MAX_CASE_ROWS = 300
#: flipped cells a comparison shows with a diff of their outputs
MAX_DIFFS = 40

CSS = """
:root { --fg:#1d2330; --muted:#667085; --line:#e3e6ec; --bg:#f6f7f9; --card:#fff; --pass:#1f9d55; --fail:#d14343;
  --error:#b7791f; --skipped:#a0aec0; --link:#2f5fc4; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header.top { background:#1d2330; color:#fff; padding:10px 20px; display:flex; gap:18px; align-items:baseline; flex-wrap:wrap; }
header.top a { color:#d6e0ff; text-decoration:none; } header.top a.on { color:#fff; font-weight:600; }
header.top .brand { font-weight:700; color:#fff; margin-right:8px; }
main { padding:16px 20px 40px; max-width:1400px; }
h1, h1.mono { font-size:20px; margin:4px 0 12px; } h2 { font-size:16px; margin:18px 0 8px; }
a { color:var(--link); }
.panel { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px; margin:10px 0; }
table { border-collapse:collapse; width:100%; background:var(--card); }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:12px; color:var(--muted); font-weight:600; } td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.mono { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; font-size:12.5px; }
.muted { color:var(--muted); }
.st { display:inline-block; padding:0 6px; border-radius:9px; font-size:12px; color:#fff; }
.st-pass { background:var(--pass); } .st-fail { background:var(--fail); } .st-error { background:var(--error); }
.st-skipped, .st-none { background:var(--skipped); }
.strip { display:inline-flex; gap:1px; vertical-align:middle; }
.strip i { display:inline-block; width:7px; height:14px; border-radius:1px; }
.strip i.p { background:var(--pass); } .strip i.f { background:var(--fail); } .strip i.e { background:var(--error); }
.strip i.s { background:var(--skipped); } .strip i.n { background:transparent; border:1px dashed var(--line); }
.strip i.r { outline:2px solid #7a3df0; outline-offset:-1px; }
.flag { display:inline-block; font-size:11px; border-radius:4px; padding:0 5px; margin-right:3px; background:#eef1f6; color:#394056; }
.flag.regressed { background:#fde8e8; color:#9b1c1c; } .flag.newly-failing { background:#fff1e0; color:#8a4b08; }
.flag.reviewed { background:#efe7ff; color:#4c1d95; }
.charts { display:grid; grid-template-columns:repeat(auto-fit,minmax(380px,1fr)); gap:12px; }
.chart { width:100%; height:auto; } .chart text { font-size:10.5px; fill:var(--muted); }
.chart .grid { stroke:var(--line); stroke-width:1; } .chart-empty { color:var(--muted); }
.filters { display:flex; gap:8px; align-items:center; flex-wrap:wrap; margin:8px 0; }
.filters a { padding:2px 8px; border-radius:12px; background:#eef1f6; text-decoration:none; color:#394056; font-size:13px; }
.filters a.on { background:#394056; color:#fff; }
input[type=search], input[type=text], select { padding:4px 6px; border:1px solid #c8ced8; border-radius:5px; font:inherit; }
form.review { display:flex; gap:6px; align-items:center; flex-wrap:wrap; margin:0; }
form.review input[name=comment] { min-width:220px; }
button { font:inherit; padding:3px 10px; border-radius:5px; border:1px solid #394056; background:#394056; color:#fff; cursor:pointer; }
pre.diff { white-space:pre-wrap; word-break:break-word; background:#fbfbfc; border:1px solid var(--line); padding:8px; margin:6px 0;
  max-height:360px; overflow:auto; }
pre.diff .add { background:#e6ffed; } pre.diff .del { background:#ffeef0; }
.review-note { color:#4c1d95; }
.bad { color:var(--fail); } .good { color:var(--pass); }
footer { color:var(--muted); font-size:12px; margin-top:30px; }
"""

FILTER_JS = """
document.querySelectorAll('input[data-filter]').forEach(function (box) {
  var rows = document.querySelectorAll(box.getAttribute('data-filter'));
  box.addEventListener('input', function () {
    var q = box.value.toLowerCase();
    rows.forEach(function (r) { r.hidden = q && r.textContent.toLowerCase().indexOf(q) < 0; });
  });
});
"""

_LETTER = {"pass": "p", "fail": "f", "error": "e", "skipped": "s"}


@dataclass
class Page:
    """How a page links: to the app's routes (``live``), or nowhere (the static history page); the token field for forms."""

    live: bool = True
    token: str | None = None
    reviewer: str = ""

    def href(self, path: str, **query: str) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return path + ("?" + urlencode(q) if q else "")


def _e(value: Any) -> Markup:
    return escape("" if value is None else str(value))


def document(title: str, body: Markup | str, page: Page, *, active: str = "") -> str:
    """A whole page: the top bar (live pages only), ``body``, the inline CSS and script."""
    nav = ""
    if page.live:
        links = [("runs", "/", "Runs"), ("cases", "/cases", "Case history"), ("compare", "/compare", "Compare")]
        nav = "".join(f'<a href="{h}" class="{"on" if key == active else ""}">{t}</a>' for key, h, t in links)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} · evalx</title><style>{CSS}</style></head><body>"
        f'<header class=top><span class=brand>evalx</span>{nav}<span class=muted style="margin-left:auto">{_e(title)}</span></header>'
        f"<main>{body}<footer>evalx {_e(__version__)}</footer></main><script>{FILTER_JS}</script></body></html>"
    )


def message_page(title: str, text: str, page: Page) -> str:
    return document(title, Markup("<h1>") + _e(title) + Markup("</h1><p>") + _e(text) + Markup("</p>"), page)


def _status(status: str | None) -> Markup:
    s = status or "none"
    return Markup(f'<span class="st st-{_e(s)}">') + _e(status or "—") + Markup("</span>")


def _when(iso: str) -> str:
    return iso.replace("T", " ")[:16] if iso else "—"


def _gate(run: RunIndex) -> Markup:
    if run.gates is None:
        return Markup('<span class="muted">no gates</span>')
    return Markup('<span class="good">passed</span>') if run.gates else Markup('<span class="bad">breached</span>')


def _run_label(run: RunIndex) -> str:
    return f"{run.run_id} ({_when(run.started_at)})"


# ---------------------------------------------------------------- runs


def _trends(history: History) -> Markup:
    runs = history.runs
    labels = [_run_label(r) for r in runs]
    targets = history.targets
    rate = {t: [r.targets[t]["pass_rate"] if t in r.targets else None for r in runs] for t in targets}
    cost = {t: [r.targets[t]["cost_usd"] if t in r.targets else None for r in runs] for t in targets}
    p99 = {t: [r.targets[t]["p99_ms"] if t in r.targets else None for r in runs] for t in targets}
    parts = [
        ("Pass rate", charts.trend(rate, labels, title="Pass rate", fmt=lambda v: _pct(v))),
        ("Cost", charts.trend(cost, labels, title="Cost", fmt=lambda v: _usd(v))),
        ("p99 latency", charts.trend(p99, labels, title="p99 latency", fmt=lambda v: _ms(v))),
    ]
    cells = "".join(f"<div class=panel><h2>{t}</h2>{svg}</div>" for t, svg in parts)
    return Markup(f'<div class=charts aria-label="trends">{cells}</div>')


def _runs_table(history: History, page: Page) -> Markup:
    rows = []
    for run in reversed(history.runs):  # newest first
        rid = _e(run.run_id)
        link = f'<a href="{_e(page.href("/run/" + run.run_id))}" class=mono>{rid}</a>' if page.live else f"<span class=mono>{rid}</span>"
        targets = ", ".join(str(_e(t)) for t in run.targets)
        reviewed = f' <span class="flag reviewed">{run.reviewed} reviewed</span>' if run.reviewed else ""
        part = f' <span class="flag">{_e(run.part)}</span>' if run.part else ""
        rows.append(
            f"<tr class=run-row data-run={rid}><td>{link}{part}</td><td>{_e(run.name) or '—'}</td><td>{_e(_when(run.started_at))}</td>"
            f"<td>{targets}</td><td class=num>{_pct(run.pass_rate)}{reviewed}</td><td class=num>{_usd(run.cost_usd)}</td>"
            f"<td class=num>{_ms(run.p99_ms)}</td><td>{_gate(run)}</td><td>{_e(run.status)}</td></tr>"
        )
    head = (
        "<tr><th>run</th><th>name</th><th>date</th><th>targets</th><th class=num>pass rate</th><th class=num>cost</th>"
        "<th class=num>p99</th><th>gates</th><th>status</th></tr>"
    )
    return Markup(f"<table id=runs><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")


def _compare_form(history: History, page: Page, a: str = "", b: str = "") -> Markup:
    def options(selected: str) -> str:
        return "".join(
            f'<option value="{_e(r.run_id)}"{" selected" if r.run_id == selected else ""}>{_e(_run_label(r))}</option>'
            for r in reversed(history.runs)
        )

    return Markup(
        '<form class=filters method=get action="/compare"><label>baseline <select name=a>'
        f"{options(a)}</select></label><label>run <select name=b>{options(b)}</select></label><button type=submit>Compare</button></form>"
    )


def runs_page(history: History, page: Page) -> str:
    n = len(history.runs)
    body = [
        f"<h1>Runs <span class=muted>({n})</span></h1>",
        str(_trends(history)) if n else "<p class=muted>No runs with results here yet.</p>",
        '<h2>Every run</h2><div class=filters><input type=search placeholder="filter runs (id, name, target, status)" '
        'data-filter="#runs tbody tr" aria-label="filter runs"></div>',
        str(_runs_table(history, page)),
    ]
    if page.live and n >= 2:
        body.insert(1, str(_compare_form(history, page, history.runs[-2].run_id, history.runs[-1].run_id)))
    return document("Runs", Markup("".join(body)), page, active="runs")


# ---------------------------------------------------------------- case histories


@dataclass
class CaseHistory:
    """One (target, dataset, case) across the runs: its row in each run that has it, and what stands out."""

    key: CaseKey
    rows: list[tuple[int, CaseRow]] = field(default_factory=list)  # (run position, row)
    flags: list[str] = field(default_factory=list)
    regressed_in: list[int] = field(default_factory=list)  # run positions where it failed while its target's rate rose

    @property
    def last(self) -> str:
        return self.rows[-1][1][0] if self.rows else "none"


_CACHE: dict[tuple[int, ...], dict[CaseKey, CaseHistory]] = {}


def case_histories(history: History) -> dict[CaseKey, CaseHistory]:
    """Every case's history over ``history``'s runs, with its flags (computed once per set of run indexes)."""
    stamp = tuple(r.serial for r in history.runs)
    hit = _CACHE.get(stamp)
    if hit is not None:
        return hit
    out: dict[CaseKey, CaseHistory] = {}
    for position, run in enumerate(history.runs):
        for key, row in run.cases.items():
            h = out.get(key)
            if h is None:
                h = out[key] = CaseHistory(key)
            h.rows.append((position, row))
    runs = history.runs
    for h in out.values():
        statuses = [row[0] for _, row in h.rows]
        target = h.key[0]
        for (pa, ra), (pb, rb) in pairwise(h.rows):
            if ra[0] == "pass" and rb[0] in ("fail", "error"):
                before, after = runs[pa].targets.get(target, {}).get("pass_rate"), runs[pb].targets.get(target, {}).get("pass_rate")
                if before is not None and after is not None and after > before:
                    h.regressed_in.append(pb)
        if h.regressed_in:
            h.flags.append("regressed")
        changes = sum(1 for a, b in pairwise(statuses) if a != b)
        if changes >= 2 or any(0 < row[4] < row[3] for _, row in h.rows):
            h.flags.append("flaky")
        if len(statuses) >= 2 and statuses[-1] in ("fail", "error") and statuses[-2] == "pass":
            h.flags.append("newly-failing")
        if "pass" not in statuses:
            h.flags.append("never-passing")
        if any(row[5] for _, row in h.rows):
            h.flags.append("reviewed")
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[stamp] = out
    return out


def _strip(history: History, h: CaseHistory, page: Page) -> Markup:
    by_position = dict(h.rows)
    marks = []
    regressed = set(h.regressed_in)
    for position, run in enumerate(history.runs):
        row = by_position.get(position)
        if row is None:
            marks.append(f'<i class=n title="{_e(run.run_id)}: not in this run"></i>')
            continue
        cls = _LETTER.get(row[0], "e") + (" r" if position in regressed else "")
        note = " (reviewed)" if row[5] else ""
        note += " — failed while the target's pass rate rose" if position in regressed else ""
        marks.append(f'<i class="{cls}" title="{_e(run.run_id)} {_e(_when(run.started_at))}: {_e(row[0])}{note}"></i>')
    return Markup(f'<span class=strip aria-label="status over runs">{"".join(marks)}</span>')


def _flags(h: CaseHistory) -> Markup:
    words = {"regressed": "regressed while the average rose", "newly-failing": "newly failing", "never-passing": "never passing"}
    return Markup("".join(f'<span class="flag {f}">{_e(words.get(f, f))}</span>' for f in h.flags))


def _case_href(page: Page, key: CaseKey) -> str:
    return page.href("/case", target=key[0], dataset=key[1], case=key[2])


def cases_page(history: History, page: Page, *, flag: str = "all", query: str = "", target: str = "", limit: int = MAX_CASE_ROWS) -> str:
    hist = case_histories(history)
    chosen = [h for h in hist.values() if (flag == "all" or flag in h.flags) and (not target or h.key[0] == target)]
    if query:
        q = query.lower()
        chosen = [h for h in chosen if q in " ".join(h.key).lower()]
    order = {"regressed": 0, "newly-failing": 1, "flaky": 2, "never-passing": 3}
    chosen.sort(key=lambda h: (min((order.get(f, 9) for f in h.flags), default=9), h.key))
    counts = {f: sum(1 for h in hist.values() if f in h.flags) for f in FILTERS[1:]}
    filters = []
    for f in FILTERS:
        label = f.replace("-", " ") + (f" ({counts[f]})" if f in counts else f" ({len(hist)})")
        if page.live:
            filters.append(
                f'<a href="{_e(page.href("/cases", flag=f, q=query, target=target))}" class="{"on" if f == flag else ""}">{_e(label)}</a>'
            )
        else:
            filters.append(f'<a href="#" data-flag="{f}" class="{"on" if f == flag else ""}">{_e(label)}</a>')
    search = (
        f'<form method=get action="/cases" class=filters><input type=hidden name=flag value="{_e(flag)}">'
        f'<input type=search name=q value="{_e(query)}" placeholder="case id, dataset or target" aria-label="search cases">'
        "<button type=submit>Search</button></form>"
        if page.live
        else '<input type=search placeholder="filter cases" data-filter="#cases tbody tr" aria-label="filter cases">'
    )
    rows = []
    for h in chosen[:limit]:
        t, d, c = (_e(x) for x in h.key)
        name = f'<a href="{_e(_case_href(page, h.key))}" class=mono>{d}/{c}</a>' if page.live else f"<span class=mono>{d}/{c}</span>"
        last = h.rows[-1][1]
        rows.append(
            f'<tr class=case-row data-flags="{" ".join(h.flags)}"><td>{name}</td><td>{t}</td><td>{_strip(history, h, page)}</td>'
            f"<td>{_status(last[0])}</td><td class=num>{'—' if last[1] is None else f'{last[1]:.2f}'}</td>"
            f"<td class=num>{_ms(last[2])}</td><td>{_flags(h)}</td></tr>"
        )
    more = f"<p class=muted>{len(chosen) - limit} more; narrow with a filter or a search.</p>" if len(chosen) > limit else ""
    head = "<tr><th>case</th><th>target</th><th>status over runs (oldest left)</th><th>last</th><th class=num>score</th><th class=num>latency</th><th>flags</th></tr>"
    body = (
        f"<h1>Case history <span class=muted>({len(hist)} case × target over {len(history.runs)} runs)</span></h1>"
        f"<div class=filters id=case-filters>{''.join(filters)}</div>{search}"
        f"<table id=cases><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>{more}"
    )
    return document("Case history", Markup(body), page, active="cases")


def _review_form(page: Page, run: RunIndex, key: CaseKey, back: str, current: str | None = None) -> str:
    if not page.live:
        return ""
    t, d, c = key
    token = f'<input type=hidden name=token value="{_e(page.token)}">' if page.token else ""
    choose = "".join(f"<option value={v}{' selected' if v == current else ''}>{v}</option>" for v in ("pass", "fail"))
    return (
        f'<form class=review method=post action="/review">{token}<input type=hidden name=run value="{_e(run.run_id)}">'
        f'<input type=hidden name=target value="{_e(t)}"><input type=hidden name=dataset value="{_e(d)}">'
        f'<input type=hidden name=case value="{_e(c)}"><input type=hidden name=back value="{_e(back)}">'
        f'<select name=verdict aria-label="verdict">{choose}</select>'
        '<input type=text name=comment placeholder="why (optional)" aria-label="comment">'
        f'<input type=text name=reviewer value="{_e(page.reviewer)}" size=10 aria-label="reviewer">'
        "<button type=submit>Mark</button></form>"
    )


def case_page(history: History, key: CaseKey, page: Page, marks: Mapping[str, dict[str, Any]]) -> str:
    """One case on one target across the runs; ``marks``: run id -> the latest review mark of this case there."""
    hist = case_histories(history).get(key)
    t, d, c = key
    if hist is None:
        return message_page("Case not found", f"No run has case {d}/{c} on target {t}.", page)
    labels = [_run_label(history.runs[p]) for p, _ in hist.rows]
    score = {t: [row[1] for _, row in hist.rows]}
    latency = {t: [row[2] for _, row in hist.rows]}
    back = _case_href(page, key)
    rows = []
    for position, row in reversed(hist.rows):
        run = history.runs[position]
        mark = marks.get(run.run_id)
        note = ""
        if mark:
            comment = f": {_e(mark.get('comment'))}" if mark.get("comment") else ""
            note = (
                f'<div class=review-note data-review="{_e(mark.get("verdict"))}">reviewed {_e(mark.get("verdict"))} by {_e(mark.get("reviewer"))}'
                f" at {_e(_when(str(mark.get('at') or '')))}{comment}</div>"
            )
        link = f'<a class=mono href="{_e(page.href("/run/" + run.run_id))}">{_e(run.run_id)}</a>' if page.live else _e(run.run_id)
        rate = run.targets.get(t, {}).get("pass_rate")
        flag = ' <span class="flag regressed">failed while the pass rate rose</span>' if position in hist.regressed_in else ""
        rows.append(
            f"<tr class=case-run data-run={_e(run.run_id)}><td>{link}<div class=muted>{_e(_when(run.started_at))}</div></td>"
            f"<td>{_status(row[0])}{flag}{note}</td><td class=num>{'—' if row[1] is None else f'{row[1]:.2f}'}</td>"
            f"<td class=num>{_ms(row[2])}</td><td class=num>{row[4]}/{row[3]}</td><td class=num>{_pct(rate)}</td>"
            f"<td>{_review_form(page, run, key, back, mark.get('verdict') if mark else None)}</td></tr>"
        )
    head = (
        "<tr><th>run</th><th>status</th><th class=num>score</th><th class=num>latency</th><th class=num>passed</th>"
        "<th class=num>target pass rate</th><th>review</th></tr>"
    )
    body = (
        f"<h1 class=mono>{_e(d)}/{_e(c)} <span class=muted>on</span> {_e(t)}</h1>"
        f"<div class=panel>{_strip(history, hist, page)} {_flags(hist)}</div>"
        "<div class=charts><div class=panel><h2>Score</h2>"
        f"{charts.trend(score, labels, title='Score', fmt=lambda v: f'{v:.2f}')}</div>"
        f"<div class=panel><h2>Latency</h2>{charts.trend(latency, labels, title='Latency', fmt=lambda v: _ms(v))}</div></div>"
        f"<h2>In each run (newest first)</h2><table id=case-runs><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return document(f"{d}/{c} · {t}", Markup(body), page, active="cases")


# ---------------------------------------------------------------- a run's cells to review


def review_page(history: History, run: RunIndex, page: Page, marks: Mapping[CaseKey, dict[str, Any]], *, status: str = "") -> str:
    """A run's cases with a review form each, failures first (the stored report.html is static: marks are set here)."""
    rank = {"fail": 0, "error": 1, "skipped": 2, "pass": 3}
    items = sorted(run.cases.items(), key=lambda kv: (rank.get(kv[1][0], 4), kv[0]))
    if status:
        items = [kv for kv in items if kv[1][0] == status]
    back = page.href(f"/run/{run.run_id}/review", status=status)
    rows = []
    for key, row in items[:MAX_CASE_ROWS]:
        mark = marks.get(key)
        note = f"<div class=review-note>reviewed {_e(mark['verdict'])} by {_e(mark['reviewer'])}</div>" if mark else ""
        rows.append(
            f'<tr class=case-row><td><a class=mono href="{_e(_case_href(page, key))}">{_e(key[1])}/{_e(key[2])}</a></td><td>{_e(key[0])}</td>'
            f"<td>{_status(row[0])}{note}</td><td>{_review_form(page, run, key, back, mark['verdict'] if mark else None)}</td></tr>"
        )
    filters = "".join(
        f'<a href="{_e(page.href(f"/run/{run.run_id}/review", status=s))}" class="{"on" if s == status else ""}">{s or "all"}</a>'
        for s in ("", "fail", "error", "pass", "skipped")
    )
    body = (
        f'<h1>Review run <span class=mono>{_e(run.run_id)}</span></h1><p><a href="{_e(page.href("/run/" + run.run_id))}">the report</a>'
        f" · {run.reviewed} cell(s) reviewed, {run.overridden} overridden</p><div class=filters>{filters}</div>"
        f"<table><thead><tr><th>case</th><th>target</th><th>status</th><th>review</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return document(f"Review {run.run_id}", Markup(body), page, active="runs")


# ---------------------------------------------------------------- compare


@dataclass
class Flip:
    key: CaseKey
    before: str
    after: str
    output_a: str | None = None
    output_b: str | None = None


def flips(a: RunIndex, b: RunIndex) -> list[Flip]:
    """The cases whose verdict differs between ``a`` and ``b``: newly failing first, then newly passing, then the rest."""
    out = [Flip(key, row[0], b.cases[key][0]) for key, row in a.cases.items() if key in b.cases and b.cases[key][0] != row[0]]

    def rank(f: Flip) -> int:
        if f.before == "pass":
            return 0
        return 1 if f.after == "pass" else 2

    out.sort(key=lambda f: (rank(f), f.key))
    return out


def _diff(a: str | None, b: str | None) -> Markup:
    lines = difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), "baseline", "run", lineterm="", n=2)
    parts = []
    for line in lines:
        cls = (
            "add"
            if line.startswith("+") and not line.startswith("+++")
            else "del"
            if line.startswith("-") and not line.startswith("---")
            else ""
        )
        parts.append(f'<span class="{cls}">{_e(line)}</span>' if cls else str(_e(line)))
    if not parts:
        return Markup("<p class=muted>The outputs are the same.</p>")
    return Markup(f"<pre class=diff>{chr(10).join(parts)}</pre>")


def compare_page(history: History, a: RunIndex, b: RunIndex, found: Sequence[Flip], comparison_text: str, page: Page) -> str:
    """Two runs side by side: flipped cells first (with a diff of the outputs), then the statistics of :mod:`evalx.results.compare`."""
    blocks = []
    for n, f in enumerate(found):
        t, d, c = (_e(x) for x in f.key)
        link = f'<a class=mono href="{_e(_case_href(page, f.key))}">{d}/{c}</a>' if page.live else f"<span class=mono>{d}/{c}</span>"
        diff = _diff(f.output_a, f.output_b) if n < MAX_DIFFS else Markup("")
        blocks.append(f'<div class="panel flip"><div>{link} on {t}: {_status(f.before)} → {_status(f.after)}</div>{diff}</div>')
    shared = sum(1 for k in a.cases if k in b.cases)
    targets = sorted(set(a.targets) | set(b.targets))
    trows = "".join(
        f"<tr><td>{_e(t)}</td><td class=num>{_pct(a.targets.get(t, {}).get('pass_rate'))}</td>"
        f"<td class=num>{_pct(b.targets.get(t, {}).get('pass_rate'))}</td>"
        f"<td class=num>{_usd(a.targets.get(t, {}).get('cost_usd'))}</td><td class=num>{_usd(b.targets.get(t, {}).get('cost_usd'))}</td>"
        f"<td class=num>{_ms(a.targets.get(t, {}).get('p99_ms'))}</td><td class=num>{_ms(b.targets.get(t, {}).get('p99_ms'))}</td></tr>"
        for t in targets
    )
    body = (
        f"{_compare_form(history, page, a.run_id, b.run_id) if page.live else ''}"
        f"<h1>Compare <span class=mono>{_e(a.run_id)}</span> → <span class=mono>{_e(b.run_id)}</span></h1>"
        f"<p>{len(found)} of {shared} shared case × target flipped.</p>"
        f"<h2>Flipped cells</h2><div id=flips>{''.join(blocks) or '<p class=muted>No case changed its verdict.</p>'}</div>"
        "<h2>Per target</h2><table><thead><tr><th>target</th><th class=num>pass rate (baseline)</th><th class=num>pass rate (run)</th>"
        "<th class=num>cost (baseline)</th><th class=num>cost (run)</th><th class=num>p99 (baseline)</th><th class=num>p99 (run)</th></tr></thead>"
        f"<tbody>{trows}</tbody></table>"
        f'<h2>Statistics</h2><pre class="diff mono" id=comparison>{_e(comparison_text)}</pre>'
    )
    return document(f"Compare {a.run_id} → {b.run_id}", Markup(body), page, active="compare")


# ---------------------------------------------------------------- the static history page

STATIC_JS = """
document.querySelectorAll('#case-filters a[data-flag]').forEach(function (a) {
  a.addEventListener('click', function (ev) {
    ev.preventDefault();
    var flag = a.getAttribute('data-flag');
    document.querySelectorAll('#case-filters a').forEach(function (x) { x.classList.toggle('on', x === a); });
    document.querySelectorAll('#cases tbody tr').forEach(function (r) {
      r.hidden = flag !== 'all' && (' ' + r.getAttribute('data-flags') + ' ').indexOf(' ' + flag + ' ') < 0;
    });
  });
});
"""


def _body_of(html: str) -> str:
    start = html.index("<main>") + len("<main>")
    end = html.index("<footer>")
    return html[start:end]


def history_document(history: History, *, title: str = "Run history", limit: int = 5000) -> str:
    """The static history page (``evalx report --history``): the runs page and the case histories in one file, no links out."""
    page = Page(live=False)
    runs = _body_of(runs_page(history, page))
    cases = _body_of(cases_page(history, page, limit=limit))
    body = Markup(runs + cases + f"<script>{STATIC_JS}</script>")
    return document(title, body, page)
