"""What exporting a run's spans costs a cell: ``RunExporter.cell`` on N provider-like results, in-process.

    python bench/tracing_export.py [-n 5000] [--repeats 3]

A sink on 127.0.0.1 answers every OTLP/HTTP request with 200 without reading
it further; the exporter's batch thread sends there while the cells are made,
as in a run. Prints µs per cell for ``cell()`` (what the runner's on_result
pays: 5 spans a cell, two assertions, one of them a judge's) and the time
``finish()`` took to send the rest. Needs ``evalx-runner[otel]``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import threading
import time
from typing import Any

from aiohttp import web

from evalx.tracing.export import Endpoint, RunExporter, TargetFacts


def sink() -> str:
    """An OTLP/HTTP sink on a free port, served from a daemon thread; its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ready = threading.Event()

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    def serve() -> None:
        loop = asyncio.new_event_loop()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", ok)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.SockSite(runner, sock).start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    ready.wait(10)
    return f"http://127.0.0.1:{port}/v1/traces"


def result(i: int) -> Any:
    return {
        "run_id": "bench", "index": i, "target": "mini", "target_type": "provider", "dataset": "qa", "case_id": f"case-{i}",
        "repeat": 0, "category": "general", "tags": ["smoke"], "case_source": f"cases.jsonl:{i + 1}",
        "input": f"What is the answer to question {i}?", "status": "pass" if i % 5 else "fail", "score": 1.0 if i % 5 else 0.0,
        "assertions": [
            {"type": "contains", "name": None, "passed": bool(i % 5), "score": 1.0, "reason": "expected 'answer'", "weight": 1.0},
            {"type": "llm_judge", "name": None, "passed": True, "score": 1.0, "reason": "PASS - fine", "weight": 1.0,
             "details": {"judge": "mini", "calls": 1, "input_tokens": 300, "output_tokens": 20, "cached": False, "cost_usd": 0.0001}},
        ],
        "output": {"text": f"The answer is {i}.", "tool_calls": [], "usage": {"input_tokens": 20, "output_tokens": 8, "cache_hit_tokens": 0}},
        "latency_ms": 12.5, "ttft_ms": None, "cost_usd": 0.00002, "judge_cost_usd": 0.0001, "cached": False, "error": None,
        "traceback": None, "started_at": "2026-01-01T00:00:00.000+00:00",
    }  # fmt: skip


def measure(url: str, n: int) -> tuple[float, float, int]:
    exporter = RunExporter(
        Endpoint(url, "--otlp-endpoint"),
        run_id="bench",
        name="bench",
        redact=lambda text: text,
        targets={"mini": TargetFacts("provider", "gpt-4o-mini", "openai")},
    )
    results = [result(i) for i in range(n)]
    t0 = time.perf_counter()
    for r in results:
        exporter.cell(r)
    per_cell = (time.perf_counter() - t0) / n * 1e6
    t1 = time.perf_counter()
    exporter.finish(None)
    return per_cell, time.perf_counter() - t1, exporter.sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    url = sink()
    rows = [measure(url, args.n) for _ in range(args.repeats)]
    for per_cell, flush, sent in rows:
        print(f"cell(): {per_cell:7.1f} µs/cell   finish(): {flush:5.2f} s   spans sent: {sent:,} ({sent / args.n:.1f} a cell)")
    print(f"median: {statistics.median(r[0] for r in rows):.1f} µs/cell over {args.n:,} cells")


if __name__ == "__main__":
    main()
