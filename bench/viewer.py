"""Benchmark: `evalx view` over 100 runs × 1,000 cells — the runs page, a case history, the case list, a comparison.

    python bench/viewer.py [--runs 100] [--cells 1000] [--repeats 3] [--keep DIR] [--no-browser]

Makes one real run of a 1,000-case Python-target config (`evalx run`), then
copies it into RUNS-1 more runs whose cells vary (statuses drift, some cases
flip, latencies and scores change), written with the store's own
``rewrite_results`` (results format v2). Then, through the app on a real
socket (aiohttp's test server on 127.0.0.1):

- **cold**: no index anywhere (first start over a folder never viewed): the runs page reads the runs'
  summaries, a case history reads every run once (and indexes it);
- **restart**: the index files in ``RUNS_DIR/.viewer/`` exist, the process's memory is empty (a new `evalx view`);
- **warm**: the same process again (indexes in memory);

each timed for GET / (runs page) and GET /case (one case's history), plus warm
GET /cases (the case list) and GET /compare (two runs), and the time to write
the static history page. With Chromium (Playwright), the time for the browser
to load the runs page and a case page (``page.goto`` to the load event). The
target: the runs page and a case history under 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from evalx.results.store import RESULTS, read_results, rewrite_results
from evalx.results.summary import SummaryBuilder
from evalx.viewer import index as viewer_index
from evalx.viewer import pages as viewer_pages
from evalx.viewer.app import make_app
from evalx.viewer.index import INDEX_DIR
from evalx.viewer.static import write_history_page

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def make_base(folder: Path, cells: int) -> Path:
    """One real run of ``cells`` cases (a Python target); its folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bot.py").write_text("def answer(q):\n    return q if hash(q) % 5 else q.upper()\n")
    cases = "\n".join(
        f"      - {{id: case-{i:05d}, input: 'question {i} about the order', assert: [{{type: contains, value: question}}]}}"
        for i in range(cells)
    )
    (folder / "evalconfig.yaml").write_text(
        "version: 1\nname: bench\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        f"datasets:\n  - id: d\n    cases:\n{cases}\n"
    )
    subprocess.run([sys.executable, "-m", "evalx.cli", "run", "-q"], cwd=folder, check=False, capture_output=True)
    (run,) = list((folder / "runs").iterdir())
    return run


def make_runs(base: Path, runs_dir: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    cells = list(read_results(base / RESULTS, raw=True))
    meta = json.loads((base / "run.json").read_text())
    summary = json.loads((base / "summary.json").read_text())
    weak = {c["case_id"]: rng.random() for c in cells}  # how likely each case fails
    t0 = 1_790_000_000.0
    for k in range(n):
        run_id = f"20260101-{k // 60:02d}{k % 60:02d}00-{k:06x}"
        folder = runs_dir / run_id
        folder.mkdir(parents=True)
        drift = 0.15 + 0.1 * (k % 7) / 7  # the share of weak cases failing, up and down over time
        out = []
        for c in cells:
            c = dict(c)
            fails = weak[c["case_id"]] < drift and rng.random() < 0.8
            c["run_id"], c["status"] = run_id, "fail" if fails else "pass"
            c["score"] = 0.0 if fails else 1.0
            c["latency_ms"] = rng.lognormvariate(5.5, 0.4)
            c["cost_usd"] = round(rng.uniform(0.0001, 0.002), 6)
            out.append(c)
        rewrite_results(folder / RESULTS, out)
        builder = SummaryBuilder(run_id, "bench", "")
        for c in out:
            builder.add(c)  # the run's own figures, as `evalx run` would have written them
        figures = dict(builder.finish("", 1.0))
        started = t0 + 3600 * k
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(started))
        (folder / "run.json").write_text(json.dumps({**meta, "run_id": run_id, "started_at": stamp, "started_unix": started}))
        (folder / "summary.json").write_text(json.dumps({**summary, **figures, "run_id": run_id, "started_at": stamp}))


def forget() -> None:
    """The process's memory of indexes and derived pages, as in a fresh `evalx view`."""
    viewer_index._MEMORY.clear()
    viewer_pages._CACHE.clear()


BODIES: dict[str, bytes] = {}


async def timed(client: TestClient[Any, Any], url: str, keep: str = "") -> tuple[float, int]:
    t = time.perf_counter()
    res = await client.get(url)
    body = await res.read()
    assert res.status == 200, (url, res.status, body[:300])
    if keep:
        BODIES[keep] = body
    return time.perf_counter() - t, len(body)


async def measure(runs_dir: Path, repeats: int, case_url: str, compare_url: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    def put(name: str, value: tuple[float, int]) -> None:
        out.setdefault(name, []).append(value[0])
        sizes[name] = value[1]

    for _ in range(repeats):
        shutil.rmtree(runs_dir / INDEX_DIR, ignore_errors=True)
        forget()
        async with TestClient(TestServer(make_app(runs_dir), host="127.0.0.1")) as client:
            put("cold GET /", await timed(client, "/", keep="cold"))
            shutil.rmtree(runs_dir / INDEX_DIR, ignore_errors=True)
            forget()
            put("cold GET /case", await timed(client, case_url))
            forget()
            put("restart GET /", await timed(client, "/"))
            forget()
            put("restart GET /case", await timed(client, case_url))
            put("warm GET /", await timed(client, "/", keep="warm"))
            put("warm GET /case", await timed(client, case_url))
            put("warm GET /cases", await timed(client, "/cases"))
            put("warm GET /cases?flag=flaky", await timed(client, "/cases?flag=flaky"))
            put("warm GET /compare", await timed(client, compare_url))
    out["_sizes"] = [float(sizes[k]) for k in sorted(sizes)]
    out["_size_names"] = sorted(sizes)  # type: ignore[list-item]
    return out


def browser_times(base_url: str, urls: list[str], repeats: int) -> dict[str, list[float]]:
    from browser import launch  # tests/browser.py
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {}
    with sync_playwright() as p:
        b = launch(p)
        page = b.new_page()
        for _ in range(repeats):
            for url in urls:
                t = time.perf_counter()
                page.goto(base_url + url, wait_until="load")
                out.setdefault(f"Chromium load {url.split('?')[0]}", []).append(time.perf_counter() - t)
        b.close()
    return out


def serve_in_thread(runs_dir: Path, **app_options: Any) -> tuple[str, Any]:
    """The app over ``runs_dir`` on 127.0.0.1 in a thread of its own: its base URL and a function that stops it."""
    import threading

    from aiohttp import web

    loop = asyncio.new_event_loop()
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def start() -> None:
        runner = web.AppRunner(make_app(runs_dir, **app_options))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"], box["port"] = runner, runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(60)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

    return f"http://127.0.0.1:{box['port']}", stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="Build the runs here and keep them.")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="evalx-viewer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    base = make_base(work / "base", args.cells)
    runs_dir = work / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    make_runs(base, runs_dir, args.runs)
    print(f"made {args.runs} runs x {args.cells} cells in {work} ({time.perf_counter() - t:.1f}s)")
    runs = sorted(p.name for p in runs_dir.iterdir() if p.name != INDEX_DIR)
    case_url = "/case?target=bot&dataset=d&case=case-00042"
    compare_url = f"/compare?a={runs[-2]}&b={runs[-1]}"
    results = asyncio.run(measure(runs_dir, args.repeats, case_url, compare_url))
    print("runs page from the summaries (cold) == from the indexes (warm):", BODIES["cold"] == BODIES["warm"])
    names = results.pop("_size_names")
    sizes = dict(zip(names, results.pop("_sizes"), strict=True))
    for _ in range(args.repeats):
        t = time.perf_counter()
        write_history_page(runs_dir, work / "history.html")
        results.setdefault("history page written (warm indexes)", []).append(time.perf_counter() - t)
    sizes["history page written (warm indexes)"] = (work / "history.html").stat().st_size
    if not args.no_browser:
        url, stop = serve_in_thread(runs_dir)
        try:
            results.update(browser_times(url, ["/", case_url], args.repeats))
        finally:
            stop()
    print(f"\n{'measure':<44} {'median':>8}  all runs (s)            size")
    for name, values in results.items():
        size = f"{sizes[name] / 1024:.0f} KiB" if name in sizes else ""
        print(f"{name:<44} {statistics.median(values):>7.3f}s  {' '.join(f'{v:.3f}' for v in values):<22}  {size}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "viewer.json").write_text(json.dumps({"runs": args.runs, "cells": args.cells, "results": results, "sizes": sizes}, indent=2))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
