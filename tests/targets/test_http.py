"""The shared HTTP layer: statuses, retries and backoff, streaming lines, timeouts, connection errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web

from evalx.errors import TargetError, TargetTimeout
from evalx.targets.transport.http import (
    Backoff,
    ConnectFailed,
    HttpClient,
    classify_status,
    parse_retry_after,
    retrying,
    shown_url,
)

FAST = Backoff(base_s=0.001, max_s=0.01)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on exit: nothing listens there


@asynccontextmanager
async def serve(routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


# ---------------------------------------------------------------- pure helpers


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after("") is None and parse_retry_after(None) is None
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now=now.timestamp()) == pytest.approx(30.0)
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now.timestamp()) == 0.0


def test_backoff_is_jittered_exponential_and_capped() -> None:
    b = Backoff(base_s=1.0, max_s=5.0, max_retry_after_s=60)
    for attempt, top in ((0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (10, 5.0)):
        delays = [b.delay(attempt) for _ in range(200)]
        assert all(top / 2 <= d <= top for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert 7.0 <= b.delay(0, retry_after=7.0) <= 7.7  # Retry-After honoured, plus at most 10%
    assert 60.0 <= b.delay(0, retry_after=600.0) <= 61.0  # capped


def test_classify_status() -> None:
    url = "http://user:pw@h:8/execute?key=sekrit"
    e401 = classify_status(401, '{"error": "bad key sekrit"}', url=url, key_hint="api_key, sent as X-Engine-Key")
    assert (
        str(e401) == "HTTP 401 unauthorized from http://h:8/execute: the API key is wrong or missing (check api_key, sent as X-Engine-Key)"
    )
    assert "sekrit" not in str(e401) and "pw" not in str(e401) and not e401.retryable
    assert "forbidden" in str(classify_status(403, "", url=url)) and "wrong or missing" in str(classify_status(403, "", url=url))
    e404 = classify_status(404, "Not Found", url="http://h/execute")
    assert str(e404) == "HTTP 404 not found: http://h/execute (check the url): Not Found" and not e404.retryable
    e422 = classify_status(422, '{"detail": "message is required"}', url="http://h/x")
    assert str(e422) == "HTTP 422 from http://h/x: message is required" and not e422.retryable
    e429 = classify_status(429, "", url="http://h/x", headers={"retry-after": "2"})
    assert e429.retryable and e429.retry_after == 2.0 and str(e429) == "HTTP 429 rate limited by http://h/x"
    assert classify_status(429, "", url="u", headers={"retry-after-ms": "250"}).retry_after == 0.25
    e503 = classify_status(503, '{"error": {"message": "overloaded\\n try later"}}', url="http://h/x")
    assert e503.retryable and str(e503) == "HTTP 503 from http://h/x: overloaded try later"
    assert len(str(classify_status(500, "x" * 5000, url="u"))) < 250


def test_shown_url() -> None:
    assert shown_url("https://a:b@example.com:8443/v1/x?key=1#f") == "https://example.com:8443/v1/x"
    assert shown_url("http://127.0.0.1:9/execute") == "http://127.0.0.1:9/execute"


# ---------------------------------------------------------------- retrying


def test_retrying_retries_retryable_then_gives_up() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TargetError("HTTP 500 from u", retryable=True)
        return "ok"

    assert run(retrying(flaky, retries=3, backoff=FAST)) == "ok" and len(calls) == 3

    async def always() -> str:
        calls.append(1)
        raise TargetError("HTTP 500 from u", retryable=True)

    calls.clear()
    with pytest.raises(TargetError) as info:
        run(retrying(always, retries=2, backoff=FAST))
    assert len(calls) == 3 and str(info.value) == "HTTP 500 from u (after 2 retries)" and not info.value.retryable


def test_retrying_does_not_retry_fatal_errors() -> None:
    calls: list[int] = []

    async def fatal() -> None:
        calls.append(1)
        raise TargetError("HTTP 401 ...")

    with pytest.raises(TargetError, match=r"^HTTP 401 \.\.\.$"):
        run(retrying(fatal, retries=5, backoff=FAST))
    assert len(calls) == 1


def test_retrying_honours_retry_after_and_deadline() -> None:
    waits: list[float] = []

    async def limited() -> None:
        raise TargetError("HTTP 429 rate limited by u", retryable=True, retry_after=0.02)

    with pytest.raises(TargetError):
        run(retrying(limited, retries=2, backoff=Backoff(base_s=100), on_retry=lambda n, e, w: waits.append(w)))
    assert len(waits) == 2 and all(0.02 <= w <= 0.03 for w in waits)  # the server's wait, not the 100 s backoff

    async def later() -> None:
        raise TargetError("HTTP 429 rate limited by u", retryable=True, retry_after=50)

    async def with_deadline() -> None:
        import time

        await retrying(later, retries=3, deadline=time.monotonic() + 1)

    with pytest.raises(TargetError, match=r"\(after 0 retries; the next would pass the timeout\)$"):
        run(with_deadline())


# ---------------------------------------------------------------- the client


def test_request_json_and_retry_on_500() -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "ua": request.headers.get("User-Agent"), "h": request.headers.get("X-T")})
        if len(seen) == 1:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        return web.json_response({"ok": True, "échos": seen[-1]["body"]})

    async def main() -> None:
        async with serve({"/v1": handler}) as url:
            client = HttpClient(concurrency=2, retries=2, backoff=FAST)
            try:
                resp = await client.retrying(lambda: client.request_json("POST", url + "/v1", json={"a": "é"}, headers={"X-T": "1"}))
            finally:
                await client.aclose()
        assert resp.status == 200 and resp.ok and resp.json == {"ok": True, "échos": {"a": "é"}}
        assert resp.headers["content-type"].startswith("application/json")  # case-insensitive headers
        assert len(seen) == 2 and seen[0]["ua"] == "evalx" and seen[0]["h"] == "1"

    run(main())


def test_request_json_error_statuses_and_non_json() -> None:
    async def handler(request: web.Request) -> web.Response:
        code = int(request.query.get("code", "200"))
        return web.Response(text="plain words", status=code)

    async def main() -> None:
        async with serve({"/x": handler}) as url:
            client = HttpClient(retries=0)
            try:
                with pytest.raises(TargetError, match="wrong or missing") as info:
                    await client.request_json("GET", url + "/x?code=401")
                assert "plain words" not in str(info.value)
                with pytest.raises(TargetError, match=r"^HTTP 400 from http://127\.0\.0\.1:\d+/x: plain words$"):
                    await client.request_json("GET", url + "/x?code=400")
                resp = await client.request_json("GET", url + "/x?code=418", raise_for_status=False)
                assert resp.status == 418 and resp.json is None and resp.text == "plain words"
                ok = await client.request_json("GET", url + "/x")
                with pytest.raises(TargetError, match="not JSON: plain words"):
                    ok.json_body()
            finally:
                await client.aclose()

    run(main())


def test_connection_refused_is_one_clean_line_and_fails_fast_after() -> None:
    url = f"http://127.0.0.1:{closed_port()}/execute"

    async def main() -> None:
        client = HttpClient(retries=2, backoff=FAST)
        attempts: list[int] = []

        async def call() -> Any:
            attempts.append(1)
            return await client.request_json("POST", url, json={})

        try:
            with pytest.raises(ConnectFailed) as first:
                await client.retrying(call)
            assert str(first.value) == f"cannot connect to {url}: connection refused (after 2 retries)"
            assert len(attempts) == 3
            with pytest.raises(ConnectFailed) as second:
                await client.retrying(call)
            assert str(second.value) == str(first.value) and len(attempts) == 3  # no new attempt
        finally:
            await client.aclose()

    run(main())


def test_connection_limit_is_the_concurrency() -> None:
    state = {"now": 0, "max": 0}

    async def handler(request: web.Request) -> web.Response:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return web.json_response({})

    async def main() -> None:
        async with serve({"/": handler}) as url:
            client = HttpClient(concurrency=3)
            try:
                await asyncio.gather(*(client.request_json("GET", url + "/") for _ in range(12)))
            finally:
                await client.aclose()

    run(main())
    assert state["max"] == 3


def test_stream_lines_and_status() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        for chunk in (b"one\r", b"\ntwo\rthr", "ee é\n".encode()[:-2], "ee é\n".encode()[-2:], b"last"):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def main() -> list[str]:
        async with serve({"/s": handler}) as url:
            client = HttpClient()
            try:
                async with client.stream("POST", url + "/s", json={}) as resp:
                    await resp.raise_for_status()
                    assert resp.status == 200 and resp.content_type == "text/event-stream"
                    return [line async for line in resp.lines()]
            finally:
                await client.aclose()

    assert run(main()) == ["one", "two", "three é", "last"]


def test_stream_error_status_and_idle_timeout() -> None:
    async def denied(request: web.Request) -> web.Response:
        return web.Response(status=403, text="key abc rejected")

    async def quiet(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"hello\n")
        await asyncio.sleep(5)
        return resp

    async def main() -> None:
        async with serve({"/denied": denied, "/quiet": quiet}) as url:
            client = HttpClient()
            try:
                async with client.stream("POST", url + "/denied") as resp:
                    with pytest.raises(TargetError, match="HTTP 403 forbidden") as info:
                        await resp.raise_for_status()
                    assert "abc" not in str(info.value)
                async with client.stream("POST", url + "/quiet", idle_timeout_s=1) as resp:
                    lines = resp.lines()
                    assert await lines.__anext__() == "hello"
                    with pytest.raises(TargetTimeout, match=r"^stream from http://127\.0\.0\.1:\d+/quiet idle for more than 1s$"):
                        await lines.__anext__()
            finally:
                await client.aclose()

    run(main())


def test_request_json_follows_same_origin_redirects_and_bounds_the_body() -> None:
    """Plain, gzip and chunked bodies behind 0-6 redirects, at, under and over max_response_bytes: the body, or one named error."""
    import gzip
    import json
    import random

    rng = random.Random(12)
    bodies = {str(i): json.dumps({"n": i, "s": "é" * rng.randint(0, 300)}).encode() for i in range(40)}

    async def handler(request: web.Request) -> web.StreamResponse:
        key, mode = request.match_info["key"], request.query.get("mode", "plain")
        hops = int(request.query.get("hops", "0"))
        if hops:
            return web.Response(status=rng.choice([301, 302, 303, 307, 308]), headers={"Location": f"/b/{key}?mode={mode}&hops={hops - 1}"})
        body = bodies[key]
        if mode == "gzip":
            return web.Response(body=gzip.compress(body), headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        if mode == "chunked":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(0, len(body), 97):
                await resp.write(body[i : i + 97])
            await resp.write_eof()
            return resp
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/b/{key}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            for _ in range(120):
                key, mode, hops = str(rng.randrange(40)), rng.choice(["plain", "gzip", "chunked"]), rng.choice([0, 0, 0, 1, 2, 6])
                limit = rng.choice([len(bodies[key]) - 1, len(bodies[key]), 10**6])
                client = HttpClient(retries=0, max_response_bytes=limit)
                try:
                    resp = await client.request_json("POST", f"http://127.0.0.1:{port}/b/{key}?mode={mode}&hops={hops}", json={"k": key})
                    got: Any = ("ok", resp.status, resp.text)
                except TargetError as exc:
                    got = ("error", str(exc))
                finally:
                    await client.aclose()
                if hops <= 5 and limit >= len(bodies[key]):
                    assert got == ("ok", 200, bodies[key].decode()), (key, mode, hops, limit)
                elif hops > 5:
                    assert got[0] == "error" and "redirect" in got[1], (key, mode, hops, limit)
                else:
                    assert got[0] == "error" and "larger than max_response_bytes" in got[1], (key, mode, hops, limit)
        finally:
            await runner.cleanup()

    asyncio.run(main())
