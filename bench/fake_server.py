"""A fast local fake model server for the benchmarks (aiohttp.web, 127.0.0.1).

    python bench/fake_server.py [--port 8123] [--latency-ms 0] [--latency-max-ms MS] [--workers 1] [--echo] [--capacity]

Serves, with an optional artificial latency (``asyncio.sleep``, so it costs
no CPU and a latency-bound run is limited by the latency alone; with
``--latency-max-ms`` each request waits a uniform random time between the
two, as real model calls vary):

- ``POST /v1/chat/completions`` — an OpenAI-compatible chat completion
  (``choices[0].message.content``, ``finish_reason``, ``usage`` with
  ``prompt_tokens``/``completion_tokens``/``prompt_tokens_details``);
- ``POST /execute`` — an engine run as Server-Sent Events: three
  ``text_delta`` events, one ``tool_call``, one ``usage`` and ``done``;
- with ``--echo``, the chat answer ends with ``Reference: <x>.``, where
  ``<x>`` is the text in the last parentheses of the request body (the
  bench's inputs end with ``(case N)``), so each case can assert something of
  its own that only the right answer contains;
- ``GET /stats`` — requests served and CPU seconds spent by this process, so
  a benchmark can show how busy the server was (CPU µs per request → the
  capacity of one server process).

bench/ratelimited_server.py runs this same server with a per-API-key
requests/tokens-per-minute limit in front of the chat endpoint (the
``limiter`` hook of :func:`make_app`), answering 429 the way OpenAI does.

Answers are pre-encoded bytes: the server does as little as it can per
request. ``--workers N`` starts N processes sharing the port with
``SO_REUSEPORT`` (Linux), for when one process would saturate.

``--capacity`` starts the server, drives it with a bare aiohttp loop at high
concurrency (the most one client process can push) and prints requests/s and
the server's own CPU time per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHAT_RESPONSE = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "The answer is 4. Refunds take 5 business days."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 11, "total_tokens": 32, "prompt_tokens_details": {"cached_tokens": 0}},
    }
).encode()

_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("text_delta", {"text": "The answer "}),
    ("tool_call", {"tool": "calculator", "args": {"expression": "2+2"}, "id": "call_1"}),
    ("text_delta", {"text": "is 4. "}),
    ("text_delta", {"text": "Refunds take 5 business days."}),
    ("usage", {"input_tokens": 21, "output_tokens": 11, "cache_hit_tokens": 0}),
    ("done", {"iterations": 2}),
]


def echo_response(body: bytes) -> bytes:
    """CHAT_RESPONSE with ``Reference: <x>.`` appended to the content (``<x>``: the request's last ``(...)``)."""
    end = body.rfind(b")")
    start = body.rfind(b"(", 0, end) if end > 0 else -1
    token = (
        body[start + 1 : end] if start >= 0 and end - start <= 65 and b'"' not in body[start:end] and b"\\" not in body[start:end] else b"?"
    )
    return CHAT_RESPONSE.replace(b'business days."', b"business days. Reference: " + token + b'."', 1)


SSE_RESPONSE = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in _EVENTS).encode()


def make_app(latency_s: float, echo: bool = False, latency_max_s: float | None = None, limiter: Any = None) -> Any:
    """The aiohttp application.

    ``limiter`` (bench/ratelimited_server.py's ``RateLimiter``): each chat request is first
    ``limiter.admit(headers, body)``-ed, which answers ``(status, headers, body)``: a 429 is sent at
    once, a 200 after the latency; its ``stats()`` are added to ``GET /stats`` under ``"limits"``.
    """
    import random

    from aiohttp import web

    stats = {"requests": 0}

    async def wait() -> None:
        if latency_max_s is not None and latency_max_s > latency_s:
            await asyncio.sleep(random.uniform(latency_s, latency_max_s))
        elif latency_s:
            await asyncio.sleep(latency_s)

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        stats["requests"] += 1
        if limiter is not None:
            status, headers, answer = limiter.admit(request.headers, body)
            if status == 200:
                await wait()
            return web.Response(status=status, body=answer, headers=headers, content_type="application/json")
        await wait()
        return web.Response(body=echo_response(body) if echo else CHAT_RESPONSE, content_type="application/json")

    async def execute(request: web.Request) -> web.StreamResponse:
        await request.read()
        stats["requests"] += 1
        await wait()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await resp.prepare(request)
        await resp.write(SSE_RESPONSE)
        await resp.write_eof()
        return resp

    async def get_stats(request: web.Request) -> web.Response:
        cpu = os.times()
        report: dict[str, Any] = {"requests": stats["requests"], "cpu_s": cpu.user + cpu.system, "pid": os.getpid()}
        if limiter is not None:
            report["limits"] = limiter.stats()
        return web.json_response(report)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/execute", execute)
    app.router.add_get("/stats", get_stats)
    return app


def serve(
    port: int, latency_ms: float, reuse_port: bool, echo: bool = False, latency_max_ms: float | None = None, limiter: Any = None
) -> None:
    from aiohttp import web

    async def main() -> None:
        latency_max_s = latency_max_ms / 1000.0 if latency_max_ms is not None else None
        app = make_app(latency_ms / 1000.0, echo, latency_max_s, limiter)
        runner = web.AppRunner(app, access_log=None, handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, reuse_port=reuse_port or None, backlog=1024)
        await site.start()
        await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"fake server on port {port} did not start")


class FakeServer:
    """The fake server in subprocess(es): ``with FakeServer(latency_ms=200) as s: s.url``."""

    def __init__(
        self, *, latency_ms: float = 0.0, workers: int = 1, port: int | None = None, echo: bool = False, latency_max_ms: float | None = None
    ) -> None:
        self.latency_ms = latency_ms
        self.latency_max_ms = latency_max_ms
        self.echo = echo
        self.workers = workers
        self.port = port or free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The command line of one server process (a subclass serves something else)."""
        cmd = [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port), "--latency-ms", str(self.latency_ms), "--serve"]
        if self.workers > 1:
            cmd.append("--reuse-port")
        if self.echo:
            cmd.append("--echo")
        if self.latency_max_ms is not None:
            cmd += ["--latency-max-ms", str(self.latency_max_ms)]
        return cmd

    def __enter__(self) -> FakeServer:
        cmd = self.command()
        for _ in range(self.workers):
            self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
            if len(self.procs) == 1:
                wait_for_port(self.port)
        return self

    def stats(self) -> dict[str, Any]:
        """Requests served and CPU seconds of a worker process (only exact with one worker:
        with several, each /stats call reaches whichever process accepts it)."""
        import urllib.request

        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return dict(json.loads(r.read()))

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def measure_capacity(kind: str = "provider", n: int = 20000, concurrency: int = 200, workers: int = 1) -> dict[str, float]:
    """Drive a fresh server with the bare aiohttp loop (bench/bare_loop.py, its own process) at high concurrency.

    Returns the client's requests/s and the server's CPU µs per request; 1e6 / that is what one server
    process could serve with a core to itself.
    """
    bare = Path(__file__).with_name("bare_loop.py")
    with FakeServer(workers=workers) as server:
        before = server.stats() if workers == 1 else None
        out = subprocess.run(
            [sys.executable, str(bare), "--url", server.url, "--kind", kind, "-n", str(n), "-c", str(concurrency)],
            check=True,
            capture_output=True,
            text=True,
        )
        after = server.stats() if workers == 1 else None
    result = json.loads(out.stdout)
    report = {"kind": kind, "n": n, "concurrency": concurrency, "workers": workers, "client_rps": result["rps"]}
    if before and after:
        served = after["requests"] - before["requests"]
        cpu_us = (after["cpu_s"] - before["cpu_s"]) * 1e6 / max(1, served)
        report["server_cpu_us_per_request"] = round(cpu_us, 1)
        report["server_capacity_rps_one_core"] = round(1e6 / cpu_us) if cpu_us else 0.0
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--latency-max-ms", type=float, default=None, help="each request waits a random time between --latency-ms and this")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    parser.add_argument("--echo", action="store_true", help="end each chat answer with 'Reference: <the request's last (...)>.'")
    parser.add_argument("--capacity", action="store_true", help="measure and print the server's capacity, then exit")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # one worker process
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.latency_ms, args.reuse_port, args.echo, args.latency_max_ms)
        return
    if args.capacity:
        for kind in ("provider", "engine"):
            print(json.dumps(measure_capacity(kind, workers=args.workers)))
        return
    with FakeServer(
        latency_ms=args.latency_ms, workers=args.workers, port=args.port, echo=args.echo, latency_max_ms=args.latency_max_ms
    ) as server:
        print(f"fake server on {server.url} (latency {args.latency_ms:g} ms, {args.workers} process(es)); Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
