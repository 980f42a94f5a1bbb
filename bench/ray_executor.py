"""The Ray executor against the local one, in one process, on this machine (issue 20).

    python bench/ray_executor.py [--only cpu,provider,overhead] [--repeats 3] [--quick]

A local Ray instance is started once (``ray.init(num_cpus=4)``: logical CPUs,
so two targets' actors fit; the machine's cores are what they are) and every
run goes through ``evalx.execution.runner.run`` in this process, local and
Ray alternating, so both see the same machine load. Figures:

- cpu: a Python target doing ~20 ms of pure-Python work per cell (each cell
  its own input), 1,000 cells: the local executor (threads: one core, the
  GIL) against Ray with 2 actors of 1 CPU each on one node; run-phase
  throughput ratio (goal >= 1.7x);
- provider: 10,000 provider cells at 200 ms server latency
  (bench/fake_server.py), concurrency 50 (one actor with the target's 50):
  the run phase of each, Ray's within 10 % of local's (ideal 40 s);
  Ray's start-up (actors built and started) apart;
- overhead: an instant Python target, 20,000 cells (2,000 at batch size 1):
  Ray's run phase per cell minus the local run's, for batch sizes 1, 8, 64,
  512 and the default sizing; and this process's CPU per cell (the driver's
  whole run: loading, planning, results and reports included).

The run phase of a local run is ``duration_s`` of its summary minus nothing
(it has no start-up worth the name); Ray's is ``LAST_TIMINGS["run_s"]``
(from the actors being ready to the last result), its start-up
``LAST_TIMINGS["startup_s"]``. Writes ``bench/out/ray_executor.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORK = HERE / "out" / "ray_executor"
sys.path.insert(0, str(HERE))

# ~20 ms of pure-Python work on this machine, sized by calibrate(); the input sets the seed, so every cell differs
CPU_AGENT = """
def answer(question):
    seed = int(question.split()[-1])
    total = 0
    for i in range({loops}):
        total = (total * 31 + i * seed) % 1000003
    return f"done {{seed}} {{total}}"
"""

INSTANT_AGENT = """
def answer(question):
    return "The answer is 4."
"""


def calibrate(target_ms: float = 20.0) -> int:
    """Loops of CPU_AGENT's body that take ``target_ms`` in this interpreter (best of 5)."""
    namespace: dict[str, Any] = {}
    exec(CPU_AGENT.format(loops=100_000), namespace)
    best = min(_timed(namespace["answer"], "x 7") for _ in range(5))
    return max(1000, int(100_000 * target_ms / 1000 / best))


def _timed(fn: Any, arg: str) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def project(name: str, n: int, target: str, *, concurrency: int, code: str | None = None, executor: dict[str, Any] | None = None) -> Path:
    d = WORK / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if code is not None:
        (d / "agent.py").write_text(code, encoding="utf-8")
    with open(d / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"case-{i:06d}", "input": f"What is 2 + 2? case {i + 1}", "assert": [{"type": "completed"}]}) + "\n")
    lines = [
        "version: 1",
        f"name: bench-{name}",
        f"defaults: {{concurrency: {concurrency}, timeout_s: 300, retries: 0}}",
        "targets:",
        f"  - {target}",
        "datasets:",
        "  - {id: bench, path: cases.jsonl}",
    ]
    if executor:
        lines.append(f"executor: {json.dumps(executor)}")
    (d / "evalconfig.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d / "evalconfig.yaml"


def run_once(config: Path, executor: str) -> dict[str, Any]:
    """One run in this process; its run phase (and Ray's start-up) in seconds."""
    from evalx.config.loader import load_config
    from evalx.execution import ray_executor
    from evalx.execution.request import RunRequest
    from evalx.execution.runner import run

    ray_executor.LAST_TIMINGS.clear()
    t0, cpu0 = time.monotonic(), time.process_time()
    outcome = run(load_config(config), RunRequest(use_cache=False, quiet=True, executor=executor))
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    summary = outcome.summary
    counts = {k: summary.get(k) for k in ("cells", "passed", "failed", "errors", "skipped")}
    out: dict[str, Any] = {
        "executor": executor,
        "wall_s": round(wall, 3),
        "duration_s": summary.get("duration_s"),
        "totals": counts,
        # this process's CPU for the whole run (load, plan, reports too): under Ray, all the driver does
        "driver_cpu_s": round(cpu, 3),
    }
    if executor == "ray":
        out["startup_s"] = round(ray_executor.LAST_TIMINGS["startup_s"], 3)
        out["run_s"] = round(ray_executor.LAST_TIMINGS["run_s"], 3)
    else:
        out["run_s"] = summary.get("duration_s")
    shutil.rmtree(config.parent / "runs", ignore_errors=True)
    return out


def bench_cpu(repeats: int, n: int) -> dict[str, Any]:
    loops = calibrate()
    code = CPU_AGENT.format(loops=loops)
    local = project("cpu-local", n, "{id: agent, type: python, callable: 'agent.py:answer'}", concurrency=2, code=code)
    ray = project(
        "cpu-ray",
        n,
        "{id: agent, type: python, callable: 'agent.py:answer', ray: {actors: 2, num_cpus: 1, concurrency: 1}}",
        concurrency=2,
        code=code,
    )
    rows = []
    for _ in range(repeats):
        a, b = run_once(local, "local"), run_once(ray, "ray")
        ceiling = parallel_ceiling(code, n)  # the same work in 1 then 2 bare processes, right after: what 2 processes can get now
        ratio = round(a["run_s"] / b["run_s"], 3)
        rows.append({"local": a, "ray": b, "ratio": ratio, "machine_ceiling": ceiling, "ratio_of_ceiling": round(ratio / ceiling, 3)})
        print(
            f"cpu: local {a['run_s']:.2f}s  ray {b['run_s']:.2f}s (+{b['startup_s']:.2f}s start-up)  ratio {rows[-1]['ratio']}"
            f"  (the machine's ceiling now: {ceiling}x)",
            flush=True,
        )
    return {
        "cells": n,
        "loops": loops,
        "runs": rows,
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "median_ceiling": statistics.median(r["machine_ceiling"] for r in rows),
        "median_ratio_of_ceiling": statistics.median(r["ratio_of_ceiling"] for r in rows),
    }


def _spin(code: str, n: int) -> None:
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    for i in range(n):
        namespace["answer"](f"x {i + 1}")


def parallel_ceiling(code: str, n: int) -> float:
    """How much faster 2 processes do ``n`` cells' work than 1 right now (2.0 on two idle cores; less when others share them)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    one = ctx.Process(target=_spin, args=(code, n))
    one.start()
    one.join()
    t1 = time.perf_counter()
    two = [ctx.Process(target=_spin, args=(code, n // 2)) for _ in range(2)]
    for p in two:
        p.start()
    for p in two:
        p.join()
    t2 = time.perf_counter()
    return round((t1 - t0) / (t2 - t1), 3)


def bench_provider(repeats: int, n: int) -> dict[str, Any]:
    from fake_server import FakeServer

    with FakeServer(latency_ms=200) as server:
        target = f"{{id: model, type: provider, provider: openai, model: bench-model, api_key: sk-bench, base_url: '{server.url}/v1'}}"
        config = project("provider", n, target, concurrency=50)
        rows = []
        for _ in range(repeats):
            a, b = run_once(config, "local"), run_once(config, "ray")
            rows.append({"local": a, "ray": b, "ray_over_local": round(b["run_s"] / a["run_s"], 3)})
            print(
                f"provider: local {a['run_s']:.2f}s  ray {b['run_s']:.2f}s (+{b['startup_s']:.2f}s start-up)  ray/local {rows[-1]['ray_over_local']}",
                flush=True,
            )
    ideal = n * 0.2 / 50
    return {"cells": n, "ideal_s": ideal, "runs": rows, "median_ray_over_local": statistics.median(r["ray_over_local"] for r in rows)}


def bench_overhead(repeats: int, n: int) -> dict[str, Any]:
    target = "{id: agent, type: python, callable: 'agent.py:answer'}"
    local = project("overhead-local", n, target, concurrency=8, code=INSTANT_AGENT)
    rows: dict[str, Any] = {}
    base = [run_once(local, "local") for _ in range(repeats)]
    rows["local_run_s"] = [r["run_s"] for r in base]
    local_s = statistics.median(r["run_s"] for r in base)
    rows["local_cpu_us_per_cell"] = round(statistics.median(r["driver_cpu_s"] for r in base) / n * 1e6, 1)
    for batch in (1, 8, 64, 512, None):
        cells = n // 10 if batch == 1 else n  # a round trip per cell: a tenth of the cells is plenty
        executor = {"batch_size": batch} if batch else None
        config = project(f"overhead-b{batch}", cells, target, concurrency=8, code=INSTANT_AGENT, executor=executor)
        runs = [run_once(config, "ray") for _ in range(repeats)]
        ray_s = statistics.median(r["run_s"] for r in runs)
        per_cell_us = (ray_s / cells - local_s / n) * 1e6
        driver_us = statistics.median(r["driver_cpu_s"] for r in runs) / cells * 1e6
        rows[f"batch_{batch or 'auto'}"] = {
            "ray_run_s": [r["run_s"] for r in runs],
            "overhead_us_per_cell": round(per_cell_us, 1),
            "driver_cpu_us_per_cell": round(driver_us, 1),
        }
        print(
            f"overhead: batch {batch or 'auto'}: ray {ray_s:.3f}s vs local {local_s:.3f}s -> {per_cell_us:.0f} us/cell;"
            f" driver CPU {driver_us:.0f} us/cell (whole run)",
            flush=True,
        )
    return {"cells": n, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="cpu,provider,overhead")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tenth of the cells, one repeat")
    args = parser.parse_args()
    import os

    # Ray starts its workers at nice 15 (its worker_niceness), so the machine's other work would come first for the
    # actors but not for the local executor (this process): both run at this process's priority here
    os.environ.setdefault("RAY_worker_niceness", "0")
    import ray

    t0 = time.monotonic()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    report: dict[str, Any] = {
        "ray_init_s": round(time.monotonic() - t0, 2),
        "ray": ray.__version__,
        "worker_niceness": os.environ["RAY_worker_niceness"],  # noqa: SIM112 (Ray reads this exact name)
        "load_average_at_start": os.getloadavg(),
    }
    print(f"ray.init: {report['ray_init_s']}s", flush=True)
    repeats = 1 if args.quick else args.repeats
    scale = 10 if args.quick else 1
    only = set(args.only.split(","))
    try:
        if "cpu" in only:
            report["cpu"] = bench_cpu(repeats, 1000 // scale)
        if "provider" in only:
            report["provider"] = bench_provider(repeats, 10_000 // scale)
        if "overhead" in only:
            report["overhead"] = bench_overhead(repeats, 20_000 // scale)
    finally:
        ray.shutdown()
    WORK.mkdir(parents=True, exist_ok=True)
    (HERE / "out" / "ray_executor.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
