"""What tracing costs (docs/tracing.md, issue 34).

    python bench/tracing.py [--cells N] [--spans-per-cell K]

- receiver: spans/s the OTLP/HTTP receiver decodes and sorts to their cells,
  from protobuf batches of 100 spans POSTed by 4 clients at once (an SDK's
  BatchSpanProcessor sends batches), on this process's event loop;
- per span, end to end: ``evalx run`` of N cells of a Python target that
  starts K spans with the real OpenTelemetry SDK, with ``--trace`` and
  without (the SDK then has no provider: its spans are no-ops); the
  difference over N x K spans is what receiving, storing and reporting one
  span costs (whole process, wall time, best of 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP = """
from opentelemetry import trace
tracer = trace.get_tracer("bench")
K = {k}
def app(text):
    with tracer.start_as_current_span("agent"):
        for i in range(K - 1):
            with tracer.start_as_current_span("execute_tool t") as s:
                s.set_attribute("gen_ai.operation.name", "execute_tool")
                s.set_attribute("gen_ai.tool.name", "t")
    return text
"""


async def receiver_throughput(total: int = 200_000, batch: int = 100, clients: int = 4) -> float:
    import aiohttp
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from evalx.common.trace_context import new_cell_span
    from evalx.tracing.collector import Collector
    from evalx.tracing.receiver import Receiver

    collector = Collector(max_spans_per_cell=batch)
    receiver = Receiver(collector)
    url = await receiver.start() + "/v1/traces"
    bodies = []
    buckets = []
    for _ in range(total // batch):
        cell = new_cell_span()
        buckets.append(collector.begin(cell))
        req = ExportTraceServiceRequest()
        spans = req.resource_spans.add().scope_spans.add()
        for i in range(batch):
            s = spans.spans.add()
            s.name, s.trace_id, s.span_id = "execute_tool t", bytes.fromhex(cell.trace_id), (i + 1).to_bytes(8, "big")
            s.parent_span_id = bytes.fromhex(cell.span_id)
            s.start_time_unix_nano, s.end_time_unix_nano = 1, 2
            a = s.attributes.add()
            a.key, a.value.string_value = "gen_ai.tool.name", "t"
        bodies.append(req.SerializeToString())
    async with aiohttp.ClientSession() as session:

        async def client(mine: list[bytes]) -> None:
            for body in mine:
                async with session.post(url, data=body, headers={"Content-Type": "application/x-protobuf"}) as r:
                    assert r.status == 200, r.status

        t0 = time.perf_counter()
        await asyncio.gather(*(client(bodies[i::clients]) for i in range(clients)))
        took = time.perf_counter() - t0
    await receiver.aclose()
    got = sum(len(b.spans) for b in buckets)
    assert got == total, got
    return total / took


def run_once(project: Path, trace: bool) -> float:
    args = [sys.executable, "-m", "evalx", "run", "-q", "--no-cache", *(["--trace"] if trace else [])]
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=project, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--spans-per-cell", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    rate = asyncio.run(receiver_throughput())
    print(f"receiver: {rate:,.0f} spans/s ({1e6 / rate:.1f} us/span) decoded and sorted to their cells")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "app.py").write_text(APP.format(k=opts.spans_per_cell))
        (project / "cases.jsonl").write_text("".join(json.dumps({"id": f"c{i}", "input": f"x{i}"}) + "\n" for i in range(opts.cells)))
        (project / "evalconfig.yaml").write_text(
            "targets:\n  - {id: app, type: python, callable: app.py:app, concurrency: 10}\n"
            "datasets:\n  - {id: d, path: cases.jsonl}\n"
            "assert:\n  - {type: contains, value: x}\n"
        )
        off = min(run_once(project, False) for _ in range(opts.repeats))
        on = min(run_once(project, True) for _ in range(opts.repeats))
    spans = opts.cells * opts.spans_per_cell
    print(f"evalx run, {opts.cells} cells x {opts.spans_per_cell} spans: off {off:.2f}s, --trace {on:.2f}s")
    print(f"  per span received, stored and reported: {(on - off) / spans * 1e6:.1f} us; per cell {(on - off) / opts.cells * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
