"""evalx at scale (issue 16): N instant Python cells through a whole ``evalx run``, for one or more source trees side by side.

    python bench/scale.py --cells 100000 [--cells 1000000] [--evalx-src [LABEL=]DIR ...] [--repeats N]
                          [--resume-check] [--run-args ARGS] [--no-browser] [--work DIR] [--out FILE]

The project is what a new user would write (issue 16): ``cases.jsonl`` with N cases, case i
``{"id": "case-000000i", "input": "Say hello to user i", "assert": [{"type": "contains", "value": "user i"}]}``
(every 50th case asserts ``"nobody"`` instead, so 2 % fail and the reports have failures), ``agent.py``
``def echo(text): return 'Hello ' + text`` and ``evalconfig.yaml`` with that one python target and that one
dataset, nothing else (default concurrency, default outputs). Each measurement is ``evalx run`` with no
flag (or ``--run-args``), in the project directory, as a subprocess: the installed ``evalx``, or ``python -m evalx`` with
``PYTHONPATH=DIR`` for each ``--evalx-src`` (e.g. a ``git archive`` of an older commit, to compare before
and after in the same invocation: trees and sizes are interleaved, each repeat runs every tree once).

Measured per run:

- peak RSS of the whole process tree: the sampled peak of the sum of RSS over ``evalx`` and its
  descendants every 5 ms (``bench/run.py``'s ``TreeSampler``; its sum of PSS beside it), and
  ``os.wait4``'s ``ru_maxrss`` (the largest single process);
- wall time of the whole command (spawn to exit) and per cell (µs), and the CPU time per cell
  (user + system of the process and its children, ``os.wait4``: steadier than wall time on a busy machine);
- bytes per cell of ``results.jsonl``; sizes of ``report.html`` and ``junit.xml``;
- the report's load time in headless Chromium (Playwright driving /usr/bin/chromium, never a
  downloaded build): from ``page.goto`` of the file:// URL until the ``load`` event has fired
  and the matrix has rows (``#mx-body tr.row``); skipped with a note if Playwright or Chromium is missing;
- the machine's load average before the run (the machine is shared: figures are noisy).

Every run is checked: exit status 0 or 1 (failures are expected), ``summary.json`` counts N cells,
and ``results.jsonl`` exists. A run that fails prints the tail of its stderr and its row says so.

``--resume-check`` (once per tree and size, after the repeats): starts ``evalx run``, polls
``results.jsonl`` until it holds at least N/2 lines, SIGKILLs the run's process group (the cells
the file then holds are counted and reported), runs ``evalx run --resume RUN_ID`` (measured like
a run) and then counts, with the tree's own
``evalx.results.store.read_results`` (in a subprocess with that tree on ``PYTHONPATH``), the cell
records of ``results.jsonl``: the check passes when the file holds exactly the N cell indexes
0..N-1 (records of another ``kind``, e.g. ``"case"``, are not counted).

Prints markdown tables and writes JSON to ``--out`` (default ``bench/out/scale.json``, gitignored).
Each run's directory is deleted once measured (a 1,000,000-cell run writes ~1 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as bench_run  # noqa: E402  (bench/run.py: TreeSampler, run_process, machine, compile_evalx)

OUT = BENCH / "out"
FAIL_EVERY = 50  # every 50th case asserts "nobody": 2 % of the cells fail
sys.path.insert(0, str(BENCH.parent / "tests"))
from browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (tests/browser.py: the one Chromium launch of tests and bench)
from browser import FALLBACK_ARGS as GPU_FALLBACK_ARGS  # noqa: E402

BROWSER_TIMEOUT_MS = 180_000

# run with the tree under test on PYTHONPATH: count the cell records of results.jsonl with its own reader
VERIFY = r"""
import json, sys
from pathlib import Path
from evalx.results import store
path, n = Path(sys.argv[1]), int(sys.argv[2])
problems = store.ReadProblems() if hasattr(store, "ReadProblems") else None
seen = bytearray(n)
records = distinct = out_of_range = other_kinds = 0
for r in (store.read_results(path, problems) if problems is not None else store.read_results(path)):
    if r.get("kind", "cell") != "cell":
        other_kinds += 1
        continue
    i = r.get("index")
    if type(i) is not int:
        continue
    records += 1
    if 0 <= i < n:
        if not seen[i]:
            seen[i] = 1
            distinct += 1
    else:
        out_of_range += 1
lines = sum(1 for _ in open(path, "rb"))
print(json.dumps({
    "lines": lines, "cell_records": records, "distinct": distinct, "out_of_range": out_of_range, "other_kinds": other_kinds,
    "duplicates": len(problems.duplicate_cells) if problems is not None else None,
    "unreadable_lines": len(problems.unreadable_lines) if problems is not None else None,
}))
"""


# -- the trees under test ------------------------------------------------------------------------


class Tree:
    """One evalx to measure: the installed one (``src`` None) or a source tree run with ``PYTHONPATH=src``."""

    def __init__(self, label: str, src: str | None) -> None:
        self.label, self.src = label, src

    @property
    def command(self) -> list[str]:
        if self.src is None:
            return list(bench_run.EVALX)
        return [sys.executable, "-m", "evalx"]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "EVALX_"))}
        env["PYTHONUNBUFFERED"] = "1"
        if self.src is not None:
            env["PYTHONPATH"] = self.src
        else:
            env.pop("PYTHONPATH", None)
        return env

    def select(self) -> None:
        """Point bench/run.py's ``run_process`` (which reads the module global) at this tree."""
        bench_run.EVALX_SRC = self.src or ""

    def compile(self) -> None:
        self.select()
        bench_run.compile_evalx()


def parse_tree(spec: str) -> Tree:
    label, sep, path = spec.partition("=")
    if not sep:
        label, path = spec, spec
    src = Path(path).resolve()
    if not (src / "evalx" / "__init__.py").is_file():
        raise SystemExit(f"--evalx-src {spec}: no evalx package in {src}")
    return Tree(label, str(src))


# -- the project ---------------------------------------------------------------------------------


def make_project(work: Path, n: int) -> Path:
    """The issue's project of ``n`` cases under ``work/cells-N`` (reused when already complete); returns its directory."""
    d = work / f"cells-{n}"
    done = d / ".complete"
    if done.exists():
        return d
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    with open(d / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            value = "nobody" if i % FAIL_EVERY == FAIL_EVERY - 1 else f"user {i}"
            f.write(
                json.dumps({"id": f"case-{i:07d}", "input": f"Say hello to user {i}", "assert": [{"type": "contains", "value": value}]})
                + "\n"
            )
    (d / "agent.py").write_text("def echo(text):\n    return 'Hello ' + text\n", encoding="utf-8")
    (d / "evalconfig.yaml").write_text(
        "version: 1\nname: scale\ntargets:\n  - {id: echo, type: python, callable: agent.py:echo}\ndatasets:\n  - {id: big, path: cases.jsonl}\n",
        encoding="utf-8",
    )
    done.write_text("", encoding="utf-8")
    return d


def expected_failures(n: int) -> int:
    return n // FAIL_EVERY


def clear_runs(project: Path) -> None:
    runs = project / "runs"
    if runs.exists():
        shutil.rmtree(runs)


def only_run_dir(project: Path) -> Path | None:
    runs = project / "runs"
    dirs = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return dirs[0] if len(dirs) == 1 else None


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def file_mb(path: Path) -> float | None:
    return round(path.stat().st_size / 1e6, 2) if path.is_file() else None


def check_summary(run_dir: Path, n: int) -> str | None:
    """None when summary.json counts ``n`` cells and the expected failures, else what is wrong."""
    try:
        totals = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["totals"]
    except (OSError, ValueError, KeyError) as e:
        return f"summary.json unreadable: {e}"
    if totals.get("cells") != n:
        return f"summary counts {totals.get('cells')} cells, not {n}"
    if totals.get("fail") != expected_failures(n) or totals.get("error"):
        return f"summary: {totals.get('fail')} failed, {totals.get('error')} errors (expected {expected_failures(n)} failed, 0 errors)"
    return None


# -- Chromium --------------------------------------------------------------------------------------


class Browser:
    """A headless Chromium through Playwright, started on first use; ``note`` says why it is unavailable."""

    def __init__(self, enabled: bool) -> None:
        self.note: str | None = None if enabled else "skipped (--no-browser)"
        self._pw: Any = None
        self._browser: Any = None
        self._args = list(CHROMIUM_ARGS)

    def _start(self) -> bool:
        if self.note is not None:
            return False
        if self._browser is not None:
            return True
        if not CHROMIUM.exists():
            self.note = f"skipped: {CHROMIUM} missing"
            return False
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            self.note = "skipped: Playwright not installed (pip install -e '.[browser]')"
            return False
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), args=self._args)
        except Exception as e:
            if "GPU process" not in str(e) or self._args != CHROMIUM_ARGS:
                self.note = f"skipped: Chromium did not start: {str(e).splitlines()[0]}"
                return False
            self._args = CHROMIUM_ARGS + GPU_FALLBACK_ARGS
            self._browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), args=self._args)
        return True

    def load_ms(self, report: Path) -> tuple[float | None, str]:
        """Milliseconds from ``goto`` to the ``load`` event with matrix rows shown; (None, why) when it did not load."""
        if not self._start():
            return None, self.note or ""
        for attempt in (1, 2):
            context = self._browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            errors: list[Any] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(e))
            try:
                t0 = time.perf_counter()
                page.goto(report.resolve().as_uri(), wait_until="load", timeout=BROWSER_TIMEOUT_MS)
                page.wait_for_selector("#mx-body tr.row", timeout=BROWSER_TIMEOUT_MS)
                ms = (time.perf_counter() - t0) * 1000
                note = f"{len(errors)} page errors: {str(errors[0])[:120]}" if errors else ""
                return ms, note
            except Exception as e:
                message = str(e).splitlines()[0][:200]
                gpu = "GPU process" in str(e)
                if attempt == 1 and gpu and self._args == CHROMIUM_ARGS:  # the fallback, then once more
                    self.close()
                    self._args = CHROMIUM_ARGS + GPU_FALLBACK_ARGS
                    self._start()
                    continue
                return None, f"did not load: {message}"
            finally:
                try:
                    context.close()
                except Exception:
                    pass
        return None, "did not load"

    def close(self) -> None:
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:
                pass
        if self._pw is not None:
            self._pw.stop()
        self._browser = self._pw = None


# -- one measurement -------------------------------------------------------------------------------


def measure_run(tree: Tree, project: Path, n: int, browser: Browser, extra: list[str]) -> dict[str, Any]:
    """One whole ``evalx run`` of the project: the row's figures, or the failure."""
    clear_runs(project)
    load = os.getloadavg()[0]
    tree.select()
    proc = bench_run.run_process([*tree.command, "run", *extra], cwd=project, sample_memory=True)
    row: dict[str, Any] = {
        "tree": tree.label,
        "cells": n,
        "ok": False,
        "load_avg": round(load, 2),
        "exit": proc.returncode,
        "wall_s": round(proc.wall_s, 2),
        "us_per_cell": round(proc.wall_s / n * 1e6, 1),
        "tree_rss_mb": round(proc.tree_rss_mb or 0, 1),
        "tree_pss_mb": round(proc.tree_pss_mb or 0, 1),
        "maxrss_mb": round(proc.maxrss_mb, 1),
        "processes": proc.processes,
        "cpu_s": round(proc.cpu_s, 2),
        "cpu_us_per_cell": round(proc.cpu_s / n * 1e6, 1),
    }
    run_dir = only_run_dir(project)
    problem = None
    if proc.returncode not in (0, 1):
        problem = f"exit {proc.returncode}"
    elif run_dir is None:
        problem = f"exit {proc.returncode}, no single run directory under runs/"
    else:
        problem = check_summary(run_dir, n)
    if problem is not None:
        row["note"] = f"FAILED: {problem}"
        print(f"  {tree.label} at {n:,} cells failed ({problem}); stderr tail:\n{tail(proc.stderr)}", file=sys.stderr, flush=True)
        clear_runs(project)
        return row
    assert run_dir is not None
    results = run_dir / "results.jsonl"
    row.update(
        ok=True,
        results_mb=file_mb(results),
        results_bytes_per_cell=round(results.stat().st_size / n, 1),
        report_html_mb=file_mb(run_dir / "report.html"),
        junit_xml_mb=file_mb(run_dir / "junit.xml"),
    )
    if (run_dir / "report.html").is_file():
        try:
            ms, note = browser.load_ms(run_dir / "report.html")
        except Exception as e:  # whatever Playwright raised: the row says so, the other figures stand
            ms, note = None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        row["chromium_load_ms"] = round(ms) if ms is not None else None
        if note:
            row["note"] = f"chromium: {note}"
    else:
        row["chromium_load_ms"] = None
        row["note"] = "no report.html"
    clear_runs(project)
    return row


def count_lines(handle: Any, state: dict[str, int]) -> int:
    """Lines in the growing ``path`` so far, reading only what was appended since the last call."""
    while True:
        chunk = handle.read(1 << 20)
        if not chunk:
            return state["lines"]
        state["lines"] += chunk.count(b"\n")


def count_cells(tree: Tree, results: Path, n: int) -> dict[str, Any]:
    """The cell records of ``results`` as the tree's own ``read_results`` yields them (:data:`VERIFY`), or ``{"error": ...}``."""
    verify = subprocess.run(
        [sys.executable, "-c", VERIFY, str(results), str(n)], env=tree.env(), capture_output=True, text=True, check=False
    )
    if verify.returncode != 0:
        return {"error": tail(verify.stderr, 1)}
    counts: dict[str, Any] = json.loads(verify.stdout)
    return counts


def resume_check(tree: Tree, project: Path, n: int) -> dict[str, Any]:
    """Kill a run at half way (SIGKILL to its process group), resume it, check exactly ``n`` cells are in results.jsonl."""
    clear_runs(project)
    row: dict[str, Any] = {"tree": tree.label, "cells": n, "ok": False, "load_avg": round(os.getloadavg()[0], 2)}
    half = (n + 1) // 2
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [*tree.command, "run"],
            cwd=project,
            env=tree.env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        sampler = bench_run.TreeSampler(p.pid)
        handle, state, lines = None, {"lines": 0}, 0
        try:
            while p.poll() is None:
                if handle is None:
                    run_dir = only_run_dir(project)
                    if run_dir is not None and (run_dir / "results.jsonl").exists():
                        handle = open(run_dir / "results.jsonl", "rb")
                if handle is not None:
                    lines = count_lines(handle, state)
                    if lines >= half:
                        break
                time.sleep(0.02)
            finished_first = p.poll() is not None
            if not finished_first:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            sampler.stop()
            if handle is not None:
                lines = count_lines(handle, state)
        finally:
            if handle is not None:
                handle.close()
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        row.update(
            killed_after_s=round(time.perf_counter() - t0, 2),
            killed_at_lines=lines,
            first_tree_rss_mb=round(sampler.rss / 1024, 1),
        )
        if finished_first:
            err.seek(0)
            row["note"] = f"FAILED: the run ended (exit {p.returncode}) before {half:,} result lines ({lines:,})"
            print(f"  resume check {tree.label} {n:,}: {row['note']}\n{tail(err.read().decode(errors='replace'))}", file=sys.stderr)
            clear_runs(project)
            return row
    run_dir = only_run_dir(project)
    if run_dir is None:
        row["note"] = "FAILED: no run directory after the kill"
        return row
    run_id = run_dir.name
    at_kill = count_cells(tree, run_dir / "results.jsonl", n)
    row["killed_at_cells"] = at_kill.get("distinct") if at_kill else None
    tree.select()
    proc = bench_run.run_process([*tree.command, "run", "--resume", run_id], cwd=project, sample_memory=True)
    row.update(
        resume_exit=proc.returncode,
        resume_wall_s=round(proc.wall_s, 2),
        resume_tree_rss_mb=round(proc.tree_rss_mb or 0, 1),
        resume_maxrss_mb=round(proc.maxrss_mb, 1),
    )
    if proc.returncode not in (0, 1):
        row["note"] = f"FAILED: resume exit {proc.returncode}"
        print(f"  resume {tree.label} {n:,} failed; stderr tail:\n{tail(proc.stderr)}", file=sys.stderr, flush=True)
        clear_runs(project)
        return row
    dirs = [p for p in (project / "runs").iterdir() if p.is_dir()]
    counts = count_cells(tree, run_dir / "results.jsonl", n)
    if "error" in counts:
        row["note"] = "FAILED: reading results.jsonl: " + counts["error"]
        clear_runs(project)
        return row
    row.update(counts)
    problems = []
    if lines >= n:
        problems.append(f"every cell was already written when the run was killed ({lines:,} lines): not a half-way kill")
    if len(dirs) != 1:
        problems.append(f"{len(dirs)} run directories (the resume made a new run?)")
    if counts["distinct"] != n or counts["cell_records"] != n or counts["out_of_range"]:
        problems.append(
            f"{counts['distinct']:,} distinct cells of {n:,} ({counts['cell_records']:,} records, {counts['out_of_range']} out of range)"
        )
    summary_problem = check_summary(run_dir, n)
    if summary_problem:
        problems.append(summary_problem)
    row["ok"] = not problems
    row["note"] = "; ".join(problems) if problems else f"exactly {n:,} cells"
    if counts.get("duplicates") or counts.get("unreadable_lines"):
        row["note"] += f" (the reader skipped {counts['duplicates']} duplicate cell lines, {counts['unreadable_lines']} torn lines)"
    clear_runs(project)
    return row


# -- output ----------------------------------------------------------------------------------------


def _num(v: Any, spec: str = ",.1f") -> str:
    return "–" if v is None else format(v, spec)


def _cell(rows: list[dict[str, Any]], key: str, spec: str = ",.1f") -> str:
    """The median of ``key`` over the rows that have it, with every sample in brackets when there are several."""
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return "–"
    median = statistics.median(values)
    if len(values) == 1:
        return _num(median, spec)
    return f"{_num(median, spec)} ({' / '.join(_num(v, spec) for v in values)})"


def runs_table(rows: list[dict[str, Any]], trees: list[Tree], sizes: list[int]) -> str:
    out = [
        "| tree | cells | peak RSS, sum over the tree (MB) | largest process, wait4 (MB) | wall (s) | µs / cell | CPU µs / cell "
        "| results.jsonl (B / cell) | report.html (MB) | junit.xml (MB) | Chromium load (ms) | load avg | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        for tree in trees:
            mine = [r for r in rows if r["tree"] == tree.label and r["cells"] == n]
            if not mine:
                continue
            good = [r for r in mine if r["ok"]]
            notes = sorted({r["note"] for r in mine if r.get("note")})
            if len(good) < len(mine):
                notes.insert(0, f"{len(mine) - len(good)} of {len(mine)} runs FAILED")
            out.append(
                f"| {tree.label} | {n:,} | {_cell(good, 'tree_rss_mb', ',.0f')} | {_cell(good, 'maxrss_mb', ',.0f')} "
                f"| {_cell(good, 'wall_s')} | {_cell(good, 'us_per_cell', ',.0f')} | {_cell(good, 'cpu_us_per_cell', ',.0f')} | {_cell(good, 'results_bytes_per_cell', ',.0f')} "
                f"| {_cell(good, 'report_html_mb')} | {_cell(good, 'junit_xml_mb')} | {_cell(good, 'chromium_load_ms', ',.0f')} "
                f"| {' / '.join(_num(r['load_avg'], '.2f') for r in mine)} | {'; '.join(notes) or ''} |"
            )
    return "\n".join(out)


def resume_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| tree | cells | killed at (cells / lines of results.jsonl) | resume wall (s) | resume peak RSS, tree (MB) | distinct cells after | exact? | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['tree']} | {r['cells']:,} | {_num(r.get('killed_at_cells'), ',d')} / {_num(r.get('killed_at_lines'), ',d')} | {_num(r.get('resume_wall_s'))} "
            f"| {_num(r.get('resume_tree_rss_mb'), ',.0f')} | {_num(r.get('distinct'), ',d')} | {'yes' if r['ok'] else 'NO'} | {r.get('note', '')} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, action="append", help="cells per run (repeatable; default 100000)")
    parser.add_argument(
        "--evalx-src",
        action="append",
        default=[],
        metavar="[LABEL=]DIR",
        help="measure `python -m evalx` with PYTHONPATH=DIR (repeatable: trees are interleaved); default: the installed evalx",
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per tree and size (default 1; 0 with --resume-check: only the check)")
    parser.add_argument("--resume-check", action="store_true", help="also kill a run at half way and resume it (once per tree and size)")
    parser.add_argument("--run-args", default="", help="extra arguments for the measured `evalx run`, e.g. '--junit-passes summary'")
    parser.add_argument("--no-browser", action="store_true", help="do not time the report in Chromium")
    parser.add_argument("--work", type=Path, default=OUT / "scale-work", help="where the projects go (default bench/out/scale-work)")
    parser.add_argument("--out", type=Path, default=OUT / "scale.json", help="the JSON written (default bench/out/scale.json)")
    args = parser.parse_args()
    sizes = args.cells or [100_000]
    trees = [parse_tree(s) for s in args.evalx_src] or [Tree("installed", None)]
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for tree in trees:
        tree.compile()
    info = bench_run.machine()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"evalx at scale — {started} — {info['nproc']} cores, {info['cpu']}, {info['memory_gb']} GB, Python {info['python']}", flush=True)
    t0 = time.perf_counter()
    projects = {n: make_project(work, n) for n in sizes}
    browser = Browser(not args.no_browser)
    rows: list[dict[str, Any]] = []
    resumes: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            for n in sizes:
                for tree in trees:  # interleaved: drift on the shared machine hits every tree alike
                    row = measure_run(tree, projects[n], n, browser, shlex.split(args.run_args))
                    row["repeat"] = repeat + 1
                    rows.append(row)
                    print(
                        f"  {tree.label} {n:,} cells #{repeat + 1}: "
                        + (
                            f"{row['wall_s']} s ({row['us_per_cell']} µs/cell), tree RSS {row['tree_rss_mb']} MB (wait4 {row['maxrss_mb']}), "
                            f"results.jsonl {row['results_bytes_per_cell']} B/cell, report.html {row['report_html_mb']} MB, "
                            f"junit.xml {row['junit_xml_mb']} MB, Chromium {row['chromium_load_ms']} ms, load {row['load_avg']}"
                            if row["ok"]
                            else row["note"]
                        )
                        + (f" [{row['note']}]" if row["ok"] and row.get("note") else ""),
                        flush=True,
                    )
        if args.resume_check:
            for n in sizes:
                for tree in trees:
                    r = resume_check(tree, projects[n], n)
                    resumes.append(r)
                    print(f"  resume {tree.label} {n:,}: {r.get('note')}, resume {r.get('resume_wall_s')} s", flush=True)
    finally:
        browser.close()
    if rows:
        print()
        print(runs_table(rows, trees, sizes))
    if resumes:
        print()
        print(resume_table(resumes))
    result = {
        "date": started,
        "machine": info,
        "command": " ".join(["python", "bench/scale.py", *sys.argv[1:]]),
        "seconds": round(time.perf_counter() - t0, 1),
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "run_args": args.run_args,
        "trees": [{"label": t.label, "src": t.src} for t in trees],
        "runs": rows,
        "resume_checks": resumes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    failed = [r for r in rows + resumes if not r["ok"]]
    print(f"\n{len(rows)} runs, {len(resumes)} resume checks, {len(failed)} failed; wrote {args.out} in {result['seconds']} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
