"""Benchmark: a 10,000-cell HTML report, rendered and then opened in headless Chromium.

    python bench/html_report.py [--cells 10000] [--targets 4] [--keep DIR]

Generates a synthetic run (results.jsonl + summary, realistic texts, tool
calls, failures, errors with tracebacks), writes report.html with
evalx.reports.write_html, loads it from file:// in headless Chromium
(/usr/bin/chromium, driven by Playwright) and prints the file size, the time
to first render and the time for a status filter and a text search to apply.
Needs Chromium and Playwright (`pip install -e '.[browser]'`, `.ci/browser`).
The target is under 2 seconds to load and to filter.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evalx.reports import write_html
from evalx.results.summary import SummaryBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from browser import launch

CATEGORIES = ["billing", "orders", "shipping", "refunds", "account", "safety", "tools", "math", "policy", "escalation"]
WORDS = [
    "the",
    "order",
    "your",
    "refund",
    "within",
    "days",
    "shipping",
    "account",
    "please",
    "support",
    "we",
    "can",
    "help",
    "you",
    "with",
    "that",
    "item",
    "status",
    "tracking",
    "number",
]


def synthetic_results(cells: int, n_targets: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    targets = [f"model-{chr(ord('a') + i)}" for i in range(n_targets)]
    n_cases = cells // n_targets
    results = []
    index = 0
    for c in range(n_cases):
        category = CATEGORIES[c % len(CATEGORIES)]
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) + "?"
        for t, target in enumerate(targets):
            roll = rng.random()
            status = "pass" if roll < 0.78 - 0.05 * t else "fail" if roll < 0.95 else "error" if roll < 0.98 else "skipped"
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 140)))
            latency = rng.lognormvariate(6.5 + 0.3 * t, 0.6)
            tokens_in, tokens_out = rng.randint(200, 1500), rng.randint(20, 400)
            tools = [{"name": "lookup_order", "args": {"order_id": f"A{c:05d}"}, "result": "shipped"}] if c % 3 == 0 else []
            assertions = [
                {"type": "completed", "name": None, "passed": True, "score": 1.0, "reason": "completed", "weight": 1.0},
                {
                    "type": "max_latency_ms",
                    "name": None,
                    "passed": True,
                    "score": 1.0,
                    "reason": f"latency_ms={latency:.1f} <= 30000",
                    "weight": 1.0,
                },
                {
                    "type": "contains",
                    "name": None,
                    "passed": status == "pass",
                    "score": 1.0 if status == "pass" else 0.0,
                    "reason": "contains 'refund'" if status == "pass" else "expected 'refund' in the output",
                    "weight": 1.0,
                },
            ]
            error = traceback = None
            if status == "error":
                assertions, text = [], ""
                error = "TargetError: HTTP 503 from the provider after 3 retries"
                traceback = (
                    'Traceback (most recent call last):\n  File "agent.py", line 12, in answer\n    raise TargetError(...)\n' + error
                )
            results.append(
                {
                    "version": 1,
                    "run_id": "bench",
                    "index": index,
                    "target": target,
                    "dataset": "golden",
                    "case_id": f"case-{c:05d}",
                    "repeat": 0,
                    "category": category,
                    "difficulty": rng.choice(["easy", "medium", "hard"]),
                    "tags": [rng.choice(["smoke", "regression", "nightly"])],
                    "case_source": f"golden.jsonl:{c + 1}",
                    "input": question,
                    "expected": "refund",
                    "status": status,
                    "score": 1.0 if status == "pass" else 0.67,
                    "assertions": assertions,
                    "output": {
                        "text": text,
                        "tool_calls": tools,
                        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out, "cache_hit_tokens": tokens_in // 2},
                        "iterations": 1 + len(tools),
                        "events": [],
                        "latency_ms": latency,
                        "error": error,
                    },
                    "latency_ms": round(latency, 3),
                    "ttft_ms": round(latency * 0.3, 3),
                    "cost_usd": round((tokens_in * 0.15 + tokens_out * 0.6) / 1e6 * (1 + t), 8),
                    "judge_cost_usd": None,
                    "cached": False,
                    "error": error,
                    "traceback": traceback,
                }
            )
            index += 1
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="page loads to time (the median is reported)")
    parser.add_argument("--keep", type=Path, help="write the run here instead of a temporary folder")
    args = parser.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="evalx-html-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = synthetic_results(args.cells, args.targets)
    path = folder / "results.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    builder = SummaryBuilder("bench", "html-report-bench", "2026-01-01T00:00:00+00:00")
    for r in results:
        builder.add(r)
    summary = builder.finish("2026-01-01T00:10:00+00:00", 600.0)

    t0 = time.perf_counter()
    out = folder / "report.html"
    write_html(path, summary, out)
    render_s = time.perf_counter() - t0
    size = out.stat().st_size
    print(f"{len(results):,} cells ({len(results) // args.targets:,} cases x {args.targets} targets)")
    print(f"results.jsonl      {path.stat().st_size / 1e6:.1f} MB")
    print(f"report.html        {size / 1e6:.1f} MB  (written in {render_s:.2f}s)")

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("playwright is not installed: pip install -e '.[browser]'", file=sys.stderr)
        return 1
    loads, ready, filters, filter_js, searches = [], [], [], [], []
    with sync_playwright() as p:
        browser = launch(p)
        for _ in range(args.runs):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            t0 = time.perf_counter()
            page.goto(out.resolve().as_uri(), wait_until="commit")
            page.wait_for_selector("#mx-body tr.row")
            loads.append(time.perf_counter() - t0)
            ready.append(page.evaluate("window.__evalxReady") / 1000)

            before = page.locator("#mx-count").inner_text()
            t0 = time.perf_counter()
            page.select_option("#f-status", "fail")
            page.wait_for_function("(b) => document.getElementById('mx-count').textContent !== b", arg=before)
            filters.append(time.perf_counter() - t0)
            filter_js.append(page.evaluate("window.__evalxFilterMs") / 1000)
            shown = page.locator("#mx-count").inner_text()

            before = shown
            t0 = time.perf_counter()
            page.fill("#f-q", "case-0042")
            page.wait_for_function("(b) => document.getElementById('mx-count').textContent !== b", arg=before)
            searches.append(time.perf_counter() - t0)
            page.close()
        browser.close()
    med = statistics.median
    print(f"load to first render  {med(loads):.2f}s  (script: parse + first render {med(ready) * 1000:.0f}ms)")
    print(f"filter status=fail    {med(filters) * 1000:.0f}ms  (in page {med(filter_js) * 1000:.0f}ms) -> {shown}")
    print(f"search (first, builds the index, 150ms debounce included)  {med(searches) * 1000:.0f}ms")
    ok = med(loads) < 2 and med(filters) < 2
    print("target (< 2s to load and to filter):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
