"""The viewer's pages as HTML text: runs, case histories, a case, a run's cells to review, a comparison — shared by `evalx view` and the static history page.

Every page is rendered by one path, :func:`render`: Jinja2 templates
(``templates/``) in the HTML report's kind of environment
(:func:`evalx.reports.html.page_environment`: autoescaping), every attribute quoted. Every value that
came from a run folder (run ids, case ids, outputs, reasons, the viewer's
cached index) is data: it reaches a page only through the template's
escaping, never as markup. The only markup not written in a template is the
SVG of :mod:`evalx.reports.charts`, which escapes its labels.

A page is self-contained: inline CSS, inline SVG, and one script of ours
(``templates/viewer.js``, filtering rows by text); the Content-Security-Policy
(:data:`CSP`: sent by the app as a header, written into the static history
page as a meta tag) allows that script by its hash and no other — no inline
handler, no injected ``<script>`` can run. ``live`` pages (the app) link to
each other and carry review forms; the static history page (``live=False``)
has neither.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup

from evalx.reports import charts
from evalx.reports.html import page_environment, template_text
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd
from evalx.version import __version__
from evalx.viewer.index import CaseRow, History, RunIndex

__all__ = [
    "CSP",
    "AssertionView",
    "CaseHistory",
    "CellDetail",
    "Page",
    "Statistics",
    "case_histories",
    "case_page",
    "cases_page",
    "compare_page",
    "csp",
    "history_document",
    "message_page",
    "nav_bar",
    "render",
    "review_items",
    "review_page",
    "run_path",
    "runs_page",
    "script_hash",
]

CaseKey = tuple[str, str, str]
FILTERS = ("all", "regressed", "flaky", "newly-failing", "never-passing")
#: rows the case list shows at once (a filter or a search narrows it)
MAX_CASE_ROWS = 300
#: flipped cells a comparison shows with a diff of their outputs
MAX_DIFFS = 40
#: characters of a cell's input, expected, output or reason the review page shows
TEXT_CAP = 4000

_LETTER = {"pass": "p", "fail": "f", "error": "e", "skipped": "s"}
_NAV = (("runs", "/", "Runs"), ("cases", "/cases", "Case history"), ("compare", "/compare", "Compare"))


def _asset(name: str) -> str:
    return template_text("evalx.viewer", name)


@cache
def _environment() -> jinja2.Environment:
    return page_environment("evalx.viewer")  # the HTML report's kind: autoescaped, strict


@cache
def _script() -> str:
    js = _asset("viewer.js")
    lowered = js.lower()
    if "</script" in lowered or "<!--" in lowered:  # our own code, raw inside <script>: it must not be able to close it
        raise ValueError("viewer.js must not contain '</script' or '<!--'")
    return js


def script_hash() -> str:
    """The CSP source of the one script a viewer page runs (``'sha256-…'``)."""
    digest = hashlib.sha256(_script().encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def csp(*, meta: bool = False) -> str:
    """The pages' Content-Security-Policy: nothing from the network, no script but :func:`script_hash`'s, forms post here only.

    ``meta``: for a ``<meta>`` tag (the static page), without ``frame-ancestors``, which only a header can carry.
    """
    policy = (
        f"default-src 'none'; script-src {script_hash()}; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'"
    )
    return policy if meta else policy + "; frame-ancestors 'none'"


CSP = csp()


def render(template: str, *, title: str, page: Page, active: str = "", extra_links: Sequence[tuple[str, str]] = (), **values: Any) -> str:
    """A page: ``template`` (``templates/``) with ``values``, autoescaped — the one way a viewer page is made."""
    return (
        _environment()
        .get_template(template)
        .render(
            title=title,
            page=page,
            active=active,
            nav=_NAV,
            extra_links=list(extra_links),
            css=Markup(_asset("viewer.css")),
            js=Markup(_script()),
            csp=csp(meta=True),
            version=__version__,
            **values,
        )
    )


def nav_bar(page: Page, title: str, extra_links: Sequence[tuple[str, str]]) -> str:
    """The navigation bar of every page, with its own styles (put at the top of a stored report on ``/run/ID``)."""
    return render("bar.html.j2", title=title, page=page, extra_links=extra_links)


@dataclass
class Page:
    """How a page links: to the app's routes (``live``), or nowhere (the static history page); the token field for forms."""

    live: bool = True
    token: str | None = None
    reviewer: str = ""

    def href(self, path: str, **query: str) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return path + ("?" + urlencode(q) if q else "")


def run_path(run_id: str, *rest: str) -> str:
    """The app's path of a run's page (``/run/ID``, ``/run/ID/review``): the id is one path segment, whatever it holds."""
    return "/".join(["/run", quote(run_id, safe=""), *rest])


def message_page(title: str, text: str, page: Page) -> str:
    return render("message.html.j2", title=title, page=page, text=text)


def _when(iso: str) -> str:
    return iso.replace("T", " ")[:16] if iso else "—"


def _run_label(run: RunIndex) -> str:
    return f"{run.run_id} ({_when(run.started_at)})"


def _tick(run: RunIndex) -> tuple[str, str]:
    """A run under a chart's x axis: its date and time, then its id (the chart keeps the id's end)."""
    return (_when(run.started_at)[5:] if run.started_at else "—", run.run_id)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


# ---------------------------------------------------------------- what the templates are given (text, never markup)


@dataclass
class RunRow:
    id: str
    href: str
    part: str | None
    name: str
    when: str
    rates: list[tuple[str, str]]  # (target, its pass rate)
    reviewed: int
    cost: str
    p99: str
    gates: bool | None
    status: str


@dataclass
class RunsView:
    rows: list[RunRow]
    charts: list[tuple[str, Markup]]  # (title, an SVG of evalx.reports.charts: its labels escaped there)
    compare: list[tuple[str, str]] | None  # (run id, label) for the compare form
    compare_a: str
    compare_b: str
    duplicates: list[str]


@dataclass
class CaseListRow:
    target: str
    dataset: str
    case: str
    href: str
    flag_names: str
    strip: list[tuple[str, str]]  # (class, tooltip) per run
    last: str
    score: str
    latency: str
    flags: list[tuple[str, str]]  # (flag, words)


@dataclass
class CasesView:
    total: int
    runs: int
    filters: list[tuple[str, str, str]]  # (flag, label, href)
    flag: str
    query: str
    rows: list[CaseListRow]
    more: int


@dataclass
class ReviewForm:
    run: str
    target: str
    dataset: str
    case: str
    back: str


@dataclass
class MarkView:
    verdict: str
    reviewer: str
    at: str
    comment: str
    score: str = ""  # the reviewer's 0-1 score, as shown ("0.75"), or ""


@dataclass
class CaseRunRow:
    id: str
    href: str
    when: str
    status: str
    regressed: bool
    mark: MarkView | None
    score: str
    latency: str
    passed: str
    rate: str
    form: ReviewForm


@dataclass
class CaseView:
    target: str
    dataset: str
    case: str
    strip: list[tuple[str, str]]
    flags: list[tuple[str, str]]
    score_chart: Markup
    latency_chart: Markup
    rows: list[CaseRunRow]


@dataclass
class AssertionView:
    passed: bool
    name: str
    reason: str


@dataclass
class ReviewCell:
    target: str
    dataset: str
    case: str
    href: str
    status: str
    mark: MarkView | None
    detail: CellDetail | None
    form: ReviewForm


@dataclass
class ReviewView:
    run: str
    report: str
    reviewed: int
    overridden: int
    status: str
    filters: list[tuple[str, str]]  # (status, href)
    cells: list[ReviewCell]


@dataclass
class FlipView:
    target: str
    dataset: str
    case: str
    href: str
    before: str
    after: str
    diff: list[tuple[str, str]] | None  # (class, line); None past MAX_DIFFS


@dataclass
class CompareView:
    runs: list[tuple[str, str]]
    a: str
    b: str
    flipped: int
    shared: int
    flips: list[FlipView]
    targets: list[list[str]]
    stats: Statistics | None
    comparison_text: str


@dataclass
class HistoryView:
    runs: RunsView
    cases: CasesView


# ---------------------------------------------------------------- runs


def _trends(history: History) -> list[tuple[str, Markup]]:
    runs = history.runs
    labels = [_run_label(r) for r in runs]
    ticks = [_tick(r) for r in runs]
    targets = history.targets

    def series(key: str) -> dict[str, list[float | None]]:
        return {t: [r.targets[t][key] if t in r.targets else None for r in runs] for t in targets}

    return [
        ("Pass rate", charts.trend(series("pass_rate"), labels, title="Pass rate", fmt=_pct, ticks=ticks)),
        ("Cost", charts.trend(series("cost_usd"), labels, title="Cost", fmt=_usd, ticks=ticks)),
        ("p99 latency", charts.trend(series("p99_ms"), labels, title="p99 latency", fmt=_ms, ticks=ticks)),
    ]


def _runs_view(history: History, page: Page) -> RunsView:
    rows: list[RunRow] = []
    for run in reversed(history.runs):  # newest first
        rows.append(
            RunRow(
                id=run.run_id,
                href=page.href(run_path(run.run_id)),
                part=run.part,
                name=run.name,
                when=_when(run.started_at),
                rates=[(t, _pct(figures.get("pass_rate"))) for t, figures in run.targets.items()],
                reviewed=run.reviewed,
                cost=_usd(run.cost_usd),
                p99=_ms(run.p99_ms),
                gates=run.gates,
                status=run.status,
            )
        )
    n = len(history.runs)
    return RunsView(
        rows=rows,
        charts=_trends(history) if n else [],
        compare=[(r.run_id, _run_label(r)) for r in reversed(history.runs)] if page.live and n >= 2 else None,
        compare_a=history.runs[-2].run_id if n >= 2 else "",
        compare_b=history.runs[-1].run_id if n else "",
        duplicates=history.duplicate_notes(),
    )


def runs_page(history: History, page: Page) -> str:
    return render("runs.html.j2", title="Runs", page=page, active="runs", v=_runs_view(history, page))


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


def _strip(history: History, h: CaseHistory) -> list[tuple[str, str]]:
    by_position = dict(h.rows)
    marks = []
    regressed = set(h.regressed_in)
    for position, run in enumerate(history.runs):
        row = by_position.get(position)
        if row is None:
            marks.append(("n", f"{run.run_id}: not in this run"))
            continue
        cls = _LETTER.get(row[0], "e") + (" r" if position in regressed else "")
        note = " (reviewed)" if row[5] else ""
        note += " — failed while the target's pass rate rose" if position in regressed else ""
        marks.append((cls, f"{run.run_id} {_when(run.started_at)}: {row[0]}{note}"))
    return marks


_FLAG_WORDS = {"regressed": "regressed while the average rose", "newly-failing": "newly failing", "never-passing": "never passing"}


def _flags(h: CaseHistory) -> list[tuple[str, str]]:
    return [(f, _FLAG_WORDS.get(f, f)) for f in h.flags]


def _case_href(page: Page, key: CaseKey) -> str:
    return page.href("/case", target=key[0], dataset=key[1], case=key[2])


def _cases_view(history: History, page: Page, *, flag: str, query: str, target: str, limit: int) -> CasesView:
    hist = case_histories(history)
    chosen = [h for h in hist.values() if (flag == "all" or flag in h.flags) and (not target or h.key[0] == target)]
    if query:
        q = query.lower()
        chosen = [h for h in chosen if q in " ".join(h.key).lower()]
    order = {"regressed": 0, "newly-failing": 1, "flaky": 2, "never-passing": 3}
    chosen.sort(key=lambda h: (min((order.get(f, 9) for f in h.flags), default=9), h.key))
    counts = {f: sum(1 for h in hist.values() if f in h.flags) for f in FILTERS[1:]}
    filters = [
        (f, f.replace("-", " ") + f" ({counts.get(f, len(hist))})", page.href("/cases", flag=f, q=query, target=target)) for f in FILTERS
    ]
    rows: list[CaseListRow] = []
    for h in chosen[:limit]:
        last = h.rows[-1][1]
        rows.append(
            CaseListRow(
                target=h.key[0],
                dataset=h.key[1],
                case=h.key[2],
                href=_case_href(page, h.key),
                flag_names=" ".join(h.flags),
                strip=_strip(history, h),
                last=last[0],
                score=_num(last[1]),
                latency=_ms(last[2]),
                flags=_flags(h),
            )
        )
    return CasesView(
        total=len(hist),
        runs=len(history.runs),
        filters=filters,
        flag=flag,
        query=query,
        rows=rows,
        more=max(len(chosen) - limit, 0),
    )


def cases_page(history: History, page: Page, *, flag: str = "all", query: str = "", target: str = "", limit: int = MAX_CASE_ROWS) -> str:
    view = _cases_view(history, page, flag=flag, query=query, target=target, limit=limit)
    return render("cases.html.j2", title="Case history", page=page, active="cases", v=view)


def _form(run: RunIndex, key: CaseKey, back: str) -> ReviewForm:
    return ReviewForm(run=run.run_id, target=key[0], dataset=key[1], case=key[2], back=back)


def _mark_view(mark: Mapping[str, Any] | None) -> MarkView | None:
    if not mark:
        return None
    return MarkView(
        verdict=str(mark.get("verdict") or ""),
        reviewer=str(mark.get("reviewer") or ""),
        at=_when(str(mark.get("at") or "")),
        comment=str(mark.get("comment") or ""),
        score=f"{mark['score']:g}" if isinstance(mark.get("score"), float) else "",
    )


def case_page(history: History, key: CaseKey, page: Page, marks: Mapping[str, Mapping[str, Any]]) -> str:
    """One case on one target across the runs; ``marks``: run id -> the latest review mark of this case there."""
    hist = case_histories(history).get(key)
    t, d, c = key
    if hist is None:
        return message_page("Case not found", f"No run has case {d}/{c} on target {t}.", page)
    labels = [_run_label(history.runs[p]) for p, _ in hist.rows]
    ticks = [_tick(history.runs[p]) for p, _ in hist.rows]
    back = _case_href(page, key)
    rows: list[CaseRunRow] = []
    for position, row in reversed(hist.rows):
        run = history.runs[position]
        rows.append(
            CaseRunRow(
                id=run.run_id,
                href=page.href(run_path(run.run_id)),
                when=_when(run.started_at),
                status=row[0],
                regressed=position in hist.regressed_in,
                mark=_mark_view(marks.get(run.run_id)),
                score=_num(row[1]),
                latency=_ms(row[2]),
                passed=f"{row[4]}/{row[3]}",
                rate=_pct(run.targets.get(t, {}).get("pass_rate")),
                form=_form(run, key, back),
            )
        )
    view = CaseView(
        target=t,
        dataset=d,
        case=c,
        strip=_strip(history, hist),
        flags=_flags(hist),
        score_chart=charts.trend({t: [row[1] for _, row in hist.rows]}, labels, title="Score", fmt=lambda v: f"{v:.2f}", ticks=ticks),
        latency_chart=charts.trend({t: [row[2] for _, row in hist.rows]}, labels, title="Latency", fmt=_ms, ticks=ticks),
        rows=rows,
    )
    return render("case.html.j2", title=f"{d}/{c} · {t}", page=page, active="cases", v=view)


# ---------------------------------------------------------------- a run's cells to review


@dataclass
class CellDetail:
    """What a reviewer reads beside the form: the first repeat's input, expected answer, output, error and assertions."""

    input: str = ""
    expected: str = ""
    output: str = ""
    error: str = ""
    assertions: list[AssertionView] = field(default_factory=list)


def _review_view(
    run: RunIndex, page: Page, marks: Mapping[CaseKey, Mapping[str, Any]], details: Mapping[CaseKey, CellDetail], status: str
) -> ReviewView:
    back = page.href(run_path(run.run_id, "review"), status=status)
    cells: list[ReviewCell] = []
    for key, row in review_items(run, status):
        cells.append(
            ReviewCell(
                target=key[0],
                dataset=key[1],
                case=key[2],
                href=_case_href(page, key),
                status=row[0],
                mark=_mark_view(marks.get(key)),
                detail=details.get(key),
                form=_form(run, key, back),
            )
        )
    return ReviewView(
        run=run.run_id,
        report=page.href(run_path(run.run_id)),
        reviewed=run.reviewed,
        overridden=run.overridden,
        status=status,
        filters=[(s, page.href(run_path(run.run_id, "review"), status=s)) for s in ("", "fail", "error", "pass", "skipped")],
        cells=cells,
    )


def review_items(run: RunIndex, status: str = "") -> list[tuple[CaseKey, CaseRow]]:
    """The cases the review page lists: failures first, at most :data:`MAX_CASE_ROWS` (those whose details are read)."""
    rank = {"fail": 0, "error": 1, "skipped": 2, "pass": 3}
    items = sorted(run.cases.items(), key=lambda kv: (rank.get(kv[1][0], 4), kv[0]))
    if status:
        items = [kv for kv in items if kv[1][0] == status]
    return items[:MAX_CASE_ROWS]


def review_page(
    history: History,
    run: RunIndex,
    page: Page,
    marks: Mapping[CaseKey, Mapping[str, Any]],
    *,
    status: str = "",
    details: Mapping[CaseKey, CellDetail] | None = None,
) -> str:
    """A run's cells with what a reviewer needs beside each form (input, expected, output, reasons), failures first."""
    view = _review_view(run, page, marks, details or {}, status)
    return render("review.html.j2", title=f"Review {run.run_id}", page=page, active="runs", v=view)


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


def _diff(a: str | None, b: str | None) -> list[tuple[str, str]]:
    lines = difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), "baseline", "run", lineterm="", n=2)
    out = []
    for line in lines:
        added = line.startswith("+") and not line.startswith("+++")
        removed = line.startswith("-") and not line.startswith("---")
        out.append(("add" if added else "del" if removed else "", line))
    return out


@dataclass
class Statistics:
    """:func:`evalx.results.compare.comparison_table`'s table, or None with the reason as text."""

    head: list[str]
    rows: list[list[str]]
    notes: list[str]


def compare_page(history: History, a: RunIndex, b: RunIndex, found: Sequence[Flip], statistics: Statistics | str, page: Page) -> str:
    """Two runs side by side: flipped cells first (with a diff of the outputs), per-target figures, then the comparison's statistics."""
    flips_view: list[FlipView] = []
    for n, f in enumerate(found):
        flips_view.append(
            FlipView(
                target=f.key[0],
                dataset=f.key[1],
                case=f.key[2],
                href=_case_href(page, f.key),
                before=f.before,
                after=f.after,
                diff=_diff(f.output_a, f.output_b) if n < MAX_DIFFS else None,
            )
        )
    targets = sorted(set(a.targets) | set(b.targets))

    def figure(run: RunIndex, t: str, key: str) -> Any:
        return run.targets.get(t, {}).get(key)

    view = CompareView(
        runs=[(r.run_id, _run_label(r)) for r in reversed(history.runs)],
        a=a.run_id,
        b=b.run_id,
        flipped=len(found),
        shared=sum(1 for k in a.cases if k in b.cases),
        flips=flips_view,
        targets=[
            [
                t,
                _pct(figure(a, t, "pass_rate")),
                _pct(figure(b, t, "pass_rate")),
                _usd(figure(a, t, "cost_usd")),
                _usd(figure(b, t, "cost_usd")),
                _ms(figure(a, t, "p99_ms")),
                _ms(figure(b, t, "p99_ms")),
            ]
            for t in targets
        ],
        stats=statistics if isinstance(statistics, Statistics) else None,
        comparison_text=statistics if isinstance(statistics, str) else "",
    )
    return render("compare.html.j2", title=f"Compare {a.run_id} → {b.run_id}", page=page, active="compare", v=view)


# ---------------------------------------------------------------- the static history page


def history_document(history: History, *, title: str = "Run history", limit: int = 5000) -> str:
    """The static history page (``evalx report --history``): the runs page and the case histories in one file, no links out."""
    page = Page(live=False)
    view = HistoryView(
        runs=_runs_view(history, page),
        cases=_cases_view(history, page, flag="all", query="", target="", limit=limit),
    )
    return render("history.html.j2", title=title, page=page, v=view)
