"""The one HTTP layer every remote target uses (engine now, providers next).

A target makes ONE :class:`HttpClient` in ``start()`` and closes it in
``aclose()``; its connection pool is as large as the target's resolved
concurrency (:class:`~evalx.targets.settings.TargetSettings`), the number of
cells the executor runs at once, so a started cell never waits for a
connection: waiting is done before a cell starts, never on its clock.
Every failure comes out as a :class:`~evalx.errors.TargetError` with one
human line (never a secret, never a traceback), and ``retryable`` set for
what is worth another try: transport errors, 408, 429 and 5xx.

The whole API::

    client = HttpClient(concurrency=settings.concurrency, retries=settings.retries, backoff=Backoff(base_s=settings.backoff_s))

    # a JSON request/response; raises classify_status(...) for HTTP >= 400
    resp = await client.retrying(lambda: client.request_json("POST", url, json=body, headers=h))
    resp.status, resp.headers, resp.text, resp.json      # json: parsed, or None

    # a streamed response, line by line (CRLF / LF / CR), idle timeout per read
    async with client.stream("POST", url, json=body, headers=h, idle_timeout_s=30) as sresp:
        await sresp.raise_for_status()                   # 4xx/5xx -> classify_status(...)
        async for line in sresp.lines(): ...

    await client.aclose()

- :func:`retrying` (and :meth:`HttpClient.retrying`, which adds the client's
  settings and "this host is down" bookkeeping) retries ``TargetError``\\ s
  with ``retryable=True`` at most ``retries`` times, waiting ``Retry-After``
  (seconds or an HTTP date) when the server gave one, else a jittered,
  capped exponential backoff (:class:`Backoff`). It gives up early when the
  next wait would pass the cell's deadline (:mod:`evalx.common.deadline`).
- Time: every request, stream and retry of a cell is bounded by the cell's
  one :class:`~evalx.common.deadline.Deadline`. A request or idle bound that would
  not end before it sets no timer of its own, and a timeout noticed here when
  the deadline has come reads as the cell's: ``timed out after 2s (no
  response from …)``, never retried.
- :func:`classify_status` turns an error status into the right error:
  401/403 say the key is wrong or missing (never printing it), 404 asks to
  check the URL, 429/5xx are retryable, other 4xx quote the server's message.
- :class:`ConnectFailed` (a ``TargetError``) is raised when no connection
  could be made: ``cannot connect to http://127.0.0.1:9/execute: connection
  refused``. Once a client that never reached its host has given up on a
  cell, the following cells fail at once with the same line instead of
  retrying again (a target that is down is reported once, quickly).

URLs and proxies (:meth:`HttpClient._route`, once per URL): a URL's
``user:password@`` is taken out of the URL and sent as a Basic
``Authorization`` header (so no URL aiohttp sees or quotes carries it; a
request that also sets ``Authorization`` is an error). HTTP_PROXY /
HTTPS_PROXY / NO_PROXY (and their lower-case forms) are honoured as
``trust_env`` would; a proxy that cannot be reached or refuses (a failed
``CONNECT``, a 407) is named in the error, never the target.

Why aiohttp underneath: measured on a 2-core machine against a local
aiohttp server (``bench/http_clients.py``, 2,000 requests, concurrency 50),
a bare ``httpx.AsyncClient`` manages ~265 req/s and degrades as concurrency
grows (encode/httpx#3215), httpx over the ``httpx-aiohttp`` transport
~2,000 req/s, bare aiohttp ~7,700 req/s. evalx as a whole must reach 0.4x
the bare aiohttp loop, so aiohttp is the transport and a core dependency.
"""

from __future__ import annotations

import asyncio
import codecs
import email.utils
import json as _json
import random
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

import aiohttp

from evalx.common import trace_context
from evalx.common.deadline import current as current_deadline
from evalx.common.redaction import shown_url, split_userinfo
from evalx.errors import TargetError, TargetProtocolError, TargetTimeout
from evalx.targets.settings import MAX_RESPONSE_BYTES
from evalx.targets.transport.sse import LineDecoder

__all__ = [
    "Backoff",
    "ConnectFailed",
    "HttpClient",
    "HttpResponse",
    "StreamResponse",
    "classify_status",
    "is_connect_failure",
    "origin_of",
    "parse_retry_after",
    "retry_after_from",
    "retrying",
    "shown_url",
    "snippet",
]

T = TypeVar("T")

USER_AGENT = "evalx"
#: characters of an error body quoted in a message
SNIPPET = 200


class ConnectFailed(TargetError):
    """No TCP/TLS connection could be made (refused, unresolvable, timed out)."""


#: how :func:`transport_error` words a request that never got an answer from the host: no connection
#: (:class:`ConnectFailed`), or one the server dropped or reset before answering
_CONNECTION_LOST = (
    "cannot connect to ",
    "closed the connection without answering",
    "connection reset by peer",
    "can not write request body",  # aiohttp's words when the server reset the connection while the request was sent
    "broken pipe",
)


def is_connect_failure(error: str) -> bool:
    """Whether a cell's stored error says its request never reached an answering server (no connection, or one reset)."""
    lowered = error.lower()
    return any(marker in lowered for marker in _CONNECTION_LOST)


# ------------------------------------------------------------------ backoff


@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry number ``attempt + 1``.

    Without ``Retry-After``: "equal jitter" exponential backoff, a uniform
    draw in ``[d/2, d]`` with ``d = min(max_s, base_s * 2**attempt)``.
    With it: the server's wait (capped at ``max_retry_after_s``) plus up to
    10% jitter, so clients told the same moment do not all return at once.
    """

    base_s: float = 0.5
    max_s: float = 30.0
    max_retry_after_s: float = 120.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None and retry_after >= 0:
            wait = min(retry_after, self.max_retry_after_s)
            return wait + random.uniform(0, min(1.0, wait * 0.1))
        d = min(self.max_s, self.base_s * (2**attempt))
        return random.uniform(d / 2, d)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds (a float is accepted) or an HTTP-date."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        current = datetime.now(timezone.utc).timestamp() if now is None else now
        return max(0.0, when.timestamp() - current)
    return max(0.0, seconds) if seconds == seconds else None  # NaN is not a wait


def retry_after_from(headers: Mapping[str, str] | None) -> float | None:
    """The server's requested wait: ``retry-after-ms`` (OpenAI-style) or ``Retry-After``."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


# ------------------------------------------------------------------ errors


def snippet(body: str | bytes | None) -> str:
    """A short one-line quote of an error body, preferring a JSON error message."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = body.strip()
    try:
        data = _json.loads(text) if text[:1] in "{[" else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            err = err.get("message") or err.get("code") or err
        msg = err if isinstance(err, str) else data.get("message") or data.get("detail")
        if isinstance(msg, str) and msg.strip():
            text = msg
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"


def classify_status(
    status: int,
    body: str | bytes | None = None,
    *,
    url: str,
    headers: Mapping[str, str] | None = None,
    key_hint: str = "api_key",
) -> TargetError:
    """The error for an HTTP error status (call for status >= 400).

    ``key_hint`` names where the key comes from (``api_key``, ``X-Engine-Key``...)
    for 401/403 messages; the key itself and the body of an auth error are
    never quoted (servers sometimes echo the credential back).
    """
    if status in (401, 403):
        url = shown_url(url)
        what = "unauthorized" if status == 401 else "forbidden"
        return TargetError(f"HTTP {status} {what} from {url}: the API key is wrong or missing (check {key_hint})")
    url = shown_url(url)
    quote = snippet(body)
    detail = f": {quote}" if quote else ""
    if status == 429:
        return TargetError(f"HTTP 429 rate limited by {url}{detail}", retryable=True, retry_after=retry_after_from(headers))
    if status == 408 or status >= 500:
        return TargetError(f"HTTP {status} from {url}{detail}", retryable=True, retry_after=retry_after_from(headers))
    if status == 404:
        return TargetError(f"HTTP 404 not found: {url} (check the url){detail}")
    return TargetError(f"HTTP {status} from {url}{detail}")


#: how to bypass or drop a proxy, said when one fails
PROXY_HINT = " (unset HTTP_PROXY/HTTPS_PROXY, or list the host in NO_PROXY)"


def proxy_refused(via: str, url: str, status: int, reason: str = "") -> TargetError:
    """The error for a proxy that answered instead of the target (a refused CONNECT, a 407); 5xx is retryable."""
    what = f"HTTP {status}{' ' + reason if reason else ''}"
    return TargetError(f"{via} refused to reach {shown_url(url)}: {what}{PROXY_HINT}", retryable=status >= 500)


def _connect_reason(exc: BaseException) -> str:
    os_error = getattr(exc, "os_error", None) or exc
    if isinstance(os_error, ConnectionRefusedError):
        return "connection refused"
    if type(exc).__name__ == "ClientConnectorDNSError" or "name resolution" in str(exc).lower() or "nodename" in str(exc):
        return "host name not found"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "TLS certificate not trusted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "TLS handshake failed"
    strerror = getattr(os_error, "strerror", None)
    return str(strerror or os_error or type(exc).__name__).strip().lower() or "connection failed"


def transport_error(
    exc: BaseException, url: str, *, phase: str = "request", timeout_s: float | None = None, via: str | None = None
) -> TargetError:
    """A transport exception as a one-line ``TargetError`` (retryable where a retry may help).

    ``via`` names the proxy the request went through (:meth:`HttpClient._route`):
    a connection that fails while proxying failed to the proxy, and the
    message says so instead of blaming the target.
    """
    if isinstance(exc, TargetError):
        return exc
    url = shown_url(url)
    limit = f" {timeout_s:g}s" if timeout_s else ""
    if isinstance(exc, (aiohttp.ServerTimeoutError, aiohttp.ConnectionTimeoutError, asyncio.TimeoutError)):
        deadline = current_deadline()
        if deadline is not None and deadline.passed():  # the cell's time is up: say so as every layer does, and never retry
            what = f"the stream from {url} went quiet" if phase == "stream" else f"no response from {url}"
            return TargetTimeout(deadline.message(what), retryable=False)
    if via is not None:
        if isinstance(exc, (aiohttp.ClientProxyConnectionError, aiohttp.ConnectionTimeoutError)):
            reason = "timed out" if isinstance(exc, aiohttp.ConnectionTimeoutError) else _connect_reason(exc)
            return ConnectFailed(f"cannot connect to {via} to reach {url}: {reason}{PROXY_HINT}", retryable=True)
        if isinstance(exc, aiohttp.ClientHttpProxyError):
            return proxy_refused(via, url, exc.status, exc.message)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ConnectFailed(f"cannot connect to {url}: timed out", retryable=True)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectFailed(f"cannot connect to {url}: {_connect_reason(exc)}", retryable=True)
    if isinstance(exc, (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        if phase == "stream":
            return TargetTimeout(f"stream from {url} idle for more than{limit}")
        return TargetTimeout(f"no response from {url} within{limit}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        if phase == "stream":
            return TargetError(f"{url} closed the connection in the middle of the stream", retryable=True)
        return TargetError(f"{url} closed the connection without answering", retryable=True)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return TargetError(f"the response from {url} broke off before its end", retryable=True)
    if isinstance(exc, aiohttp.InvalidURL):
        return TargetError(f"invalid url: {url}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return TargetProtocolError(f"{url} sent an invalid HTTP response: {exc.message}")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return TargetError(f"HTTP {phase} to {url} failed: {first}", retryable=True)
    raise exc


# ------------------------------------------------------------------ retries


def _give_up(exc: TargetError, note: str) -> None:
    """``exc`` as the last word of :func:`retrying`: ``note`` (how many retries were made) added, no longer retryable."""
    exc.args = (f"{exc.args[0] if exc.args else exc} ({note})",)
    exc.retryable = False


async def retrying(
    call: Callable[..., Awaitable[T]],
    *args: Any,
    retries: int,
    backoff: Backoff | None = None,
    deadline: float | None = None,
    on_retry: Callable[[int, TargetError, float], None] | None = None,
    on_give_up: Callable[[TargetError], None] | None = None,
) -> T:
    """``await call(*args)``, retrying retryable failures at most ``retries`` times.

    Retried: ``TargetError(retryable=True)`` (transport errors, 408, 429, 5xx
    from this module; anything a target marks so), and raw aiohttp/OS
    errors. ``deadline`` (``time.monotonic()`` seconds; by default the
    cell's, :mod:`evalx.common.deadline`) stops retrying when the next wait would
    pass it. The error that ends the loop is raised with a note of how many
    retries were made, after ``on_give_up`` (if given) has seen it.
    """
    backoff = backoff or Backoff()
    cell = current_deadline() if deadline is None else None  # read as it goes: a rate-limit wait moves it on
    attempt = 0
    while True:
        try:
            return await call(*args)
        except (aiohttp.ClientError, OSError) as raw:
            exc: TargetError = transport_error(raw, "the server")
        except TargetError as err:
            exc = err
        if exc.retryable:
            if attempt >= retries:
                _give_up(exc, f"after {retries} {'retry' if retries == 1 else 'retries'}" if retries else "no retries")
            else:
                wait = backoff.delay(attempt, exc.retry_after)
                limit = deadline if cell is None else cell.when
                if limit is None or time.monotonic() + wait < limit:
                    if on_retry is not None:
                        on_retry(attempt + 1, exc, wait)
                    await asyncio.sleep(wait)
                    attempt += 1
                    continue
                _give_up(exc, f"after {attempt} {'retry' if attempt == 1 else 'retries'}; the next would pass the timeout")
        if on_give_up is not None:
            on_give_up(exc)
        raise exc


# ------------------------------------------------------------------ responses


#: request bodies: ``json.dumps(body, ensure_ascii=False, default=str)``, one encoder for all
_BODY_ENCODER = _json.JSONEncoder(ensure_ascii=False, default=str)


@dataclass
class HttpResponse:
    """A whole response: status, headers (case-insensitive), text and parsed JSON (None if not JSON)."""

    status: int
    headers: Mapping[str, str]
    text: str
    json: Any = None
    url: str = ""

    @property
    def ok(self) -> bool:
        return self.status < 400

    def json_body(self) -> Any:
        """The parsed JSON, or a TargetProtocolError saying the body is not JSON."""
        if self.json is None:
            raise TargetProtocolError(f"{shown_url(self.url)} answered with a body that is not JSON: {snippet(self.text) or '(empty)'}")
        return self.json


@dataclass
class StreamResponse:
    """A response being streamed: status and headers now, the body as lines or chunks."""

    status: int
    headers: Mapping[str, str]
    url: str
    idle_timeout_s: float | None
    _resp: aiohttp.ClientResponse = field(repr=False)
    #: the most body bytes (decoded) read before the stream is cut with a TargetError
    max_bytes: int = MAX_RESPONSE_BYTES

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    async def raise_for_status(self, *, key_hint: str = "api_key") -> None:
        """Raise :func:`classify_status`'s error for HTTP >= 400 (quoting a bit of the body)."""
        if self.status < 400:
            return
        body = b""
        if self.status not in (401, 403):
            try:
                body = await asyncio.wait_for(self._resp.content.read(4096), self.idle_timeout_s or 10.0)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                body = b""
        raise classify_status(self.status, body, url=self.url, headers=self.headers, key_hint=key_hint)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Raw (decoded) body chunks as they arrive.

        An idle read past ``idle_timeout_s`` raises TargetTimeout; more than
        ``max_bytes`` in all raises :func:`too_large`'s error.
        """
        content = self._resp.content
        left = self.max_bytes
        while True:
            try:
                chunk = await content.readany()
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                raise transport_error(exc, self.url, phase="stream", timeout_s=self.idle_timeout_s) from None
            if not chunk:
                return
            left -= len(chunk)
            if left < 0:
                self._resp.close()
                raise too_large(self.url, self.max_bytes, "stream")
            yield chunk

    async def lines(self) -> AsyncIterator[str]:
        """Decoded (UTF-8, invalid bytes replaced) lines split on CRLF, LF or CR, without line ends.

        A last line without a line end is yielded too.
        """
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        splitter = LineDecoder()
        async for chunk in self.chunks():
            for line in splitter.decode(decoder.decode(chunk)):
                yield line
        for line in splitter.decode(decoder.decode(b"", final=True)) + splitter.flush():
            yield line

    async def read(self) -> bytes:
        chunks = [c async for c in self.chunks()]
        return b"".join(chunks)


def too_large(url: str, limit: int, what: str = "response") -> TargetError:
    """The error for a body or stream past ``max_response_bytes`` (not retryable: the next answer would be as big)."""
    return TargetError(f"the {what} from {shown_url(url)} is larger than max_response_bytes ({limit:,} bytes); reading stopped")


def _read_body(resp: aiohttp.ClientResponse, limit: int, url: str) -> Awaitable[bytes]:
    """The whole body, at most ``limit`` bytes after decompression, read chunk by chunk as it arrives: to await.

    A body of a known length under the limit that is not compressed is read
    at once (aiohttp's ``read()``, no coroutine of ours); anything else (chunked,
    endless, gzip/deflate/br that expands) is counted as aiohttp decodes it, a
    bounded piece at a time, and cut (connection closed) as soon as it passes the limit.
    """
    length = resp.content_length
    if length is not None and "Content-Encoding" not in resp.headers:
        if length > limit:
            resp.close()
            raise too_large(url, limit)
        return resp.read()
    return _read_chunks(resp, limit, url)


async def _read_chunks(resp: aiohttp.ClientResponse, limit: int, url: str) -> bytes:
    """:func:`_read_body` of a body whose length is not known beforehand (or that is compressed)."""
    body = bytearray()
    content = resp.content
    while chunk := await content.readany():
        body += chunk
        if len(body) > limit:
            resp.close()
            raise too_large(url, limit)
    return bytes(body)


# ------------------------------------------------------------------ the client


@dataclass(frozen=True)
class _Route:
    """How one URL is sent: found once per URL (:meth:`HttpClient._route`)."""

    #: the URL sent: without its userinfo (that goes as ``auth``)
    url: str
    #: ``Basic ...`` from the URL's ``user:password@``, as aiohttp would send it
    auth: str | None = None
    #: the proxy (HTTP_PROXY / HTTPS_PROXY, unless NO_PROXY lists the host), without its userinfo
    proxy: str | None = None
    #: ``Proxy-Authorization`` from the proxy URL's ``user:password@``, for an https ``CONNECT``
    proxy_headers: dict[str, str] | None = None
    #: headers every request to this URL adds: ``Authorization`` (from ``auth``), and
    #: ``Proxy-Authorization`` when plain http goes through a proxy (aiohttp sends it only for ``CONNECT``)
    extra: dict[str, str] | None = None
    #: the proxy as messages name it: ``the proxy http://127.0.0.1:3128 (HTTP_PROXY)``
    via: str | None = None


#: same-origin redirects followed per request (see :meth:`HttpClient._settled`)
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: the answers :meth:`HttpClient._settled` looks at further: a redirect, or a proxy's 407
_UNSETTLED = _REDIRECTS | {407}


def _proxy_checked(resp: aiohttp.ClientResponse, route: _Route, url: str) -> aiohttp.ClientResponse:
    """``resp``, unless it is a proxy's 407 (only a proxy answers 407): then the proxy's refusal is raised."""
    if resp.status == 407 and route.via is not None:
        resp.release()
        raise proxy_refused(route.via, url, 407, "proxy authentication required")
    return resp


def _deadline_first(seconds: float) -> bool:
    """True when the cell's deadline comes no later than ``seconds`` from now (a bound that long needs no timer)."""
    deadline = current_deadline()
    return deadline is not None and deadline.when <= time.monotonic() + seconds


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url``, with the scheme's default port made explicit."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


class HttpClient:
    """One pooled HTTP client per target.

    ``concurrency`` caps open connections: give the target's resolved
    concurrency (the executor's workers for it), so requests never queue here.
    ``connect_timeout_s`` bounds each connection attempt; ``timeout_s`` (if
    given) bounds a whole :meth:`request_json` — unless the caller's own
    deadline (:data:`CALL_DEADLINE`) comes first, as it then always ends the
    request before that bound could. ``max_response_bytes`` bounds every
    response body and stream, counted after decompression (:func:`too_large`).
    Create it inside the event loop (a
    target's ``start()``); close it with :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        concurrency: int = 8,
        retries: int = 3,
        backoff: Backoff | None = None,
        connect_timeout_s: float = 10.0,
        timeout_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.concurrency = max(1, int(concurrency))
        self.max_response_bytes = max(1, int(max_response_bytes))
        self.retries = max(0, int(retries))
        self.backoff = backoff or Backoff()
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self._session: aiohttp.ClientSession | None = None
        self._reached = False  # some request got an HTTP response
        self._down: str | None = None  # the give-up line once the host was found unreachable
        self._proxies = {k: v for k, v in urllib.request.getproxies().items() if k in ("http", "https") and v}
        self._routes: dict[str, _Route] = {}
        #: per-request timeouts by total (None: the connection attempt's bound only), made once each
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}

    def _timeout(self, total: float | None) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(total)
        if timeout is None:
            timeout = self._timeouts[total] = aiohttp.ClientTimeout(total=total, sock_connect=self.connect_timeout_s)
        return timeout

    def _route(self, url: str) -> _Route:
        """How ``url`` is sent, worked out once per URL: its userinfo as Basic auth, its proxy.

        Proxies come from HTTP_PROXY / HTTPS_PROXY (or their lower-case forms)
        unless NO_PROXY lists the host, as aiohttp's ``trust_env`` and httpx
        do; a proxy URL's own ``user:password@`` becomes ``Proxy-Authorization``.
        """
        route = self._routes.get(url)
        if route is not None:
            return route
        sent, auth = split_userinfo(url)
        proxy = via = proxy_headers = None
        if self._proxies:
            parts = urllib.parse.urlsplit(sent)
            proxy = self._proxies.get(parts.scheme)
            if proxy and parts.hostname and urllib.request.proxy_bypass(parts.hostname):
                proxy = None
            if proxy:
                proxy, proxy_auth = split_userinfo(proxy if "://" in proxy else "http://" + proxy)
                proxy_headers = {"Proxy-Authorization": proxy_auth} if proxy_auth else None
                via = f"the proxy {shown_url(proxy)} ({parts.scheme.upper()}_PROXY)"
        extra = {"Authorization": auth} if auth else {}
        if proxy_headers and not sent.lower().startswith("https:"):
            extra.update(proxy_headers)
        route = self._routes[url] = _Route(sent, auth, proxy, proxy_headers, extra or None, via)
        return route

    def _authorized(self, route: _Route, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` with the route's ``extra`` (a request's own Authorization next to a URL's userinfo: an error)."""
        if route.auth is not None and any(k.lower() == "authorization" for k in (*headers, *self._headers)):
            raise TargetError(
                f"{shown_url(route.url)}: the URL carries a user:password@ (sent as HTTP Basic auth) and the request "
                "sets an Authorization header too (an api_key, or headers:); keep one of them"
            )
        if route.extra:
            headers.update(route.extra)
        return headers

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
                # aiohttp's trust_env re-reads the environment on every request (it halves
                # throughput); proxies are resolved once per URL in _route() instead
                trust_env=False,
                raise_for_status=False,
            )
        return self._session

    async def _settled(
        self,
        resp: aiohttp.ClientResponse,
        route: _Route,
        method: str,
        url: str,
        data: bytes | None,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        follow_redirects: bool = True,
    ) -> aiohttp.ClientResponse:
        """The answer to a request sent on ``route`` (``url``'s, :meth:`_route`) that was a proxy's 407 or a redirect
        (:data:`_UNSETTLED`; any other answer is final as it is, awaited straight from :meth:`_request_once`):
        the proxy's refusal raised, or the redirect followed to the same origin only (at most :data:`MAX_REDIRECTS`).

        aiohttp would follow a redirect to any host with every header (the
        target's keys) and, for 307/308, the body; a redirect to another
        origin (scheme, host and port) is the cell's error instead, naming
        where it pointed. 301/302/303 turn a POST into a body-less GET, as
        browsers do; 307/308 resend the same method and body. Without
        ``follow_redirects`` a redirect is the answer, for a caller that
        follows it itself (without its credentials: a CI artifact's download).
        """
        resp = _proxy_checked(resp, route, url)
        if follow_redirects and resp.status in _REDIRECTS:
            resp = await self._follow(resp, method, route.url, data, headers, timeout)
        return resp

    def _request_once(
        self, route: _Route, method: str, data: bytes | None, headers: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> Awaitable[aiohttp.ClientResponse]:
        """One request on ``route``, never following a redirect: aiohttp's awaitable (no coroutine of ours per request).

        In a traced cell (docs/tracing.md) the request carries the cell's W3C ``traceparent``.
        """
        cell_span = trace_context.CURRENT.get()
        if cell_span is not None:
            headers = {**headers, "traceparent": cell_span.traceparent()}
        return self._get_session().request(
            method,
            route.url,
            data=data,
            headers=headers,
            timeout=timeout,
            proxy=route.proxy,
            proxy_headers=route.proxy_headers,
            allow_redirects=False,
        )

    async def _follow(
        self,
        resp: aiohttp.ClientResponse,
        method: str,
        url: str,
        data: bytes | None,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Follow the redirect ``resp`` (the answer to ``method url``) and any after it, as :meth:`_settled` describes."""
        for followed in range(MAX_REDIRECTS + 1):
            location = resp.headers.get("Location")
            resp.release()
            if not location:
                raise TargetError(f"HTTP {resp.status} redirect without a Location from {shown_url(url)}")
            target = urllib.parse.urljoin(url, location)
            if origin_of(target) != origin_of(url):
                raise TargetError(
                    f"HTTP {resp.status} from {shown_url(url)} redirects to another origin ({origin_of(target)}); "
                    "not followed: credentials are never sent to another origin (set the target's URL to the new one)"
                )
            if resp.status in (301, 302, 303) and method != "HEAD":
                method, data = "GET", None
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            url = target
            if followed == MAX_REDIRECTS:
                break
            route = self._route(url)
            resp = _proxy_checked(await self._request_once(route, method, data, headers, timeout), route, url)
            if resp.status not in _REDIRECTS:
                return resp
        raise TargetError(f"more than {MAX_REDIRECTS} redirects from {shown_url(url)}")

    @staticmethod
    def encode(json: Any, headers: Mapping[str, str] | None, encoded: bytes | None = None) -> tuple[bytes | None, dict[str, str]]:
        """The body bytes and headers a request with ``json`` sends (a signer signs exactly these)."""
        return HttpClient._encode(json, headers, encoded)

    @staticmethod
    def _encode(json: Any, headers: Mapping[str, str] | None, encoded: bytes | None = None) -> tuple[bytes | None, dict[str, str]]:
        out = dict(headers or {})
        if json is None and encoded is None:
            return None, out
        for k in out:
            if k.lower() == "content-type":
                break
        else:
            out["Content-Type"] = "application/json"
        return encoded if encoded is not None else _BODY_ENCODER.encode(json).encode("utf-8"), out

    async def request_json(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        encoded: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        raise_for_status: bool = True,
        key_hint: str = "api_key",
    ) -> HttpResponse:
        """Send a request (``json`` as the body) and read the whole answer.

        ``encoded``, when given, is ``json`` already encoded as this client would
        (``json.dumps(json, ensure_ascii=False)`` in UTF-8), sent as it is.
        With ``raise_for_status`` (the default) HTTP >= 400 raises
        :func:`classify_status`'s error, so :func:`retrying` sees 429/5xx.
        """
        data, hdrs = self._encode(json, headers, encoded)
        route = self._routes.get(url) or self._route(url)
        if route.extra is not None:
            hdrs = self._authorized(route, hdrs)
        limit = timeout_s if timeout_s is not None else self.timeout_s
        if limit is not None and not _deadline_first(limit):
            timeout = self._timeout(limit)
        else:
            timeout = self._timeout(None)  # no bound, or the cell's deadline ends this request first
        try:
            resp = await self._request_once(route, method, data, hdrs, timeout)
            if resp.status in _UNSETTLED:
                resp = await self._settled(resp, route, method, url, data, hdrs, timeout)
            try:
                self._reached = True
                raw = await _read_body(resp, self.max_response_bytes, url)
                status, resp_headers, charset = resp.status, resp.headers, resp.charset or "utf-8"
            finally:
                resp.release()

        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise transport_error(exc, url, timeout_s=limit, via=route.via) from None
        try:
            text = raw.decode(charset, "replace")
        except LookupError:  # a charset Python does not know
            text = raw.decode("utf-8", "replace")
        parsed = None
        if text.strip():
            try:
                parsed = _json.loads(text)
            except ValueError:
                parsed = None
        if raise_for_status and status >= 400:
            raise classify_status(status, text, url=url, headers=resp_headers, key_hint=key_hint)
        return HttpResponse(status, resp_headers, text, parsed, url)

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        encoded: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idle_timeout_s: float | None = None,
        follow_redirects: bool = True,
    ) -> AsyncIterator[StreamResponse]:
        """Send a request and stream the answer; the status is NOT checked (call ``raise_for_status``).

        ``idle_timeout_s`` bounds the wait for the response headers and each
        read of the body (a stream that goes quiet raises TargetTimeout).
        ``follow_redirects=False`` answers a redirect as it is (see :meth:`_settled`).
        """
        data, hdrs = self._encode(json, headers, encoded)
        route = self._route(url)
        hdrs = self._authorized(route, hdrs)
        if idle_timeout_s is not None and _deadline_first(idle_timeout_s):
            idle_timeout_s = None  # the cell's deadline ends the stream first: one timer, one wording
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s, sock_read=idle_timeout_s)
        try:
            resp = await self._request_once(route, method, data, hdrs, timeout)
            if resp.status in _UNSETTLED:
                resp = await self._settled(resp, route, method, url, data, hdrs, timeout, follow_redirects)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise transport_error(exc, url, timeout_s=idle_timeout_s, via=route.via) from None
        self._reached = True
        try:
            yield StreamResponse(resp.status, resp.headers, url, idle_timeout_s, resp, self.max_response_bytes)
        finally:
            if resp.content.at_eof():
                resp.release()
            else:  # cut short: the connection is in an unknown state, do not reuse it
                resp.close()

    def retrying(
        self, call: Callable[..., Awaitable[T]], *args: Any, deadline: float | None = None, retries: int | None = None
    ) -> Coroutine[Any, Any, T]:
        """:func:`retrying` (``await call(*args)``) with this client's retries and backoff: its coroutine, to await.

        A client that has never had an answer from its host and gave up on a
        connection failure remembers it: later calls fail at once (here, before
        anything is awaited) with the same line, so a target that is down costs
        one round of retries, not one per cell.
        """
        if self._down is not None and not self._reached:
            raise ConnectFailed(self._down)
        retries = self.retries if retries is None else retries
        return retrying(call, *args, retries=retries, backoff=self.backoff, deadline=deadline, on_give_up=self._gave_up)

    def _gave_up(self, exc: TargetError) -> None:
        if isinstance(exc, ConnectFailed) and not self._reached:
            self._down = str(exc)

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
