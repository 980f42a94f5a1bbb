"""Instructions, not seconds: what an instant provider run costs, counted by callgrind whatever the machine's load.

    python bench/instructions.py [--src NAME=PATH ...] [--cells 1000,2000] [--bare]

Wall-clock ratios (bench/run.py, bench/ab.py) move with the load of a shared
machine; instruction counts do not. For each source tree (``--src``, the
folder holding ``evalx/``; default: the evalx this Python imports), this runs
``evalx run -q --no-cache`` of the provider-distinct project (bench/run.py's
``make_project``: each case its own ``contains``, against the echoing fake
server) under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``, at one
cell and at each count of ``--cells``, and prints the total instructions, the
instructions a cell (the slope between the two largest counts) and a 10,000-cell
estimate. ``--bare`` does the same for the bare aiohttp loop (bench/bare_loop.py).
Needs valgrind (Debian's package); each run takes 30-90 s.

The ratio of the 10,000-cell estimates (bare / evalx) tracks bench/run.py's
throughput ratio from below (instructions are not cycles: evalx's JSON and
dict work runs at a higher rate than the bare loop's socket calls).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as bench  # noqa: E402
from fake_server import FakeServer  # noqa: E402

_TOTAL = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def instructions(command: list[str], *, cwd: Path, src: str = "") -> int:
    """The instructions ``command`` ran (callgrind, ``PYTHONHASHSEED=0``); exits when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        if src:
            env["PYTHONPATH"] = src
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command], cwd=cwd, env=env, capture_output=True
        )
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-1500:]}")
        found = _TOTAL.search(out.read_bytes())
        if found is None:
            raise SystemExit(f"no instruction total in {out}")
        return int(found.group(1))


def measure_evalx(name: str, src: str, url: str, counts: list[int]) -> dict[int, int]:
    bench.EVALX_SRC = src
    bench.compile_evalx()
    found: dict[int, int] = {}
    for n in counts:
        config = bench.make_project(f"instructions-{name}-{n}", "provider", n, url=url, concurrency=50, distinct=True)
        runs = config.parent / "runs"
        command = [sys.executable, "-m", "evalx", "run", "-c", str(config), "--no-cache", "-q"]
        found[n] = instructions(command, cwd=config.parent, src=src)
        shutil.rmtree(runs, ignore_errors=True)
        print(f"  {name}: {n:>6,} cells  {found[n] / 1e9:.3f} G instructions", flush=True)
    return found


def measure_bare(url: str, counts: list[int]) -> dict[int, int]:
    found: dict[int, int] = {}
    for n in counts:
        command = [sys.executable, str(BENCH / "bare_loop.py"), "--url", url, "--kind", "provider", "-n", str(n), "-c", "50"]
        found[n] = instructions(command, cwd=BENCH)
        print(f"  bare loop: {n:>6,} cells  {found[n] / 1e9:.3f} G instructions", flush=True)
    return found


def summarize(name: str, found: dict[int, int]) -> tuple[float, float]:
    """``name``'s instructions a cell (slope of the two largest counts) and its 10,000-cell estimate; printed."""
    small, large = sorted(found)[-2:]
    per_cell = (found[large] - found[small]) / (large - small)
    estimate = found[large] + per_cell * (10_000 - large)
    print(f"{name:<12} one cell {found[min(found)] / 1e9:.3f} G · {per_cell / 1e6:.3f} M a cell · 10,000 cells ≈ {estimate / 1e9:.2f} G")
    return per_cell, estimate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="NAME=PATH: a source tree to measure (repeatable)")
    parser.add_argument("--cells", default="1000,2000", help="comma-separated cell counts (the two largest give the slope)")
    parser.add_argument("--bare", action="store_true", help="measure the bare aiohttp loop too")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    counts = sorted({1, *(int(c) for c in args.cells.split(","))})
    if len(counts) < 3:
        raise SystemExit("--cells needs two counts above 1")
    trees = dict(s.split("=", 1) for s in args.src) or {"evalx": ""}
    bench.WORK.mkdir(parents=True, exist_ok=True)
    estimates: dict[str, float] = {}
    with FakeServer(echo=True) as server:
        results = {name: measure_evalx(name, str(Path(src).resolve()) if src else "", server.url, counts) for name, src in trees.items()}
        if args.bare:
            results["bare loop"] = measure_bare(server.url, counts)
    print()
    for name, found in results.items():
        estimates[name] = summarize(name, found)[1]
    if "bare loop" in estimates:
        for name in trees:
            print(f"{name}: bare / evalx instructions at 10,000 cells {estimates['bare loop'] / estimates[name]:.3f}")


if __name__ == "__main__":
    main()
