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
  once (kept in a same-site cookie), or the ``X-Evalx-Token`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import secrets
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from evalx.common.reading import REPORT, read_bytes
from evalx.errors import EvalxError
from evalx.results.compare import compare_runs, format_comparison
from evalx.results.reviews import REVIEWS, add_mark, default_reviewer, load_marks
from evalx.results.store import RESULTS, read_results
from evalx.viewer.index import History, RunIndex, load_history
from evalx.viewer.pages import MAX_DIFFS, Page, case_page, cases_page, compare_page, flips, message_page, review_page, runs_page

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


def _token_of(request: web.Request) -> str | None:
    return request.headers.get("X-Evalx-Token") or request.cookies.get(TOKEN_COOKIE) or request.query.get("token")


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    host = request.headers.get("Host", "")
    if not settings.host_allowed(host):
        return web.Response(status=403, text=f"evalx view: refused: Host {host!r} is not this viewer's address\n")
    if settings.token is not None:
        given = _token_of(request)
        if request.method == "POST" and given is None:
            form = await request.post()
            value = form.get("token")
            given = value if isinstance(value, str) else None
        if not _same(given, settings.token):
            return web.Response(status=401, text="evalx view: this viewer needs its token (the URL it printed at start)\n")
        if request.method == "GET" and "token" in request.query:  # once: kept in a cookie, dropped from the address bar
            rest = {k: v for k, v in request.query.items() if k != "token"}
            response = web.HTTPSeeOther(request.rel_url.with_query(rest))
            response.set_cookie(TOKEN_COOKIE, settings.token, httponly=True, samesite="Strict")
            raise response
    if request.method not in ("GET", "HEAD"):
        origin = request.headers.get("Origin")
        source = origin if origin is not None else request.headers.get("Referer")
        if source is not None and _origin_of(source) != f"{request.scheme}://{host}".lower():
            return web.Response(status=403, text=f"evalx view: refused a write from another origin ({source})\n")
        if source is None and request.headers.get("Sec-Fetch-Site") not in (None, "same-origin", "none"):
            return web.Response(status=403, text="evalx view: refused a cross-site write\n")
    answer = await handler(request)
    answer.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; form-action 'self'",
    )
    answer.headers.setdefault("X-Frame-Options", "DENY")
    answer.headers.setdefault("Referrer-Policy", "same-origin")
    return answer


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


async def cases_view(request: web.Request) -> web.Response:
    q = request.query
    flag = q.get("flag", "all")
    history = await _history(request)
    return _html(cases_page(history, _page(request), flag=flag, query=q.get("q", ""), target=q.get("target", "")))


async def case_view(request: web.Request) -> web.Response:
    q = request.query
    key = (q.get("target", ""), q.get("dataset", ""), q.get("case", ""))
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
    try:
        text = format_comparison(compare_runs(a.path, b.path))
    except (EvalxError, OSError, ValueError) as exc:
        text = f"could not compare: {exc}"
    return compare_page(history, a, b, found, text, page)


async def compare_view(request: web.Request) -> web.Response:
    history = await _history(request)
    page = _page(request)
    if len(history.runs) < 2 and "b" not in request.query:
        return _html(message_page("Compare", "Two runs are needed to compare.", page))
    b = _find(history, request.query.get("b") or history.runs[-1].run_id)
    wanted = request.query.get("a") or (history.runs[-2].run_id if len(history.runs) >= 2 else "")
    if wanted == "baseline":
        if b.baseline is None:
            return _html(message_page("Compare", f"Run {b.run_id} was not compared with a baseline.", page), 404)
        wanted = b.baseline
    a = _find(history, wanted)
    return _html(await asyncio.to_thread(_compare, history, a, b, page))


def _report_current(run: RunIndex) -> Path:
    """The run's report.html, rendered again first when review marks are newer than it (or it is missing)."""
    from evalx.reports.render import rebuild_reports, stored_report_options

    report = run.path / "report.html"
    reviews = run.path / REVIEWS
    stale = not report.is_file() or (reviews.is_file() and reviews.stat().st_mtime_ns > report.stat().st_mtime_ns)
    if stale and run.status != "running":
        rebuild_reports(run.path, options=stored_report_options(run.path))
    return report


async def run_view(request: web.Request) -> web.StreamResponse:
    history = await _history(request)
    run = _find(history, request.match_info["run_id"])
    report = await asyncio.to_thread(_report_current, run)
    if not report.is_file():
        return _html(message_page(run.run_id, "This run has no report.html yet (still running?).", _page(request)), 404)
    page = _page(request)
    html = (await asyncio.to_thread(read_bytes, report, REPORT)).decode("utf-8", "replace")  # a regular file only
    links = [("/", "← runs"), (f"/run/{run.run_id}/review", "review cells"), ("/cases", "case history")]
    if run.baseline:
        links.append((page.href("/compare", a="baseline", b=run.run_id), "compare with its baseline"))
    bar = (
        '<nav id=evalx-viewer-bar style="background:#1d2330;padding:8px 16px;font:14px system-ui,sans-serif;display:flex;gap:16px">'
        + "".join(f'<a style="color:#d6e0ff" href="{h}">{t}</a>' for h, t in links)
        + "</nav>"
    )
    at = html.find("<body")
    if at >= 0:
        at = html.index(">", at) + 1
        html = html[:at] + bar + html[at:]
    response = _html(html)
    # the stored report's own policy stands; the viewer adds the bar's links only
    response.headers["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
    return response


async def review_list_view(request: web.Request) -> web.Response:
    history = await _history(request)
    run = _find(history, request.match_info["run_id"])
    marks = load_marks(run.path)
    latest = {key: entries[-1][2] for key, entries in marks.by_case.items()}
    return _html(review_page(history, run, _page(request), latest, status=request.query.get("status", "")))


async def review_post(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    form = await request.post()

    def field(name: str) -> str:
        value = form.get(name)
        return value.strip() if isinstance(value, str) else ""

    history = await _history(request)
    run = _find(history, field("run"))
    repeat_text = field("repeat")
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
            repeat=int(repeat_text) if repeat_text.isdigit() else None,
        )
    except EvalxError as exc:
        return web.Response(status=400, text=f"evalx view: {exc}\n")
    if run.status != "running":  # the run's files say what the marks say (summary.json, junit.xml, report.html)
        await asyncio.to_thread(_rebuild, run.path)
    back = field("back")
    if request.headers.get("Accept", "").startswith("application/json"):
        return web.json_response(mark)
    if not back.startswith("/") or back[1:2] in ("/", "\\") or any(c in back for c in "\r\n"):  # this app's own pages only
        back = "/"
    raise web.HTTPSeeOther(back)


def _rebuild(run_dir: Path) -> None:
    from evalx.reports.render import rebuild_reports, stored_report_options

    rebuild_reports(run_dir, options=stored_report_options(run_dir))


def make_app(runs_dir: Path, *, host: str = DEFAULT_HOST, token: str | None = None, reviewer: str | None = None) -> web.Application:
    """The viewer app over ``runs_dir`` (serve it with :func:`serve`, or aiohttp's test client)."""
    app = web.Application(middlewares=[_guard], client_max_size=256 * 1024)
    app[SETTINGS] = ViewerSettings(runs_dir=runs_dir, host=host, token=token, reviewer=reviewer)
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
        runner = web.AppRunner(app, access_log=None)
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
        with contextlib.suppress(NotImplementedError, RuntimeError):  # (no signal handlers on Windows' loop)
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            warming.cancel()
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
