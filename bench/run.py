"""evalx's benchmarks, each side by side with its reference in the same run.

    python bench/run.py [--quick] [--only throughput,latency,...] [--repeats N]

Prints a table and writes ``bench/out/results.json`` (gitignored). Every
evalx figure is measured on the process as a whole (``evalx run -c <generated
config> --no-cache -q``, wall time from spawn to exit, peak RSS from
``os.wait4``), against a fast local fake server (bench/fake_server.py) in
its own process:

- throughput: 10,000 provider cells and 10,000 engine cells at zero server
  latency, concurrency 10 and 50, against ``bench/bare_loop.py`` (a bare
  aiohttp loop, also a whole process) on the same server, same N, same
  concurrency; cells/s and the ratio (target >= 0.4 at concurrency 50);
- provider_distinct: the throughput measure at concurrency 50 with **each
  case its own assertion**: case i asserts ``contains: "Reference: case i."``,
  which the fake server (``--echo``) puts in the answer to case i only, so
  10,000 distinct specs are validated, scored and really pass (the throughput
  projects repeat one spec, which a cache makes free); against the bare loop
  on the same echoing server (target ratio >= 0.4);
- latency-bound: 1,000 provider cells at 200 ms server latency, concurrency
  50; the run phase (``duration_s`` in summary.json: first cell started to
  last result written) and the whole process against the ideal
  N x 0.2 / 50 = 4 s (target: run phase <= 1.1 x ideal);
- python-callable overhead: 20,000 cells of an instant callable;
  (wall of ``evalx run`` - wall of ``evalx validate`` on the same config) / N,
  i.e. everything a run adds on top of loading and validating the config and
  its 20,000 cases: planning, executing, scoring, writing results.jsonl,
  summary, JUnit and HTML (target <= 100 µs/cell);
- memory: 100,000 cells of an instant callable with small outputs, peak RSS
  of the ``evalx run`` process (target <= 300 MB);
- startup: ``evalx --help`` and ``evalx validate`` on a 1,000-case config,
  best of 5, next to a bare ``python -c pass`` (target: --help <= 0.3 s);
- reports: writing results.jsonl (out of order, then reordered), summary
  (json + txt), JUnit and HTML for the 10,000 cells of the provider run,
  in-process, next to a plain ``json.dumps`` of the same results
  (target <= 5 s).

Before measuring, evalx's bytecode is compiled once (:func:`compile_evalx`), as
installing it does. ``--quick`` divides every cell count by 5 and measures each pair once (a
smoke run; the recorded figures come from the full run). Numbers depend on
the machine; bench/RESULTS.md records them with the machine they came from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"
WORK = OUT / "work"
sys.path.insert(0, str(BENCH))

from fake_server import FakeServer  # noqa: E402

BIN = Path(sys.executable).parent
EVALX = [str(BIN / "evalx")] if (BIN / "evalx").exists() else [sys.executable, "-m", "evalx"]
EVALX_SRC = ""  # --evalx-src: run evalx from another source tree (a "before" copy)


@dataclass
class Proc:
    wall_s: float
    maxrss_mb: float  # os.wait4: the largest of the process and the children it reaped (Linux)
    returncode: int
    stdout: str
    stderr: str
    tree_rss_mb: float | None = None  # sampled: peak of the sum of RSS over the process and its descendants
    tree_pss_mb: float | None = None  # sampled: peak of the sum of PSS (shared pages split between sharers)
    processes: int = 1  # how many processes the tree had at most
    cpu_s: float = 0.0  # user + system CPU seconds of the process and the children it reaped (os.wait4)
    timed_out: bool = False  # killed at run_process's timeout_s


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/PID/task/TID/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def _kb(path: str, field: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler:
    """Samples the memory of a process tree every ``interval`` seconds, in a thread of the bench process.

    A forked child starts with its parent's pages mapped (shared copy-on-write), so the sum of RSS
    counts those pages once per process: an upper bound. PSS splits each shared page between the
    processes that map it, so the sum of PSS is the tree's real footprint.
    """

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        import threading

        self.pid, self.interval = pid, interval
        self.rss = self.pss = 0
        self.processes = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = _tree(self.pid)
            rss = sum(_kb(f"/proc/{p}/status", "VmRSS:") for p in pids)
            pss = sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            self.processes = max(self.processes, len(pids))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_process(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    sample_memory: bool = False,
    extra_env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> Proc:
    """Run ``cmd`` to completion: wall time from spawn to exit and peak RSS.

    ``os.wait4`` gives the largest peak RSS of the process and of the children it waited for;
    with ``sample_memory`` the whole process tree is also sampled every 5 ms (:class:`TreeSampler`).
    The environment is this one without ``OPENAI_*``/``ANTHROPIC_*``/``EVALX_*``, plus ``extra_env``.
    ``timeout_s``: past it the process's whole session is killed (``Proc.timed_out``).
    """
    import signal
    import tempfile
    import threading

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "EVALX_"))}
    env["PYTHONUNBUFFERED"] = "1"
    if EVALX_SRC:
        env["PYTHONPATH"] = EVALX_SRC
    env.update(extra_env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=timeout_s is not None
        )
        sampler = TreeSampler(p.pid) if sample_memory else None
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout_s, kill) if timeout_s is not None else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if timer is not None:
            timer.cancel()
        if sampler is not None:
            sampler.stop()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        proc = Proc(
            wall,
            usage.ru_maxrss / 1024,
            p.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            cpu_s=usage.ru_utime + usage.ru_stime,
            timed_out=expired.is_set(),
        )
        if sampler is not None:
            proc.tree_rss_mb, proc.tree_pss_mb, proc.processes = sampler.rss / 1024, sampler.pss / 1024, sampler.processes
        return proc


# -- generated configs ------------------------------------------------------------


def make_project(name: str, kind: str, n: int, *, url: str = "", concurrency: int = 50, distinct: bool = False) -> Path:
    """A config + dataset of ``n`` cases for one target of ``kind`` (provider, engine, python); returns the config path.

    ``distinct``: case i asserts ``contains: "Reference: case i."`` (what the echoing fake server answers
    to case i) instead of every case asserting ``contains: "4"``.
    """
    d = WORK / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    with open(d / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            check = {"type": "contains", "value": f"Reference: case {i}."} if distinct else {"type": "contains", "value": "4"}
            f.write(
                json.dumps({"id": f"case-{i:06d}", "input": f"What is 2 + 2? (case {i})", "category": f"cat-{i % 7}", "assert": [check]})
                + "\n"
            )
    if kind == "provider":
        target = f"{{id: model, type: provider, provider: openai, model: bench-model, base_url: '{url}/v1'}}"
    elif kind == "engine":
        target = f"{{id: engine, type: engine, url: '{url}'}}"
    else:
        (d / "agent.py").write_text("def answer(question):\n    return 'The answer is 4.'\n", encoding="utf-8")
        target = "{id: agent, type: python, callable: 'agent.py:answer'}"
    config = d / "evalconfig.yaml"
    config.write_text(
        f"""version: 1
name: bench-{name}
defaults: {{concurrency: {concurrency}, timeout_s: 120, retries: 0}}
targets:
  - {target}
datasets:
  - {{id: bench, path: cases.jsonl}}
assert:
  - {{type: completed}}
output: {{dir: runs}}
""",
        encoding="utf-8",
    )
    return config


def evalx_run(config: Path, *extra: str, sample_memory: bool = False) -> tuple[Proc, dict[str, Any]]:
    runs = config.parent / "runs"
    if runs.exists():
        shutil.rmtree(runs)
    proc = run_process([*EVALX, "run", "-c", str(config), "--no-cache", "-q", *extra], cwd=config.parent, sample_memory=sample_memory)
    if proc.returncode != 0:
        raise SystemExit(f"evalx run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    (run_dir,) = list(runs.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    # cell lines: results format v2 also has a run record and case records ({"kind": ...}), v1 has neither
    n = sum(1 for line in open(run_dir / "results.jsonl", "rb") if not line.startswith(b'{"kind":'))
    if n != summary["totals"]["cells"] or summary["totals"]["pass"] != n:
        raise SystemExit(f"evalx run of {config}: {n} cell lines, totals {summary['totals']}")
    for name in ("summary.txt", "junit.xml", "report.html"):
        if not (run_dir / name).is_file():
            raise SystemExit(f"evalx run of {config}: {name} missing")
    return proc, {"summary": summary, "run_dir": run_dir}


def bare_loop(url: str, kind: str, n: int, concurrency: int) -> tuple[Proc, dict[str, Any]]:
    proc = run_process([sys.executable, str(BENCH / "bare_loop.py"), "--url", url, "--kind", kind, "-n", str(n), "-c", str(concurrency)])
    if proc.returncode != 0:
        raise SystemExit(f"bare loop failed: {proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    if data["failures"]:
        raise SystemExit(f"bare loop: {data['failures']} failures")
    return proc, data


# -- benchmarks ---------------------------------------------------------------------


def bench_throughput(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    n = args.scale(10_000)
    with FakeServer() as server:
        bare_loop(server.url, "provider", 500, 10)  # warm-up
        for kind in ("provider", "engine"):
            for c in (10, 50):
                config = make_project(f"{kind}-c{c}", kind, n, url=server.url, concurrency=c)
                evalx_rates, bare_rates, server_busy = [], [], []
                for _ in range(args.repeats):  # interleaved, so drift hits both alike
                    before = server.stats()
                    proc, run = evalx_run(config)
                    after = server.stats()
                    evalx_rates.append(n / proc.wall_s)
                    served = after["requests"] - before["requests"]
                    server_busy.append((after["cpu_s"] - before["cpu_s"]) / proc.wall_s)  # cores used by the server
                    extra.setdefault("last_runs", {})[f"{kind}-c{c}"] = str(run["run_dir"])
                    assert served == n, f"server saw {served} requests for {n} cells"
                    bproc, _ = bare_loop(server.url, kind, n, c)
                    bare_rates.append(n / bproc.wall_s)
                ev, ba = statistics.median(evalx_rates), statistics.median(bare_rates)
                target = 0.4 if c == 50 else None
                rows.append(
                    {
                        "benchmark": f"throughput {kind} c={c}",
                        "n": n,
                        "evalx": round(ev, 1),
                        "reference": round(ba, 1),
                        "unit": "cells/s",
                        "ratio": round(ev / ba, 3),
                        "target": f"ratio >= {target}" if target else "-",
                        "met": (ev / ba >= target) if target else None,
                        "note": f"bare aiohttp loop; server used {statistics.median(server_busy):.2f} core during the evalx run",
                        "samples": {"evalx": [round(x, 1) for x in evalx_rates], "reference": [round(x, 1) for x in bare_rates]},
                    }
                )
                print(_line(rows[-1]), flush=True)


def bench_provider_distinct(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    """Throughput at c=50 with a distinct ``contains`` value per case, against the bare loop on the same echoing server."""
    n, c = args.scale(10_000), 50
    with FakeServer(echo=True) as server:
        bare_loop(server.url, "provider", 500, 10)  # warm-up
        config = make_project(f"provider-distinct-c{c}", "provider", n, url=server.url, concurrency=c, distinct=True)
        evalx_rates, bare_rates, ratios, cpu = [], [], [], []
        for _ in range(args.repeats):  # interleaved: each ratio is evalx over the bare loop of the same round
            before = server.stats()
            proc, _ = evalx_run(config)
            served = server.stats()["requests"] - before["requests"]
            assert served == n, f"server saw {served} requests for {n} cells"
            bproc, _ = bare_loop(server.url, "provider", n, c)
            cpu.append((proc.cpu_s, bproc.cpu_s))
            evalx_rates.append(n / proc.wall_s)
            bare_rates.append(n / bproc.wall_s)
            ratios.append(evalx_rates[-1] / bare_rates[-1])
    ev, ba, ratio = statistics.median(evalx_rates), statistics.median(bare_rates), statistics.median(ratios)
    rows.append(
        {
            "benchmark": f"throughput provider distinct asserts c={c}",
            "n": n,
            "evalx": round(ev, 1),
            "reference": round(ba, 1),
            "unit": "cells/s",
            "ratio": round(ratio, 3),
            "target": "ratio >= 0.4",
            "met": ratio >= 0.4,
            "note": "each case its own contains value; median of same-round ratios "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + "; CPU s evalx/bare "
            + ", ".join(f"{e:.2f}/{b:.2f}" for e, b in cpu)
            + f"; load {os.getloadavg()[0]:.2f}; bare aiohttp loop, same echoing server",
            "samples": {
                "evalx": [round(x, 1) for x in evalx_rates],
                "reference": [round(x, 1) for x in bare_rates],
                "ratios": [round(r, 3) for r in ratios],
                "cpu_s": [[round(e, 3), round(b, 3)] for e, b in cpu],
            },
        }
    )
    print(_line(rows[-1]), flush=True)


def bench_latency(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    n, c, latency = args.scale(1_000), 50, 0.2
    ideal = n * latency / c
    with FakeServer(latency_ms=latency * 1000) as server:
        config = make_project("latency", "provider", n, url=server.url, concurrency=c)
        phases, walls, bare = [], [], []
        for _ in range(args.repeats):
            proc, run = evalx_run(config)
            phases.append(run["summary"]["duration_s"])
            walls.append(proc.wall_s)
            bare.append(bare_loop(server.url, "provider", n, c)[0].wall_s)
    phase, wall, ref = statistics.median(phases), statistics.median(walls), statistics.median(bare)
    rows.append(
        {
            "benchmark": "latency-bound run phase (200 ms, c=50)",
            "n": n,
            "evalx": round(phase, 3),
            "reference": round(ideal, 3),
            "unit": "s",
            "ratio": round(phase / ideal, 3),
            "target": "ratio <= 1.1",
            "met": phase / ideal <= 1.1,
            "note": "reference: ideal N x 0.2 / 50; run phase = summary duration_s",
        }
    )
    print(_line(rows[-1]), flush=True)
    rows.append(
        {
            "benchmark": "latency-bound whole process (200 ms, c=50)",
            "n": n,
            "evalx": round(wall, 3),
            "reference": round(ref, 3),
            "unit": "s",
            "ratio": round(wall / ideal, 3),
            "target": "-",
            "met": None,
            "note": f"reference: bare aiohttp loop process; ratio vs ideal {ideal:g} s (bare loop: {ref / ideal:.3f})",
        }
    )
    print(_line(rows[-1]), flush=True)


def bench_python(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    n = args.scale(20_000)
    config = make_project("python", "python", n, concurrency=8)
    runs, validates, phases = [], [], []
    for _ in range(args.repeats):
        validate = run_process([*EVALX, "validate", "-c", str(config)], cwd=config.parent)
        assert validate.returncode == 0, validate.stderr
        proc, run = evalx_run(config)
        runs.append(proc.wall_s)
        validates.append(validate.wall_s)
        phases.append(run["summary"]["duration_s"])
    wall, val = min(runs), min(validates)
    per_cell = (wall - val) / n * 1e6
    rows.append(
        {
            "benchmark": "python-callable overhead",
            "n": n,
            "evalx": round(per_cell, 1),
            "reference": round(val, 3),
            "unit": "µs/cell",
            "ratio": None,
            "target": "<= 100 µs/cell",
            "met": per_cell <= 100,
            "note": f"(run {wall:.2f} s - validate {val:.2f} s) / N, best of {args.repeats}; run phase alone {min(phases) / n * 1e6:.1f} µs/cell",
        }
    )
    print(_line(rows[-1]), flush=True)


def bench_memory(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    n = args.scale(100_000)
    config = make_project("memory", "python", n, concurrency=8)
    validate = run_process([*EVALX, "validate", "-c", str(config)], cwd=config.parent)
    proc, _ = evalx_run(config, sample_memory=True)
    shutil.rmtree(config.parent / "runs")  # ~100 MB of results and reports
    # judged on the largest of: wait4's peak (largest single process) and the sampled peak of the
    # SUM of RSS over evalx and its children (shared pages counted in each: an upper bound)
    peak = max(proc.maxrss_mb, proc.tree_rss_mb or 0.0)
    rows.append(
        {
            "benchmark": "memory: peak RSS of evalx run (+children)",
            "n": n,
            "evalx": round(peak, 1),
            "reference": round(validate.maxrss_mb, 1),
            "unit": "MB",
            "ratio": None,
            "target": "<= 300 MB",
            "met": peak <= 300,
            "note": (
                f"reference: evalx validate (config + {n} cases loaded); largest process {proc.maxrss_mb:.0f} MB (wait4), "
                f"sum of RSS over {proc.processes} processes {proc.tree_rss_mb or 0:.0f} MB, sum of PSS {proc.tree_pss_mb or 0:.0f} MB "
                f"(sampled every 5 ms); run wall {proc.wall_s:.1f} s"
            ),
            "maxrss_mb": round(proc.maxrss_mb, 1),
            "tree_rss_mb": round(proc.tree_rss_mb or 0, 1),
            "tree_pss_mb": round(proc.tree_pss_mb or 0, 1),
        }
    )
    print(_line(rows[-1]), flush=True)


def bench_startup(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    bare = min(run_process([sys.executable, "-c", "pass"]).wall_s for _ in range(5))
    helps = [run_process([*EVALX, "--help"]) for _ in range(5)]
    assert all(h.returncode == 0 for h in helps)
    best = min(h.wall_s for h in helps)
    rows.append(
        {
            "benchmark": "startup: evalx --help",
            "n": 1,
            "evalx": round(best, 3),
            "reference": round(bare, 3),
            "unit": "s",
            "ratio": None,
            "target": "<= 0.3 s",
            "met": best <= 0.3,
            "note": "best of 5; reference: python -c pass",
        }
    )
    print(_line(rows[-1]), flush=True)
    config = make_project("validate", "python", 1_000)
    vals = [run_process([*EVALX, "validate", "-c", str(config)], cwd=config.parent) for _ in range(5)]
    assert all(v.returncode == 0 for v in vals), vals[0].stderr
    rows.append(
        {
            "benchmark": "startup: evalx validate (1,000 cases)",
            "n": 1000,
            "evalx": round(min(v.wall_s for v in vals), 3),
            "reference": round(bare, 3),
            "unit": "s",
            "ratio": None,
            "target": "-",
            "met": None,
            "note": "best of 5; reference: python -c pass",
        }
    )
    print(_line(rows[-1]), flush=True)


def bench_reports(args: argparse.Namespace, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    """In-process: write the 10,000 results of a provider run again, then every report from them."""
    import evalx.reports.render as render
    from evalx.reports.writers import report_writers
    from evalx.results.store import ResultWriter, dumps, read_results
    from evalx.results.summary import SummaryBuilder

    n = args.scale(10_000)
    source = extra.get("last_runs", {}).get("provider-c50")
    if source is None:  # throughput not run: make a run to read
        with FakeServer() as server:
            _, run = evalx_run(make_project("provider-c50", "provider", n, url=server.url))
        source = str(run["run_dir"])
    results = list(read_results(Path(source) / "results.jsonl"))
    stored = json.loads((Path(source) / "summary.json").read_text())
    shuffled = results[:]
    random.Random(1).shuffle(shuffled)  # completion order is not matrix order: the writer reorders
    out = WORK / "reports"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    t0 = time.perf_counter()
    with open(out / "plain.jsonl", "w", encoding="utf-8") as f:
        for r in results:
            f.write(dumps(r) + "\n")
    reference = time.perf_counter() - t0

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    writer = ResultWriter(out)
    for r in shuffled:
        writer.write(r)
    writer.close(reorder=True)
    timings["results.jsonl"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    builder = SummaryBuilder(stored["run_id"], stored.get("name", ""), stored.get("started_at", ""))
    for r in read_results(out / "results.jsonl"):
        builder.add(r)
    summary = builder.finish(stored.get("finished_at", ""), float(stored.get("duration_s", 0.0)))
    timings["summary (built)"] = time.perf_counter() - t0
    # as `evalx run` and `evalx report` write them: summary.json + summary.txt, then junit.xml and report.html
    # from one read of results.jsonl (reports/render.py)
    t0 = time.perf_counter()
    render.write_reports(out, summary)  # type: ignore[arg-type]  # (the figures alone: no baseline or gates)
    timings["summary, junit.xml + report.html (one read)"] = time.perf_counter() - t0
    total = sum(timings.values())
    alone: dict[str, float] = {}  # each report on its own from the file, for the breakdown (not in the total)
    # each writer rebuilt alone from the file, as `evalx report` does for one that could not stream (reports/writers.py)
    for label, writer in zip(("junit.xml", "report.html"), report_writers(out, summary)):  # type: ignore[arg-type]
        t0 = time.perf_counter()
        writer.rebuild(out / "results.jsonl")
        writer.close()
        alone[label] = time.perf_counter() - t0
    rows.append(
        {
            "benchmark": "reports: results + summary + JUnit + HTML",
            "n": len(results),
            "evalx": round(total, 3),
            "reference": round(reference, 3),
            "unit": "s",
            "ratio": None,
            "target": "<= 5 s",
            "met": total <= 5.0,
            "note": "; ".join(f"{k} {v:.2f} s" for k, v in timings.items())
            + " (alone: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in alone.items())
            + "); reference: json lines only",
        }
    )
    print(_line(rows[-1]), flush=True)


BENCHMARKS = {
    "throughput": bench_throughput,
    "provider_distinct": bench_provider_distinct,
    "latency": bench_latency,
    "python": bench_python,
    "memory": bench_memory,
    "startup": bench_startup,
    "reports": bench_reports,
}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)


def _line(row: dict[str, Any]) -> str:
    met = {True: "yes", False: "NO", None: "-"}[row["met"]]
    return f"{row['benchmark']:<46} {row['n']:>7,} {_fmt(row['evalx']):>10} {_fmt(row['reference']):>10} {row['unit']:<8} {_fmt(row['ratio']):>6}  {row['target']:<16} {met:<4} {row['note']}"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    import aiohttp

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
    }


def compile_evalx() -> None:
    """Compile the measured evalx's bytecode once, as installing it does.

    An editable install (or ``--evalx-src``) under ``PYTHONDONTWRITEBYTECODE``
    (set in some sandboxes) never caches bytecode, so every evalx process would
    compile its ~60 modules again (~0.05-0.1 s a process here) — a cost no
    installed evalx pays, and the bare loop, whose aiohttp is compiled, does not
    pay either. ``compileall`` writes the cache whatever that variable says.
    """
    import compileall
    import importlib.util

    if EVALX_SRC:
        package = Path(EVALX_SRC) / "evalx"
    else:
        spec = importlib.util.find_spec("evalx")
        if spec is None or not spec.submodule_search_locations:
            return
        package = Path(next(iter(spec.submodule_search_locations)))
    compileall.compile_dir(str(package), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cell counts / 5, one measurement each (a smoke run)")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--repeats", type=int, help="measurements per pair (median/best taken); default 3, 1 with --quick")
    parser.add_argument("--evalx-src", help="run `python -m evalx` with PYTHONPATH=DIR (measure another source tree, e.g. before a fix)")
    parser.add_argument("--out", type=Path, default=OUT / "results.json", help="where to write the JSON (default bench/out/results.json)")
    parser.add_argument(
        "--work", type=Path, help="where the generated projects go (default bench/out/work; give each concurrent bench run its own)"
    )
    args = parser.parse_args()
    if args.work:
        global WORK
        WORK = args.work.resolve()
    if args.evalx_src:
        global EVALX, EVALX_SRC
        EVALX, EVALX_SRC = [sys.executable, "-m", "evalx"], str(Path(args.evalx_src).resolve())
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.scale = (lambda n: n // 5) if args.quick else (lambda n: n)
    WORK.mkdir(parents=True, exist_ok=True)
    compile_evalx()
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    info = machine()
    print(f"evalx benchmarks — {time.strftime('%Y-%m-%d %H:%M:%S %Z')} — {info['nproc']} cores, {info['cpu']}, Python {info['python']}")
    print(f"{'benchmark':<46} {'N':>7} {'evalx':>10} {'reference':>10} {'unit':<8} {'ratio':>6}  {'target':<16} {'met':<4} note")
    t0 = time.perf_counter()
    for name in args.only.split(","):
        BENCHMARKS[name.strip()](args, rows, extra)
    OUT.mkdir(exist_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "quick": args.quick,
        "repeats": args.repeats,
        "command": " ".join(["python", "bench/run.py", *sys.argv[1:]]),
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
    result["evalx_src"] = EVALX_SRC or None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    missed = [r["benchmark"] for r in rows if r["met"] is False]
    verdict = "every target met" if not missed else "MISSED: " + ", ".join(missed)
    if args.quick:  # fixed costs (startup, one measurement) weigh 5x more at 1/5 of the cells
        verdict += " (--quick: a smoke run; the targets are judged at full size, without --quick)"
    print(f"\n{len(rows)} rows, {verdict}; wrote {args.out} in {result['seconds']} s")


if __name__ == "__main__":
    main()
