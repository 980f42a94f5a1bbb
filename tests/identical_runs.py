"""Compare two runs of one plan as "the same results": cells, summary figures and JUnit testcases, timings and ids aside.

Used by the scale-out tests (a local run against a merge of shards, or a Ray
run): :func:`assert_identical_runs` fails with the first differences found.
What may differ between two runs of a deterministic plan, and is left out:

- timings: ``latency_ms``, ``ttft_ms``, ``started_at``/``t``, durations, the
  latency and TTFT distributions, throughput, ``rate_limits`` (waits for a provider);
- identities: run ids (also inside outputs, e.g. an engine's
  ``task_id = eval-<run_id>-<case>``), the run's start and end times, the
  config path, what only a shard or a merge records (``shard``, ``merged``).

So a config compared this way must not put timings into what it checks
(no ``max_latency_ms``: its reason quotes the latency).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from results_file import read_cells

#: keys whose values are timings or identities, wherever they appear in a cell, its output or the summary
TIMING_KEYS = frozenset(
    {
        "latency_ms",
        "ttft_ms",
        "started_at",
        "finished_at",
        "t",
        "t_ms",
        "duration_s",
        "duration_ms",
        "run_id",
        "throughput",
        "cells_per_s",
        "slowest",  # which cells were slowest is timing too
        "rate_limits",  # how long a run waited for a provider's rate limit, and with how many in flight
    }
)
#: summary.json keys that describe the process, not the results
RUN_ONLY_KEYS = frozenset({"config", "shard", "merged", "comparison", "baseline"})


def _without(value: Any, drop: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_without(v, drop) for v in value]
    return value


def _rounded(value: Any) -> Any:
    """Floats to 9 significant digits: a sum added up in another order may differ in its last bits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


#: a run id (``YYYYMMDD-HHMMSS-<6 hex>``): a merged run's cells were made by the shards' runs, each with its own
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")


def _no_run_id(value: Any) -> Any:
    """``value`` with every run id replaced wherever it appears in a string (engine task ids...)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return json.loads(RUN_ID.sub("<run>", text))


def cell_view(run_dir: Path, *, with_index: bool = True) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Each cell of a run, keyed by (target, dataset, case id, repeat): what must be the same in another run of the plan."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cell in read_cells(run_dir):
        key = (cell["target"], cell["dataset"], cell["case_id"], cell["repeat"])
        assert key not in out, f"{run_dir}: cell {key} is there twice"
        view = _without(_no_run_id(cell), TIMING_KEYS | {"version"})
        if not with_index:
            view.pop("index", None)
        out[key] = _rounded(view)
    return out


def summary_view(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json without its timings and what only the process knew."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return _rounded(_without(summary, TIMING_KEYS | RUN_ONLY_KEYS))


def junit_view(run_dir: Path) -> dict[str, Any]:
    """junit.xml's suites and testcases, parsed: counts, and each testcase's outcome and messages, without times."""
    root = ET.parse(run_dir / "junit.xml").getroot()
    suites: dict[str, Any] = {}
    for suite in root.iter("testsuite"):
        cases = {}
        for case in suite.iter("testcase"):
            children = []
            for child in case:
                text = (child.text or "").strip()
                children.append((child.tag, child.get("message"), child.get("type"), text))
            cases[(case.get("classname"), case.get("name"))] = sorted(children, key=repr)
        counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
        suites[str(suite.get("name"))] = {"counts": counts, "cases": cases}
    totals = {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")}
    return {"totals": totals, "suites": suites}


def _differences(a: Any, b: Any, path: str = "", limit: int = 12) -> list[str]:
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=repr):
                if k not in x or k not in y:
                    out.append(f"{p}[{k!r}]: only in {'the second' if k not in x else 'the first'}")
                else:
                    walk(x[k], y[k], f"{p}[{k!r}]")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p}: {str(x)[:120]!r} != {str(y)[:120]!r}")

    walk(a, b, path)
    return out


def assert_identical_runs(a: Path, b: Path, *, with_index: bool = True) -> None:
    """Runs ``a`` and ``b`` have the same cells (statuses, scores, outputs, assertions), summary figures and JUnit testcases."""
    cells_a, cells_b = cell_view(a, with_index=with_index), cell_view(b, with_index=with_index)
    assert set(cells_a) == set(cells_b), (
        f"different cells: only in {a.name}: {sorted(set(cells_a) - set(cells_b))[:5]}, only in {b.name}: {sorted(set(cells_b) - set(cells_a))[:5]}"
    )
    diffs = _differences(cells_a, cells_b, "cells")
    assert not diffs, "cells differ:\n" + "\n".join(diffs)
    diffs = _differences(summary_view(a), summary_view(b), "summary")
    assert not diffs, "summaries differ:\n" + "\n".join(diffs)
    diffs = _differences(junit_view(a), junit_view(b), "junit")
    assert not diffs, "junit.xml differs:\n" + "\n".join(diffs)
