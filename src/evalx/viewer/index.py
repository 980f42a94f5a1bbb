"""The viewer's per-run index: each run's headline figures and per-case verdicts, built once per state of its folder.

Reading a thousand-cell ``results.jsonl`` for every page would not do with a
hundred runs, so each run is read once (through
:func:`evalx.results.store.read_results`, review marks applied) into a
:class:`RunIndex`: per target its cells, pass rate, cost and p99, and per
(target, dataset, case) its verdict, mean score and mean latency. An index
is kept in memory and in ``RUNS_DIR/.viewer/<run id>.json``, keyed by the
sizes and modification times of the run's files; a run that changes (a new
cell, a review mark) is read again, a new run is read when first seen.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalx.results.history import read_run
from evalx.results.repeats import RULES, status_of
from evalx.results.reviews import REVIEWS
from evalx.results.store import RESULTS, read_results

__all__ = ["INDEX_DIR", "CaseRow", "History", "RunIndex", "load_history", "run_index"]

INDEX_DIR = ".viewer"
INDEX_VERSION = 1
_WATCHED = (RESULTS, "summary.json", "run.json", REVIEWS)

_SERIALS = itertools.count()

#: a case's row in a run: (status, mean score or None, mean latency ms or None, repeats, passed repeats, reviewed cells)
CaseRow = tuple[str, float | None, float | None, int, int, int]


@dataclass
class RunIndex:
    """One run as the viewer shows it (every figure computed with the run's review marks)."""

    run_id: str
    path: Path
    name: str
    started_at: str
    started_unix: float
    status: str
    part: str | None
    gates: bool | None  # True passed, False breached, None no gates
    baseline: str | None  # the run id it was compared with
    targets: dict[str, dict[str, Any]]  # id -> {cells, pass, fail, error, skipped, pass_rate, cost_usd, p99_ms, reviewed}
    cases: dict[tuple[str, str, str], CaseRow] = field(default_factory=dict)
    reviewed: int = 0
    overridden: int = 0
    #: a number no other index made by this process has (what caches of derived pages are keyed on)
    serial: int = field(default_factory=lambda: next(_SERIALS))

    @property
    def pass_rate(self) -> float | None:
        passed = sum(t["pass"] for t in self.targets.values())
        decided = sum(t["cells"] - t["skipped"] for t in self.targets.values())
        return passed / decided if decided else None

    @property
    def cost_usd(self) -> float | None:
        costs = [t["cost_usd"] for t in self.targets.values() if t["cost_usd"] is not None]
        return sum(costs) if costs else None

    @property
    def p99_ms(self) -> float | None:
        values = [t["p99_ms"] for t in self.targets.values() if t["p99_ms"] is not None]
        return max(values) if values else None

    def as_json(self, signature: list[Any]) -> dict[str, Any]:
        return {
            "v": INDEX_VERSION,
            "sig": signature,
            "run_id": self.run_id,
            "name": self.name,
            "started_at": self.started_at,
            "started_unix": self.started_unix,
            "status": self.status,
            "part": self.part,
            "gates": self.gates,
            "baseline": self.baseline,
            "targets": self.targets,
            "reviewed": self.reviewed,
            "overridden": self.overridden,
            "cases": [[*key, *row] for key, row in self.cases.items()],
        }

    @classmethod
    def from_json(cls, path: Path, data: dict[str, Any]) -> RunIndex:
        return cls(
            run_id=str(data["run_id"]),
            path=path,
            name=str(data.get("name") or ""),
            started_at=str(data.get("started_at") or ""),
            started_unix=float(data.get("started_unix") or 0.0),
            status=str(data.get("status") or ""),
            part=data.get("part"),
            gates=data.get("gates"),
            baseline=data.get("baseline"),
            targets=dict(data["targets"]),
            cases={(r[0], r[1], r[2]): (r[3], r[4], r[5], r[6], r[7], r[8]) for r in data["cases"]},
            reviewed=int(data.get("reviewed") or 0),
            overridden=int(data.get("overridden") or 0),
        )


def _signature(run_dir: Path) -> list[Any]:
    sig: list[Any] = []
    for name in _WATCHED:
        try:
            st = os.stat(run_dir / name)
            sig.append([st.st_size, st.st_mtime_ns])
        except OSError:
            sig.append(None)
    return sig


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    return values[min(len(values) - 1, max(0, math.ceil(0.99 * len(values)) - 1))]


def _build(run_dir: Path) -> RunIndex:
    info = read_run(run_dir)
    try:
        stored = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    rule = stored.get("repeat_pass_rule")
    rule = rule if rule in RULES else "majority"
    targets: dict[str, dict[str, Any]] = {}
    latencies: dict[str, list[float]] = {}
    # (target, dataset, case) -> [passed, failed, errored, skipped, score sum, scored, latency sum, timed, reviewed]
    acc: dict[tuple[str, str, str], list[float]] = {}
    reviewed = overridden = 0
    for r in read_results(run_dir / RESULTS):
        target = str(r.get("target") or "")
        status = r.get("status")
        status = status if status in ("pass", "fail", "error", "skipped") else "error"
        t = targets.get(target)
        if t is None:
            t = targets[target] = {"cells": 0, "pass": 0, "fail": 0, "error": 0, "skipped": 0, "cost_usd": None, "reviewed": 0}
            latencies[target] = []
        t["cells"] += 1
        t[status] += 1
        cost = r.get("cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost):
            t["cost_usd"] = (t["cost_usd"] or 0.0) + cost
        latency = r.get("latency_ms")
        key = (target, str(r.get("dataset") or ""), str(r.get("case_id") or ""))
        a = acc.get(key)
        if a is None:
            a = acc[key] = [0, 0, 0, 0, 0.0, 0, 0.0, 0, 0]
        a[("pass", "fail", "error", "skipped").index(status)] += 1
        score = r.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
            a[4] += score
            a[5] += 1
        if isinstance(latency, (int, float)) and not isinstance(latency, bool) and math.isfinite(latency):
            latencies[target].append(float(latency))
            a[6] += latency
            a[7] += 1
        review = r.get("review")
        if isinstance(review, dict):
            a[8] += 1
            t["reviewed"] += 1
            reviewed += 1
            overridden += review.get("original_status") != status
    for target, t in targets.items():
        decided = t["cells"] - t["skipped"]
        t["pass_rate"] = t["pass"] / decided if decided else None
        t["p99_ms"] = _p99(latencies[target])
    cases: dict[tuple[str, str, str], CaseRow] = {}
    for key, a in acc.items():
        p, f, e = int(a[0]), int(a[1]), int(a[2])
        cases[key] = (
            status_of(p, f, e, rule),
            a[4] / a[5] if a[5] else None,
            a[6] / a[7] if a[7] else None,
            p + f + e + int(a[3]),
            p,
            int(a[8]),
        )
    gates = stored.get("gates")
    baseline = stored.get("baseline")
    return RunIndex(
        run_id=info.run_id if info else run_dir.name,
        path=run_dir,
        name=str((info.name if info else None) or ""),
        started_at=str((info.started_at if info else None) or ""),
        started_unix=float((info.started_unix if info else None) or 0.0),
        status=info.status if info else "unknown",
        part=info.part if info else None,
        gates=bool(gates.get("passed")) if isinstance(gates, dict) and gates.get("active") else None,
        baseline=str(baseline.get("run_id")) if isinstance(baseline, dict) and baseline.get("run_id") else None,
        targets=targets,
        cases=cases,
        reviewed=reviewed,
        overridden=overridden,
    )


#: run folder -> (signature, index)
_MEMORY: dict[str, tuple[list[Any], RunIndex]] = {}


def run_index(run_dir: Path, *, cache_dir: Path | None = None) -> RunIndex:
    """``run_dir``'s index: from memory, else from ``cache_dir`` when its files have not changed, else read and stored."""
    sig = _signature(run_dir)
    key = str(run_dir)
    hit = _MEMORY.get(key)
    if hit is not None and hit[0] == sig:
        return hit[1]
    cached = cache_dir / f"{run_dir.name}.json" if cache_dir is not None else None
    index: RunIndex | None = None
    if cached is not None:
        try:
            data = json.loads(cached.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("v") == INDEX_VERSION and data.get("sig") == sig:
                index = RunIndex.from_json(run_dir, data)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            index = None
    if index is None:
        index = _build(run_dir)
        if cached is not None and sig[0] is not None and index.status != "running":
            with contextlib.suppress(OSError):  # a read-only runs folder: the memory cache still serves
                cached.parent.mkdir(exist_ok=True)
                tmp = cached.with_suffix(".tmp")
                tmp.write_text(json.dumps(index.as_json(sig), separators=(",", ":")), encoding="utf-8")
                os.replace(tmp, cached)
    _MEMORY[key] = (sig, index)
    return index


@dataclass
class History:
    """Every run under a folder, oldest first, with its index."""

    runs: list[RunIndex]

    def by_id(self, run_id: str) -> RunIndex | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    @property
    def targets(self) -> list[str]:
        seen: dict[str, None] = {}
        for run in self.runs:
            seen.update(dict.fromkeys(run.targets))
        return list(seen)


def load_history(runs_dir: Path) -> History:
    """Every run under ``runs_dir`` that has results, oldest first (as :func:`evalx.results.history.list_runs` orders them)."""
    runs: list[tuple[tuple[str, float, str], RunIndex]] = []
    if runs_dir.is_dir():
        cache = runs_dir / INDEX_DIR
        for child in runs_dir.iterdir():
            if child.name == INDEX_DIR or not child.is_dir() or not (child / RESULTS).is_file():
                continue
            index = run_index(child, cache_dir=cache)
            runs.append(((index.started_at, index.started_unix, index.run_id), index))
    runs.sort(key=lambda pair: pair[0])
    return History([r for _, r in runs])

