"""Each fast path against its plain version, on an instant workload and on one with a real model's latency (issue 29, item 6).

    python bench/fast_paths.py [--rounds 5] [--only instant,realistic,...] [--variants a,b,a+b,tree=SRC] [--quick] [--stages]

A *variant* is a run of the same evalx tree with one fast path swapped for the
plain code it stands in for (:data:`PLAIN`: the fast paths kept after issue
29; the ones retired were measured by this script at commit d1c402a, whose
``PLAIN`` still has them, against the tree before, 2566c42), patched in
before ``evalx`` starts, in its own process (``python bench/fast_paths.py
--child VARIANT -- run -c ...``); ``a+b`` swaps both; ``tree=SRC`` runs another
source tree as it is (a before/after of several changes); ``fast`` is the
tree as it is. Workloads, each against
bench/fake_server.py in its own process (``--echo``: each case asserts its own
``contains`` value, so every spec is distinct and really passes):

- ``instant``: 5,000 provider cells, server latency 0, concurrency 50 (what
  ``bench/run.py``'s provider_distinct measures, at half the size);
- ``realistic``: 1,000 provider cells, each request answered after a uniform
  random 50-500 ms (``--latency-ms 50 --latency-max-ms 500``), concurrency 50;
- ``python``: 20,000 cells of an instant Python callable;
- ``python_case``: the same, the callable taking ``case`` (the case's mapping per cell);
- ``validate``: ``evalx validate`` of the instant workload's config (5,000 cases, each its own spec);
- ``report``: ``evalx report`` of a stored 10,000-cell provider run
  (results.jsonl read back, summary, junit.xml, report.html).

Every variant of a workload runs once a round, in a shuffled order, ``fast``
twice; a figure is the median over rounds of the process's CPU seconds (user
+ system, ``os.wait4``) and wall seconds; the gain of a fast path is
``(plain - fast) / plain`` of those medians. The machine is shared: read CPU
seconds first, and only compare figures of one run. ``--stages`` times, in
this process, only the part of a cell (or of loading) each fast path sits in
(:data:`STAGE_OF`), plain and fast interleaved, the least CPU of the rounds:
less noise, but it misses what a path costs the rest of the run (its garbage).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
WORK = BENCH / "out" / "fast_paths"

# -- the plain versions -------------------------------------------------------------------

_UNDO: list[tuple[Any, str, Any]] = []


def _set(owner: Any, name: str, value: Any) -> None:
    """``setattr(owner, name, value)``, undone by :func:`restore`."""
    _UNDO.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def restore() -> None:
    """Undo every patch :func:`_set` made (the in-process stages apply one variant at a time)."""
    while _UNDO:
        owner, name, value = _UNDO.pop()
        setattr(owner, name, value)


def _plain_openai_body() -> None:
    """The shipped OpenAI body through its Jinja template and json.loads; the client encodes it."""
    from evalx.targets import definitions

    _set(definitions, "_openai_request", lambda scope: definitions._SLOW)


def _plain_response_readers() -> None:
    """Every response expression through Jinja's compiled expression."""
    from evalx.targets import definitions

    _set(definitions, "_fast_path", lambda source, slow=None: None)


def _plain_case_validation() -> None:
    """Every dataset case validated by jsonschema."""
    from evalx.datasets import loader

    _set(loader, "_plainly_valid", lambda data: False)


def _plain_spec_validation() -> None:
    """Every assertion spec validated by jsonschema (no compiled plain-Python check)."""
    from evalx.datasets import loader

    _set(loader, "plainly_valid", lambda atype, spec: False)


def _plain_junit_single() -> None:
    """A case of one cell rendered through the element path (ElementTree) like any other case."""
    from evalx.reports import junit

    def single(self: Any, suite: Any, classname: str, case_id: str, result: Any, seconds: float) -> None:
        index = result.get("index")
        self.case(suite, junit._key(result), [junit._repeat(result, seconds, (float(index or 0), 0))])

    _set(junit._SuiteWriter, "single", single)


def _plain_case_to_dict() -> None:
    """Case.to_dict through dataclasses.asdict (what it was)."""
    from dataclasses import asdict

    from evalx.models import Case

    def to_dict(self: Case) -> dict[str, Any]:
        out = asdict(self)
        for key in ("turns", "tool_results", "simulate", "context"):
            if out[key] is None:
                del out[key]
        out["assert"] = out.pop("asserts")
        return out

    _set(Case, "to_dict", to_dict)


#: variant name -> the patch that swaps the fast path for its plain version
PLAIN: dict[str, Callable[[], None]] = {
    "openai_body": _plain_openai_body,
    "response_readers": _plain_response_readers,
    "case_validation": _plain_case_validation,
    "spec_validation": _plain_spec_validation,
    "case_to_dict": _plain_case_to_dict,
    "junit_single": _plain_junit_single,
}

#: the variants worth running on each workload (the others do not touch its path)
RELEVANT: dict[str, list[str]] = {
    "instant": ["openai_body", "response_readers", "case_validation", "spec_validation", "junit_single"],
    "realistic": ["openai_body", "response_readers", "case_validation", "spec_validation", "junit_single"],
    "python": ["case_validation", "spec_validation", "junit_single"],
    "python_case": ["case_to_dict"],
    "validate": ["case_validation", "spec_validation"],
    "report": ["junit_single"],
}


def child(variant: str, argv: list[str]) -> None:
    """In the measured process: apply the variant's patch, then run ``evalx`` with ``argv``."""
    for name in variant.split("+"):
        if name != "fast":
            PLAIN[name]()
    from evalx.cli import main

    sys.argv = ["evalx", *argv]
    main()


# -- measuring ------------------------------------------------------------------------------


def run(variant: str, argv: list[str], cwd: Path) -> tuple[float, float]:
    """``(cpu_s, wall_s)`` of one evalx process running ``argv`` with ``variant`` patched in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "EVALX_"))}
    if variant.startswith("tree="):  # another source tree as it is (``tree=/tmp/before/src``): a before/after of several changes
        env["PYTHONPATH"], variant = variant[len("tree=") :], "fast"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--", *argv]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{variant} {' '.join(argv)} failed: {err.read().decode(errors='replace')[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def check_run(config: Path, n: int) -> Path:
    """The one run under ``config``'s runs/ folder, every one of its ``n`` cells passed."""
    (run_dir,) = list((config.parent / "runs").iterdir())
    totals = json.loads((run_dir / "summary.json").read_text())["totals"]
    if totals["cells"] != n or totals["pass"] != n:
        raise SystemExit(f"{config}: {totals}")
    return run_dir


def measure(workload: str, variants: list[str], rounds: int, one: Callable[[str], tuple[float, float]]) -> dict[str, Any]:
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in ["fast", *variants]}
    rng = random.Random(29)
    for r in range(rounds):
        order = ["fast", *variants, "fast"]
        rng.shuffle(order)
        for variant in order:
            samples[variant].append(one(variant))
        print(f"  {workload} round {r + 1}/{rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
    fast_cpu = statistics.median(c for c, _ in samples["fast"])
    fast_wall = statistics.median(w for _, w in samples["fast"])
    table: dict[str, Any] = {"fast": {"cpu_s": fast_cpu, "wall_s": fast_wall, "samples": samples["fast"]}}
    for v in variants:
        cpu = statistics.median(c for c, _ in samples[v])
        wall = statistics.median(w for _, w in samples[v])
        table[v] = {"cpu_s": cpu, "wall_s": wall, "cpu_gain": (cpu - fast_cpu) / cpu, "wall_gain": (wall - fast_wall) / wall,
                    "samples": samples[v]}  # fmt: skip
    return table


# -- in-process stages: each fast path's own CPU time, on the workload's real inputs ------------------

#: the stage of a run each variant's fast path sits in
STAGE_OF: dict[str, str] = {
    "openai_body": "cell",
    "response_readers": "cell",
    "case_validation": "load",
    "spec_validation": "load",
    "case_to_dict": "case_to_dict",
    "junit_single": "report",
}


def _stage_runner(stage: str, config: Path, run_dir: Path, url: str) -> Callable[[], None]:
    """A function doing ``stage`` once over the instant workload's 5,000 cells (fresh caches each time)."""
    import asyncio

    from fake_server import echo_response

    from evalx.config.loader import load_config
    from evalx.datasets import loader
    from evalx.execution.plan import Selection, build_plan
    from evalx.models import safe_trajectory
    from evalx.targets.base import RunContext
    from evalx.targets.provider import ProviderRequest, ProviderTarget
    from evalx.targets.settings import TargetSettings
    from evalx.targets.transport.http import HttpClient, HttpResponse

    def cells() -> list[Any]:
        loader._valid_specs.clear()
        return list(build_plan(load_config(config), Selection()).cells)

    if stage == "load":

        def load() -> None:
            cells()

        return load
    planned = cells()
    if stage == "case_to_dict":

        def to_dicts() -> None:
            for cell in planned * 4:
                cell.case.to_dict()

        return to_dicts
    if stage == "report":  # evalx report of the stored run: summary, junit.xml, report.html
        import contextlib
        import io

        from evalx.cli import main as cli

        def report() -> None:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                cli.main(["report", str(run_dir)], standalone_mode=False)

        return report
    if stage == "cell":  # render the request, encode it, read the (echoed) answer, make the trajectory safe: no network
        spec = {"id": "model", "type": "provider", "provider": "openai", "model": "bench-model", "base_url": f"{url}/v1"}
        headers = {"Content-Type": "application/json"}

        async def fake_send(request: ProviderRequest) -> HttpResponse:
            data, _ = HttpClient._encode(request.body, None, request.data)
            assert data is not None
            text = echo_response(data).decode()
            return HttpResponse(200, headers, text, json.loads(text), request.url)

        async def invoke_all() -> None:
            target = ProviderTarget(spec, TargetSettings(concurrency=50, timeout_s=120, retries=0))
            run = RunContext(run_id="r", config_dir=config.parent)
            await target.start(run)
            assert target.definition is not None
            target.definition._expressions.clear()  # readers made again, under this variant
            target._readers = None
            target._send = fake_send  # type: ignore[method-assign]
            try:
                for cell in planned:
                    traj = safe_trajectory(await target.invoke(cell, run))
                    assert "Reference: case" in traj.text
            finally:
                await target.aclose()

        return lambda: asyncio.run(invoke_all())
    raise ValueError(stage)


def measure_stages(variants: list[str], rounds: int, config: Path, run_dir: Path, url: str) -> dict[str, Any]:
    """Per variant: the min over ``rounds`` of the CPU seconds of its stage, plain and fast, interleaved."""
    out: dict[str, Any] = {}
    rng = random.Random(6)
    for stage in sorted({STAGE_OF[v] for v in variants}):
        names = [v for v in variants if STAGE_OF[v] == stage]
        times: dict[str, list[float]] = {v: [] for v in ["fast", *names]}
        for _ in range(rounds):
            order = ["fast", *names]
            rng.shuffle(order)
            for variant in order:
                if variant != "fast":
                    PLAIN[variant]()
                try:
                    do = _stage_runner(stage, config, run_dir, url)
                    t0 = time.process_time()
                    do()
                    times[variant].append(time.process_time() - t0)
                finally:
                    restore()
        fast = min(times["fast"])
        out[stage] = {"fast_cpu_s": fast, "fast_samples": times["fast"]}
        print(f"stage {stage}: fast {fast:.3f} CPU s (min of {rounds})", flush=True)
        for v in names:
            plain = min(times[v])
            out[stage][v] = {"plain_cpu_s": plain, "saved_s": plain - fast, "samples": times[v]}
            print(f"  {v:18} plain {plain:.3f} CPU s: the fast path saves {plain - fast:+.3f} s", flush=True)
    return out


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="instant,realistic,python,python_case,validate,report")
    parser.add_argument(
        "--variants",
        default="",
        help="comma-separated names from PLAIN, a+b for both, tree=SRC for another tree (default: every relevant one)",
    )
    parser.add_argument("--quick", action="store_true", help="a fifth of the cells, two rounds")
    parser.add_argument("--instant-cells", type=int, default=5_000, help="cells of the instant workload")
    parser.add_argument("--out", default=str(BENCH / "out" / "fast_paths.json"))
    parser.add_argument("--stages", action="store_true", help="time each fast path's stage in this process instead (see STAGE_OF)")
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    import run as bench_run
    from fake_server import FakeServer
    from run import make_project

    bench_run.WORK = WORK
    scale = 5 if args.quick else 1
    rounds = 2 if args.quick else args.rounds
    chosen = [v for v in args.variants.split(",") if v]
    results: dict[str, Any] = {"load_before": os.getloadavg(), "rounds": rounds}

    def pick(workload: str) -> list[str]:
        """The variants to run on ``workload``: --variants as given (``a+b``: both plain at once), else every relevant one."""
        if chosen:
            return [v for v in chosen if v != "fast"]
        return RELEVANT[workload]

    if args.stages:
        n = 5_000 // scale
        with FakeServer(echo=True) as server:
            config = make_project("fp-stages", "provider", n, url=server.url, concurrency=50, distinct=True)
            shutil.rmtree(config.parent / "runs", ignore_errors=True)
            run("fast", ["run", "-c", str(config), "--no-cache", "-q"], config.parent)
            run_dir = check_run(config, n)
            results["stages"] = measure_stages(chosen or list(PLAIN), rounds, config, run_dir, server.url)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
        return

    for workload in args.only.split(","):
        print(f"{workload}: {', '.join(pick(workload))}", flush=True)
        if workload in ("instant", "realistic"):
            n = (args.instant_cells if workload == "instant" else 1_000) // scale
            latency = {} if workload == "instant" else {"latency_ms": 50, "latency_max_ms": 500}
            with FakeServer(echo=True, **latency) as server:  # type: ignore[arg-type]
                config = make_project(f"fp-{workload}", "provider", n, url=server.url, concurrency=50, distinct=True)

                def one(variant: str, config: Path = config, n: int = n) -> tuple[float, float]:
                    shutil.rmtree(config.parent / "runs", ignore_errors=True)
                    found = run(variant, ["run", "-c", str(config), "--no-cache", "-q"], config.parent)
                    check_run(config, n)
                    return found

                results[workload] = measure(workload, pick(workload), rounds, one)
        elif workload == "validate":
            config = make_project("fp-validate", "provider", 5_000 // scale, url="http://127.0.0.1:9", concurrency=50, distinct=True)

            def one(variant: str, config: Path = config) -> tuple[float, float]:
                return run(variant, ["validate", "-c", str(config)], config.parent)

            results[workload] = measure(workload, pick(workload), rounds, one)
        elif workload in ("python", "python_case"):
            n = 20_000 // scale
            config = make_project(f"fp-{workload}", "python", n, concurrency=50)
            if workload == "python_case":
                (config.parent / "agent.py").write_text("def answer(question, case):\n    return 'The answer is 4.'\n", encoding="utf-8")

            def one(variant: str, config: Path = config, n: int = n) -> tuple[float, float]:
                shutil.rmtree(config.parent / "runs", ignore_errors=True)
                found = run(variant, ["run", "-c", str(config), "--no-cache", "-q"], config.parent)
                check_run(config, n)
                return found

            results[workload] = measure(workload, pick(workload), rounds, one)
        elif workload == "report":
            n = 10_000 // scale
            with FakeServer(echo=True) as server:
                config = make_project("fp-report", "provider", n, url=server.url, concurrency=50, distinct=True)
                shutil.rmtree(config.parent / "runs", ignore_errors=True)
                run("fast", ["run", "-c", str(config), "--no-cache", "-q"], config.parent)
                run_dir = check_run(config, n)

            def one(variant: str, run_dir: Path = run_dir) -> tuple[float, float]:
                for name in ("junit.xml", "report.html"):
                    (run_dir / name).unlink(missing_ok=True)
                found = run(variant, ["report", str(run_dir)], run_dir)
                if not (run_dir / "junit.xml").is_file() or not (run_dir / "report.html").is_file():
                    raise SystemExit(f"{variant}: evalx report wrote no junit.xml / report.html")
                return found

            results[workload] = measure(workload, pick(workload), rounds, one)
        table = results[workload]
        print(f"{workload}: fast {table['fast']['cpu_s']:.3f} CPU s, {table['fast']['wall_s']:.3f} wall s", flush=True)
        for v, row in table.items():
            if v != "fast":
                print(f"  {v:18} {row['cpu_s']:.3f} CPU s ({row['cpu_gain']:+.1%})  {row['wall_s']:.3f} wall s ({row['wall_gain']:+.1%})")
    results["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
