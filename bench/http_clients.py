"""Which HTTP client should carry evalx's remote targets? Measure, don't guess.

Starts a fast local aiohttp.web server in a subprocess (127.0.0.1, a small
JSON answer) and sends N POST requests with each candidate client at several
concurrencies, one fresh client per measurement, and prints requests/second:

    python bench/http_clients.py [--requests 2000] [--concurrency 1,10,50]

Candidates: bare ``httpx.AsyncClient``; httpx over the ``httpx-aiohttp``
transport (if installed); bare ``aiohttp.ClientSession``; and evalx's own
``evalx.targets.transport.http.HttpClient.request_json`` (aiohttp underneath, plus JSON
encode/decode and error mapping), which is what targets actually use.
A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_server import free_port, wait_for_port

BODY = {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}


def serve(port: int) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True, "text": "hello", "usage": {"input_tokens": 3, "output_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/echo", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def drive(n: int, concurrency: int, send: Callable[[], Awaitable[Any]]) -> float:
    """Requests per second for n sends, at most `concurrency` in flight (a worker pool)."""
    counter = iter(range(n))

    async def worker() -> None:
        for _ in counter:
            await send()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - t0)


async def bench_httpx(url: str, n: int, c: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def send() -> None:
            r = await client.post(url, json=BODY)
            r.json()

        return await drive(n, c, send)


async def bench_httpx_aiohttp(url: str, n: int, c: int) -> float:
    import httpx
    from httpx_aiohttp import AiohttpTransport  # type: ignore[import-not-found]

    async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=30) as client:

        async def send() -> None:
            r = await client.post(url, json=BODY)
            r.json()

        return await drive(n, c, send)


async def bench_aiohttp(url: str, n: int, c: int) -> float:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as session:

        async def send() -> None:
            async with session.post(url, json=BODY) as r:
                await r.json()

        return await drive(n, c, send)


async def bench_evalx(url: str, n: int, c: int) -> float:
    from evalx.targets.transport.http import HttpClient

    client = HttpClient(concurrency=c, retries=0)
    try:

        async def send() -> None:
            r = await client.request_json("POST", url, json=BODY)
            assert r.json["ok"]

        return await drive(n, c, send)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,10,50")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for_port(port)
        url = f"http://127.0.0.1:{port}/v1/echo"
        candidates: list[tuple[str, Callable[[str, int, int], Awaitable[float]]]] = [("httpx.AsyncClient", bench_httpx)]
        try:
            import httpx_aiohttp  # type: ignore[import-not-found]  # noqa: F401

            candidates.append(("httpx + httpx-aiohttp", bench_httpx_aiohttp))
        except ImportError:
            print("(httpx-aiohttp not installed: skipped)")
        candidates += [("aiohttp.ClientSession", bench_aiohttp), ("evalx HttpClient", bench_evalx)]
        levels = [int(x) for x in args.concurrency.split(",")]
        asyncio.run(bench_aiohttp(url, 200, 10))  # warm the server up
        rows = []
        for name, fn in candidates:
            rows.append([name] + [asyncio.run(fn(url, args.requests, c)) for c in levels])
        width = max(len(r[0]) for r in rows)
        print(f"{args.requests} POST requests to a local aiohttp.web server, requests/second")
        print("client".ljust(width) + "".join(f"  c={c:>5}" for c in levels))
        for r in rows:
            print(r[0].ljust(width) + "".join(f"  {v:7.0f}" for v in r[1:]))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
