"""Two evalx source trees against the bare aiohttp loop, interleaved in the same rounds (a before/after on a busy machine).

    python bench/ab.py --a /tmp/before/src --b src [--rounds 5] [--cells 10000] [--only provider,provider_distinct]

``bench/run.py --evalx-src`` measures one tree a run; two runs one after the
other see the machine at two different loads. Here each round runs, in a
shuffled order, ``evalx run`` of tree A, of tree B and the bare loop
(``bench/bare_loop.py``) on the same fake server, and each tree's ratio is
its cells/s over the bare loop's of that round, so drift hits both trees
alike. Workloads (bench/run.py's, same configs):

- ``provider``: the ``throughput provider c=50`` project (every case asserts ``contains: "4"``);
- ``provider_distinct``: the ``provider_distinct`` project (each case its own ``contains``, ``--echo`` server).

Prints, per workload, the median of each tree's same-round ratios, its CPU
seconds (user + system of the process, ``os.wait4``) and every round's
figures; writes ``bench/out/ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as bench  # noqa: E402
from fake_server import FakeServer  # noqa: E402


def _evalx(src: str, config: Path) -> bench.Proc:
    bench.EVALX, bench.EVALX_SRC = [sys.executable, "-m", "evalx"], src
    proc, _ = bench.evalx_run(config)
    return proc


def measure(workload: str, trees: dict[str, str], rounds: int, n: int) -> dict[str, Any]:
    distinct = workload == "provider_distinct"
    with FakeServer(echo=distinct) as server:
        bench.bare_loop(server.url, "provider", 500, 10)  # warm-up
        config = bench.make_project(f"ab-{workload}", "provider", n, url=server.url, concurrency=50, distinct=distinct)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for r in range(rounds):
            order = [*trees, "bare"]
            random.shuffle(order)
            walls: dict[str, tuple[float, float]] = {}
            for name in order:
                if name == "bare":
                    proc, _ = bench.bare_loop(server.url, "provider", n, 50)
                else:
                    proc = _evalx(trees[name], config)
                walls[name] = (proc.wall_s, proc.cpu_s)
            bare_wall = walls["bare"][0]
            line = [f"round {r + 1}: bare {n / bare_wall:,.0f} cells/s ({walls['bare'][1]:.2f} CPU s)"]
            for name in trees:
                wall, cpu = walls[name]
                samples[name].append({"ratio": bare_wall / wall, "cells_s": n / wall, "cpu_s": cpu, "bare_cpu_s": walls["bare"][1]})
                line.append(f"{name} {bare_wall / wall:.3f} ({cpu:.2f} CPU s)")
            print(f"  {workload} " + " · ".join(line) + f" · load {os.getloadavg()[0]:.1f}", flush=True)
    out: dict[str, Any] = {}
    for name, rows in samples.items():
        out[name] = {
            "ratio": round(statistics.median(r["ratio"] for r in rows), 3),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in rows), 3),
            "rounds": rows,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="source tree A (the folder holding evalx/)")
    parser.add_argument("--b", required=True, help="source tree B")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--only", default="provider,provider_distinct")
    parser.add_argument("--work", type=Path, help="where the generated projects go (default bench/out/work)")
    parser.add_argument("--out", type=Path, default=bench.OUT / "ab.json")
    args = parser.parse_args()
    if args.work:
        bench.WORK = args.work.resolve()
    bench.WORK.mkdir(parents=True, exist_ok=True)
    trees = {"A": str(Path(args.a).resolve()), "B": str(Path(args.b).resolve())}
    for src in trees.values():
        bench.EVALX_SRC = src
        bench.compile_evalx()
    result: dict[str, Any] = {"trees": trees, "cells": args.cells, "rounds": args.rounds, "load_before": os.getloadavg()}
    for workload in args.only.split(","):
        result[workload] = found = measure(workload, trees, args.rounds, args.cells)
        print(
            f"{workload}: median ratio to the bare loop "
            + ", ".join(f"{name} {found[name]['ratio']:.3f} ({found[name]['cpu_s']:.2f} CPU s)" for name in trees),
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
