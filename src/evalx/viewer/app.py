"""`evalx view`: the aiohttp app over a runs folder — runs, case histories, comparisons, a run's report, review marks.

No database: every request looks at the folder as it is (new runs appear,
changed runs are read again, through :mod:`evalx.viewer.index`). Safety:

- bound to 127.0.0.1 unless ``--host`` says otherwise;
- the ``Host`` header must name the address the app serves (a loopback name
  on loopback), so a page of another site that rebinds its DNS name to
  127.0.0.1 gets nothing;
- a write (``POST /review``) must come from the app's own pages: an
  ``Origin`` (or ``Referer``) of another origin is refused;
- with a token (always off loopback), every request carries it: ``?token=``
  once (kept in a same-site cookie; a valid one replaces an older cookie), or
  the ``X-Evalx-Token`` header;
- every page is rendered by :func:`evalx.viewer.pages.render` (autoescaped
  templates) and sent with a Content-Security-Policy that runs no script but
  the page's own (by hash): a run id or an output cannot become markup or code;
- a malformed request (a form cut short, a number that is not ASCII digits)
  is answered 400 with one line; a redirect goes only to a path of this app,
  rebuilt from its parsed parts;
- a page never writes: ``GET /run/ID`` renders a report whose review marks
  are newer than its ``report.html`` in memory; only ``POST /review`` writes
  (a mark to ``reviews.jsonl``, then the run's reports), and only in the
  folder named for the run (see :func:`evalx.viewer.index.load_history`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.http_exceptions
from aiohttp import web
from yarl import URL

from evalx.errors import EvalxError, one_line
from evalx.reports.html import report_script_source
from evalx.results.compare import compare_runs, comparison_table
from evalx.results.display import show_id
from evalx.results.reviews import REVIEWS, add_mark, default_reviewer, load_marks
from evalx.results.store import RESULTS, read_results
from evalx.viewer.index import History, RunIndex, file_versions, load_history
from evalx.viewer.pages import (
    CSP,
    MAX_DIFFS,
    TEXT_CAP,
    AssertionView,
    CellDetail,
    Page,
    Statistics,
    case_page,
    cases_page,
    compare_page,
    flips,
    message_page,
    nav_bar,
    review_items,
    review_page,
    run_path,
    runs_page,
)

log = logging.getLogger(__name__)


class _OneLineRequestErrors(logging.Filter):
    """aiohttp's "Error handling request" records as one line, never a traceback on the viewer's terminal.

    A malformed request (a duplicated ``Host``, a request line past 8 KiB,
    bytes that are not HTTP) is answered 400 by aiohttp itself; the line says
    what it was. Anything else that escapes a page is named in one line too
    (``EVALX_DEBUG=1`` keeps the traceback).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or os.environ.get("EVALX_DEBUG"):
            return True
        if isinstance(exc, aiohttp.http_exceptions.HttpProcessingError):
            what, record.levelno, record.levelname = f"bad request: {exc.message}".strip(), logging.WARNING, "WARNING"
        else:
            what = one_line(exc)
        record.msg, record.args = "evalx view: %s", (" ".join(what.split())[:300],)
        record.exc_info, record.exc_text = None, None
        return True


#: the log aiohttp's request handler writes to (it is given to the server as its ``logger``)
REQUEST_LOG = logging.getLogger(f"{__name__}.requests")
REQUEST_LOG.addFilter(_OneLineRequestErrors())

__all__ = ["DEFAULT_PORT", "ViewerSettings", "is_loopback", "make_app", "serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8742
TOKEN_COOKIE = "evalx_token"
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ViewerSettings:
    runs_dir: Path
    host: str = DEFAULT_HOST
    token: str | None = None
    reviewer: str | None = None

    def host_allowed(self, header: str) -> bool:
        """Whether a request's ``Host`` header names this app (its port is not checked: the socket already did)."""
        name = urlsplit("//" + header).hostname or ""
        if is_loopback(self.host):
            return name in _LOOPBACK_NAMES or is_loopback(name)
        if self.host in ("0.0.0.0", "::", ""):  # every interface: any name that reaches it, and the token decides
            return bool(name)
        return name == self.host.strip("[]").lower() or is_loopback(name)


SETTINGS = web.AppKey("settings", ViewerSettings)


def _tokens_of(request: web.Request) -> list[str]:
    """The tokens a request carries, the most explicit first: the header, the address (a freshly printed URL), the cookie."""
    given = (request.headers.get("X-Evalx-Token"), request.query.get("token"), request.cookies.get(TOKEN_COOKIE))
    return [g for g in given if g]


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def _bad_request(what: str) -> web.Response:
    return web.Response(status=400, text=f"evalx view: bad request: {what}\n")


async def _form_of(request: web.Request) -> Mapping[str, object]:
    """The request's form fields; a body that cannot be read as one (cut short, malformed) is a 400, not a 500."""
    try:
        return await request.post()
    except web.HTTPException:
        raise
    except (
        ValueError,
        UnicodeError,
        AssertionError,
        LookupError,
        ConnectionError,  # the body ended before its length said (the client gave up)
        aiohttp.ClientPayloadError,
        aiohttp.http_exceptions.HttpProcessingError,
    ) as exc:
        raise web.HTTPBadRequest(text=f"evalx view: bad request: the form could not be read ({type(exc).__name__})\n") from None


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer, a refusal or an error page too, leaves with the policy headers; an error is one line of text."""
    try:
        answer = await _checked(request, handler)
    except web.HTTPException as exc:
        if exc.status < 400:  # a redirect (with its cookie)
            raise
        answer = web.Response(status=exc.status, text=exc.text or f"evalx view: {exc.reason}\n")
    except EvalxError as exc:  # a run's file that cannot be read (a FIFO, too large...): one line, no traceback
        log.warning(f"evalx view: {exc}")
        answer = web.Response(status=500, text=f"evalx view: {exc}\n")
    answer.headers.setdefault("Content-Security-Policy", CSP)
    answer.headers.setdefault("X-Content-Type-Options", "nosniff")
    answer.headers.setdefault("X-Frame-Options", "DENY")
    answer.headers.setdefault("Referrer-Policy", "same-origin")
    return answer


async def _checked(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    host = request.headers.get("Host", "")
    if not settings.host_allowed(host):
        return web.Response(status=403, text=f"evalx view: refused: Host {host!r} is not this viewer's address\n")
    if settings.token is not None:
        given = _tokens_of(request)
        if request.method == "POST" and not given:
            value = (await _form_of(request)).get("token")
            given = [value] if isinstance(value, str) else []
        if not any(_same(g, settings.token) for g in given):
            return web.Response(status=401, text="evalx view: this viewer needs its token (the URL it printed at start)\n")
        if request.method == "GET" and _same(request.query.get("token"), settings.token):
            # once: kept in a cookie (replacing an older one), dropped from the address bar
            rest = [(k, v) for k, v in request.query.items() if k != "token"]
            response = web.HTTPSeeOther(_back(str(request.rel_url.with_query(rest))))  # (`//host/?token=`: not a way out)
            response.set_cookie(TOKEN_COOKIE, settings.token, httponly=True, samesite="Strict")
            raise response
    if request.method not in ("GET", "HEAD"):
        origin = request.headers.get("Origin")
        source = origin if origin is not None else request.headers.get("Referer")
        if source is not None and _origin_of(source) != f"{request.scheme}://{host}".lower():
            return web.Response(status=403, text=f"evalx view: refused a write from another origin ({source})\n")
        if source is None and request.headers.get("Sec-Fetch-Site") not in (None, "same-origin", "none"):
            return web.Response(status=403, text="evalx view: refused a cross-site write\n")
    return await handler(request)


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else "null"


def _page(request: web.Request) -> Page:
    settings = request.app[SETTINGS]
    return Page(live=True, token=settings.token, reviewer=settings.reviewer or default_reviewer())


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, content_type="text/html", charset="utf-8", status=status)


async def _history(request: web.Request) -> History:
    return await asyncio.to_thread(load_history, request.app[SETTINGS].runs_dir)


async def runs_view(request: web.Request) -> web.Response:
    # runs not indexed yet are shown from their summaries (the index is being built in the background)
    history = await asyncio.to_thread(load_history, request.app[SETTINGS].runs_dir, headlines=True)
    return _html(runs_page(history, _page(request)))


def _query(request: web.Request, name: str, default: str = "") -> str:
    """A query parameter as text (a malformed query string is a 400)."""
    try:
        value = request.query.get(name, default)
    except (ValueError, UnicodeError) as exc:
        raise web.HTTPBadRequest(text=f"evalx view: bad request: the query could not be read ({type(exc).__name__})\n") from None
    if "\x00" in value:
        raise web.HTTPBadRequest(text=f"evalx view: bad request: {name} holds a NUL character\n")
    return value


async def cases_view(request: web.Request) -> web.Response:
    flag, query, target = _query(request, "flag", "all"), _query(request, "q"), _query(request, "target")
    history = await _history(request)
    return _html(cases_page(history, _page(request), flag=flag, query=query, target=target))


async def case_view(request: web.Request) -> web.Response:
    key = (_query(request, "target"), _query(request, "dataset"), _query(request, "case"))
    history = await _history(request)
    marks: dict[str, dict[str, Any]] = {}
    for run in history.runs:
        if key in run.cases and (run.path / REVIEWS).is_file():
            entries = load_marks(run.path).by_case.get(key)
            if entries:
                marks[run.run_id] = entries[-1][2]
    status = 200 if any(key in r.cases for r in history.runs) else 404
    return _html(case_page(history, key, _page(request), marks), status)


def _find(history: History, run_id: str) -> RunIndex:
    run = history.by_id(run_id)
    if run is None:
        raise web.HTTPNotFound(text=f"evalx view: no run {run_id!r} here\n")
    return run


def _outputs(run: RunIndex, keys: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """The first repeat's output text of each case in ``keys`` (one read of the run's results)."""
    out: dict[tuple[str, str, str], str] = {}
    for r in read_results(run.path / RESULTS):
        key = (str(r.get("target") or ""), str(r.get("dataset") or ""), str(r.get("case_id") or ""))
        if key in keys and key not in out:
            output = r.get("output")
            text = output.get("text") if isinstance(output, dict) else None
            out[key] = text if isinstance(text, str) else ("" if text is None else str(text))
    return out


def _compare(history: History, a: RunIndex, b: RunIndex, page: Page) -> str:
    found = flips(a, b)
    keys = {f.key for f in found[:MAX_DIFFS]}
    if keys:
        out_a, out_b = _outputs(a, keys), _outputs(b, keys)
        for f in found[:MAX_DIFFS]:
            f.output_a, f.output_b = out_a.get(f.key), out_b.get(f.key)
    statistics: Statistics | str
    try:
        statistics = Statistics(*comparison_table(compare_runs(a.path, b.path)))
    except (EvalxError, OSError, ValueError) as exc:
        statistics = f"could not compare: {exc}"
    return compare_page(history, a, b, found, statistics, page)


async def compare_view(request: web.Request) -> web.Response:
    history = await _history(request)
    page = _page(request)
    if len(history.runs) < 2 and not _query(request, "b"):
        return _html(message_page("Compare", "Two runs are needed to compare.", page))
    b = _find(history, _query(request, "b") or history.runs[-1].run_id)
    wanted = _query(request, "a") or (history.runs[-2].run_id if len(history.runs) >= 2 else "")
    if wanted == "baseline":
        if b.baseline is None:
            return _html(message_page("Compare", f"Run {b.run_id} was not compared with a baseline.", page), 404)
        wanted = b.baseline
    a = _find(history, wanted)
    return _html(await asyncio.to_thread(_compare, history, a, b, page))


#: the files a run's report is rendered from: a report rendered from the same versions of them is rendered again only when one changes
_REPORT_INPUTS = (RESULTS, "summary.json", "run.json", REVIEWS, "config.yaml")
#: characters of rendered reports the viewer keeps (the most recently viewed first)
REPORT_CACHE_CHARS = 256 * 1024 * 1024


class RenderedReports:
    """The reports ``/run/ID`` showed, kept in memory by run folder and the versions (size, mtime) of the files they came from.

    A run's stored ``report.html`` is never served: it is markup from disk (a
    run folder restored from an artifact may hold any page, with forms that
    post review marks to this viewer). Each report is rendered from the run's
    data by the one autoescaping report path, once per version of its files.
    """

    def __init__(self, budget: int = REPORT_CACHE_CHARS) -> None:
        self.budget = budget
        self._kept: dict[Path, tuple[list[Any], str]] = {}

    def text(self, run: RunIndex) -> str | None:
        """``run``'s report as :func:`evalx.reports.render.rebuild_reports` would write it now; None for a run still running."""
        from evalx.reports.render import report_html_text, stored_report_options

        if run.status == "running":
            return None
        sig = file_versions(run.path, _REPORT_INPUTS)
        kept = self._kept.pop(run.path, None)
        if kept is not None and kept[0] == sig:
            html = kept[1]
        else:
            html = report_html_text(run.path, stored_report_options(run.path))
        self._kept[run.path] = (sig, html)  # (last: the most recently viewed)
        while sum(len(h) for _, h in self._kept.values()) > self.budget and len(self._kept) > 1:
            del self._kept[next(iter(self._kept))]
        return html


REPORTS = web.AppKey("reports", RenderedReports)


async def run_view(request: web.Request) -> web.StreamResponse:
    history = await _history(request)
    run = _find(history, request.match_info["run_id"])
    page = _page(request)
    html = await asyncio.to_thread(request.app[REPORTS].text, run)
    if html is None:
        return _html(message_page(run.run_id, "This run has no report.html yet (still running?).", page), 404)
    links = [(page.href(run_path(run.run_id, "review")), "Review cells")]
    if run.baseline:
        links.append((page.href("/compare", a="baseline", b=run.run_id), "Compare with its baseline"))
    bar = nav_bar(page, f"Run {run.run_id}", links)
    at = html.find("<body")
    if at >= 0:
        at = html.index(">", at) + 1
        html = html[:at] + bar + html[at:]
    response = _html(html)
    # the report's one script (by hash) and no other; the bar is markup only, and the page posts nothing
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src {report_script_source()}; style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return response


async def review_list_view(request: web.Request) -> web.Response:
    history = await _history(request)
    run = _find(history, request.match_info["run_id"])
    status = _query(request, "status")
    marks = load_marks(run.path)
    latest = {key: entries[-1][2] for key, entries in marks.by_case.items()}
    details = await asyncio.to_thread(_details, run, {key for key, _ in review_items(run, status)})
    return _html(review_page(history, run, _page(request), latest, status=status, details=details))


def _clip(value: object, cap: int = TEXT_CAP) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= cap else text[: cap - 1] + f"… ({len(text):,} characters)"


def _details(run: RunIndex, keys: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], CellDetail]:
    """What the review page shows of each case in ``keys``: its first repeat's input, expected, output, error, assertions."""
    out: dict[tuple[str, str, str], CellDetail] = {}
    for r in read_results(run.path / RESULTS):
        key = (str(r.get("target") or ""), str(r.get("dataset") or ""), str(r.get("case_id") or ""))
        if key not in keys or key in out:
            continue
        output = r.get("output")
        text = output.get("text") if isinstance(output, dict) else None
        assertions = [
            AssertionView(
                passed=a.get("passed") is True,
                name=_clip(a.get("name") or a.get("type"), 200),
                reason=_clip(a.get("reason") or a.get("error")),
            )
            for a in r.get("assertions") or []
            if isinstance(a, dict)
        ]
        out[key] = CellDetail(
            input=_clip(r.get("input")),
            expected=_clip(r.get("expected")),
            output=_clip(text),
            error=_clip(r.get("error")),
            assertions=assertions,
        )
    return out


_ASCII_NUMBER = re.compile(r"[0-9]{1,9}")
_SCORE = re.compile(r"(?:0|1)(?:\.[0-9]{1,6})?|\.[0-9]{1,6}")


def _back(value: str) -> str:
    """Where to go after a mark: a path of this app, rebuilt from its parsed parts (anything else: the runs page)."""
    if not value or any(ord(c) < 0x21 or c in "\\\x7f" for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.path.startswith("//"):
        return "/"
    return str(URL.build(path=parts.path, query_string=parts.query, encoded=False))


async def review_post(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    form = await _form_of(request)

    def field(name: str) -> str:
        value = form.get(name)
        return value.strip() if isinstance(value, str) else ""

    repeat_text = field("repeat")
    if repeat_text and not _ASCII_NUMBER.fullmatch(repeat_text):
        return _bad_request(f"repeat {repeat_text[:40]!r} is not a repeat number (0, 1, ...)")
    score_text = field("score")
    if score_text and (not _SCORE.fullmatch(score_text) or float(score_text) > 1):
        return _bad_request(f"score {score_text[:40]!r} is not a number from 0 to 1")
    history = await _history(request)
    run = _find(history, field("run"))
    key = (field("target"), field("dataset"), field("case"))
    if all(key) and key not in run.cases and run.status != "running":  # (a form's bytes that were not UTF-8 name no case either)
        return _bad_request(f"run {show_id(run.run_id)} has no cell {show_id(key[0])} {show_id(key[1])}/{show_id(key[2])}"[:300])
    try:
        mark = await asyncio.to_thread(
            add_mark,
            run.path,
            target=field("target"),
            dataset=field("dataset"),
            case_id=field("case"),
            verdict=field("verdict"),
            comment=field("comment")[:4000],
            reviewer=field("reviewer")[:200] or settings.reviewer or None,
            repeat=int(repeat_text) if repeat_text else None,
            score=float(score_text) if score_text else None,
        )
    except EvalxError as exc:
        return web.Response(status=400, text=f"evalx view: {exc}\n")
    if run.status != "running":  # the run's files say what the marks say (summary.json, junit.xml, report.html)
        await asyncio.to_thread(_rebuild, run.path)
    if request.headers.get("Accept", "").startswith("application/json"):
        return web.json_response(mark)
    raise web.HTTPSeeOther(_back(field("back")))


def _rebuild(run_dir: Path) -> None:
    from evalx.reports.render import rebuild_reports, stored_report_options

    rebuild_reports(run_dir, options=stored_report_options(run_dir))


def make_app(runs_dir: Path, *, host: str = DEFAULT_HOST, token: str | None = None, reviewer: str | None = None) -> web.Application:
    """The viewer app over ``runs_dir`` (serve it with :func:`serve`, or aiohttp's test client)."""
    app = web.Application(middlewares=[_guard], client_max_size=256 * 1024)
    app[SETTINGS] = ViewerSettings(runs_dir=runs_dir, host=host, token=token, reviewer=reviewer)
    app[REPORTS] = RenderedReports()
    app.router.add_get("/", runs_view)
    app.router.add_get("/cases", cases_view)
    app.router.add_get("/case", case_view)
    app.router.add_get("/compare", compare_view)
    app.router.add_get("/run/{run_id}", run_view)
    app.router.add_get("/run/{run_id}/review", review_list_view)
    app.router.add_post("/review", review_post)
    return app


def serve(
    runs_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    reviewer: str | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Serve until Ctrl-C. Off loopback a token is required: ``token`` or a new one, printed with the address."""
    if not is_loopback(host) and token is None:
        token = secrets.token_urlsafe(18)
    app = make_app(runs_dir, host=host, token=token, reviewer=reviewer)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None, logger=REQUEST_LOG)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0] if runner.addresses else (host, port)
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
        url = f"http://{shown}:{bound[1]}/" + (f"?token={token}" if token else "")
        echo(f"evalx view: {runs_dir} at {url}" + ("" if is_loopback(host) else "  (the token is needed off this machine)"))
        echo("Ctrl-C to stop")
        warming = asyncio.create_task(asyncio.to_thread(load_history, runs_dir))  # index every run before the first page asks
        stop = asyncio.Event()
        # Ctrl-C and SIGTERM stop it, as they stop `evalx run` (cancel_on_signals): by the loop's own handlers, so a
        # viewer started where SIGINT was ignored (a background job of a script) still stops on it
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # (no signal handlers on Windows' loop)
                asyncio.get_running_loop().add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            warming.cancel()
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
