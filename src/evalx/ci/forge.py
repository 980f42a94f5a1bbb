"""The HTTP client for GitHub's and GitLab's APIs, on evalx's one HTTP layer, keeping the token secret.

The token goes in a header of each request to the API's own origin, never
in the client's defaults: a redirect to another origin is followed (a
download: an artifact's zip lives on a storage host, behind a signed URL)
without it, and for any other request it is an error, as for every target
(:meth:`evalx.targets.transport.http.HttpClient._settled`). Every message that
leaves this module (errors, notes) goes through a
:class:`~evalx.common.redaction.Redactor` that knows the token, so a server
that echoes it cannot put it in a log.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from evalx.common.json_types import JSON
from evalx.common.redaction import Redactor, shown_url
from evalx.errors import EvalxError, ForgeError, TargetError
from evalx.targets.transport.http import HttpClient, origin_of, snippet

__all__ = ["MAX_DOWNLOAD_BYTES", "ForgeClient", "same_origin"]

#: the largest artifact zip downloaded
MAX_DOWNLOAD_BYTES = 2 * 1024**3
#: the largest API answer read (a page of comments)
MAX_ANSWER_BYTES = 32 * 1024**2
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def same_origin(a: str, b: str) -> bool:
    """Whether URLs ``a`` and ``b`` have the same scheme, host and port."""
    return origin_of(a) == origin_of(b)


class ForgeClient:
    """Requests to one forge's API (``api_url``), authenticated by ``auth`` headers sent to that origin only.

    Use it as ``async with ForgeClient(...) as api:``; ``name`` ("GitHub",
    "GitLab") words the errors.
    """

    def __init__(self, name: str, api_url: str, auth: Mapping[str, str], *, retries: int = 2) -> None:
        self.name = name
        self.api_url = api_url.rstrip("/")
        self.auth = dict(auth)
        self.redactor = Redactor()
        for value in self.auth.values():
            self.redactor.add(value)
            self.redactor.add(value.partition(" ")[2])  # "Bearer TOKEN": TOKEN alone too
        self.client = HttpClient(concurrency=2, retries=retries, timeout_s=60.0, max_response_bytes=MAX_ANSWER_BYTES)

    async def __aenter__(self) -> ForgeClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.client.aclose()

    def url(self, path: str, **query: str | int) -> str:
        """``{api_url}{path}?query`` (values quoted)."""
        return self.api_url + path + (("?" + urllib.parse.urlencode(query)) if query else "")

    def safe(self, text: str) -> str:
        """``text`` with the token masked."""
        return self.redactor.text(text)

    def _headers(self, url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        if same_origin(url, self.api_url):
            headers.update(self.auth)
        return headers

    async def call(self, method: str, url: str, body: JSON = None, *, ok: tuple[int, ...] = (200,)) -> tuple[int, JSON]:
        """One API request (JSON in, JSON out); a status outside ``ok`` raises :class:`ForgeError`. GETs and PUT/PATCH are retried."""
        headers = self._headers(url, {"Accept": "application/json"})

        async def once() -> tuple[int, JSON]:
            resp = await self.client.request_json(method, url, json=body, headers=headers, raise_for_status=False)
            if resp.status in (429, 500, 502, 503, 504) and method != "POST":
                raise TargetError(f"HTTP {resp.status}", retryable=True)
            return resp.status, resp.json if resp.status not in ok else resp.json_body()

        try:
            status, answer = await (once() if method == "POST" else self.client.retrying(once))
        except EvalxError as exc:
            raise ForgeError(self.safe(f"{self.name} API: {method} {shown_url(url)}: {exc}")) from None
        if status not in ok:
            raise self.refused(method, url, status, answer)
        return status, answer

    def refused(self, method: str, url: str, status: int, answer: JSON) -> ForgeError:
        """The error for an answer with ``status`` (the server's message quoted, the token masked)."""
        message = answer.get("message") if isinstance(answer, dict) else None
        said = f": {snippet(str(message))}" if message else ""
        if status == 401:
            why = "the token was refused (401): is it set, and not expired?"
        elif status == 403:
            why = f"forbidden (403): the token may not do this{said}"
        elif status == 404:
            why = f"not found (404){said}"
        else:
            why = f"HTTP {status}{said}"
        return ForgeError(self.safe(f"{self.name} API: {method} {shown_url(url)}: {why}"), status)

    async def download(self, url: str, dest: Path, *, limit: int = MAX_DOWNLOAD_BYTES) -> bool:
        """GET ``url`` into the file ``dest``; False on 404 or 410 (gone: an expired artifact).

        A redirect to another origin is followed without the token (at most
        five hops); the body is written as it arrives, at most ``limit`` bytes.
        """
        for _ in range(6):
            headers = self._headers(url)
            try:
                async with self.client.stream("GET", url, headers=headers, idle_timeout_s=120.0, follow_redirects=False) as resp:
                    if resp.status in _REDIRECTS:
                        location = resp.headers.get("Location")
                        if not location:
                            raise ForgeError(f"{self.name} API: GET {shown_url(url)}: HTTP {resp.status} without a Location")
                        url = urllib.parse.urljoin(url, location)
                        continue
                    if resp.status in (404, 410):
                        return False
                    if resp.status >= 400:
                        raise self.refused("GET", url, resp.status, None)
                    resp.max_bytes = limit + 1  # the check below words it
                    written = 0
                    with dest.open("wb") as f:
                        async for chunk in resp.chunks():
                            written += len(chunk)
                            if written > limit:
                                raise ForgeError(f"{self.name}: {shown_url(url)} is larger than {limit:,} bytes; not downloaded")
                            f.write(chunk)
                    return True
            except ForgeError as exc:
                raise ForgeError(self.safe(str(exc)), exc.status) from None
            except EvalxError as exc:
                raise ForgeError(self.safe(f"{self.name}: GET {shown_url(url)}: {exc}")) from None
        raise ForgeError(f"{self.name}: GET {shown_url(url)}: more than five redirects")
