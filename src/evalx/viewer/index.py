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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalx.common.atomic import write_text
from evalx.common.reading import CACHE, SUMMARY, read_json, stored_json
from evalx.errors import EvalxError, UnreadableFile
from evalx.results.history import read_run
from evalx.results.repeats import RULES, status_of
from evalx.results.reviews import REVIEWS, summary_is_current
from evalx.results.stats import percentile
from evalx.results.store import RESULTS, read_results

__all__ = ["INDEX_DIR", "CaseRow", "History", "RunIndex", "load_history", "run_index"]

INDEX_DIR = ".viewer"
INDEX_VERSION = 2
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
    #: True for a run read from its summary alone (the runs page, before the run is indexed): no ``cases``
    headline: bool = False
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
    def from_json(cls, path: Path, data: Mapping[str, Any]) -> RunIndex | None:
        """The index stored as ``data`` (an index file), or None when any value is not what :meth:`as_json` writes.

        An index file is input like any other (it may come back from a CI
        artifact, edited): every field is checked for its type; one that is
        not right makes the file worthless and the run is read again.
        """
        targets, cases = data.get("targets"), data.get("cases")
        if not (
            isinstance(data.get("run_id"), str)
            and all(isinstance(data.get(k), str) for k in ("name", "started_at", "status"))
            and _is_number(data.get("started_unix"))
            and all(data.get(k) is None or isinstance(data.get(k), str) for k in ("part", "baseline"))
            and (data.get("gates") is None or isinstance(data.get("gates"), bool))
            and all(_is_count(data.get(k)) for k in ("reviewed", "overridden"))
            and isinstance(targets, dict)
            and all(isinstance(k, str) and _valid_figures(v) for k, v in targets.items())
            and isinstance(cases, list)
            and all(_valid_case(r) for r in cases)
        ):
            return None
        return cls(
            run_id=data["run_id"],
            path=path,
            name=data["name"],
            started_at=data["started_at"],
            started_unix=float(data["started_unix"]),
            status=data["status"],
            part=data.get("part"),
            gates=data.get("gates"),
            baseline=data.get("baseline"),
            targets={k: dict(v) for k, v in targets.items()},
            cases={(r[0], r[1], r[2]): (r[3], r[4], r[5], r[6], r[7], r[8]) for r in cases},
            reviewed=data["reviewed"],
            overridden=data["overridden"],
        )


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_COUNTS = ("cells", "pass", "fail", "error", "skipped", "reviewed")


def _valid_figures(value: object) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {*_COUNTS, "cost_usd", "pass_rate", "p99_ms"}
        and all(_is_count(value[k]) for k in _COUNTS)
        and all(value[k] is None or _is_number(value[k]) for k in ("cost_usd", "pass_rate", "p99_ms"))
    )


def _valid_case(row: object) -> bool:
    return (
        isinstance(row, list)
        and len(row) == 9
        and all(isinstance(x, str) for x in row[:3])
        and row[3] in ("pass", "fail", "error", "skipped")
        and all(x is None or _is_number(x) for x in row[4:6])
        and all(_is_count(x) for x in row[6:9])
    )


def file_versions(run_dir: Path, names: tuple[str, ...] = _WATCHED) -> list[Any]:
    """The (size, mtime) of each of ``names`` in ``run_dir`` (None where missing): what a cache of their contents is keyed by."""
    sig: list[Any] = []
    for name in names:
        try:
            st = os.stat(run_dir / name)
            sig.append([st.st_size, st.st_mtime_ns])
        except OSError:
            sig.append(None)
    return sig


def _p99(values: list[float]) -> float | None:
    """The 99th percentile as the summary computes it (:func:`evalx.results.stats.percentile`)."""
    return percentile(sorted(values), 99)


def _build(run_dir: Path) -> RunIndex:
    info = read_run(run_dir)
    stored = stored_json(run_dir / "summary.json", SUMMARY)  # a FIFO or a device: named in a warning, read as missing
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


def _stored_index(run_dir: Path, cache_dir: Path | None = None) -> RunIndex | None:
    """``run_dir``'s index from memory or ``cache_dir`` when the run's files have not changed since; None otherwise."""
    return _lookup(run_dir, cache_dir, build=False)


def run_index(run_dir: Path, *, cache_dir: Path | None = None) -> RunIndex:
    """``run_dir``'s index: from memory, else from ``cache_dir`` when its files have not changed, else read and stored."""
    index = _lookup(run_dir, cache_dir, build=True)
    assert index is not None
    return index


def _lookup(run_dir: Path, cache_dir: Path | None, *, build: bool) -> RunIndex | None:
    sig = file_versions(run_dir)
    key = str(run_dir)
    hit = _MEMORY.get(key)
    if hit is not None and hit[0] == sig:
        return hit[1]
    cached = cache_dir / f"{run_dir.name}.json" if cache_dir is not None else None
    index = _read_cached(cached, run_dir, sig) if cached is not None else None
    if index is None:
        if not build:
            return None
        index = _build(run_dir)
        if cached is not None and sig[0] is not None and index.status != "running" and not cached.parent.is_symlink():
            # a read-only runs folder: the memory cache still serves (a link for the cache folder is not written through)
            with contextlib.suppress(OSError, EvalxError):
                write_text(cached, json.dumps(index.as_json(sig), separators=(",", ":")))
    _MEMORY[key] = (sig, index)
    return index


def _read_cached(cached: Path, run_dir: Path, sig: list[Any]) -> RunIndex | None:
    """The index stored in ``cached`` when it is for ``run_dir`` as its files are now, well formed; None otherwise (rebuilt)."""
    try:
        data = read_json(cached, CACHE)  # a regular file only, at most CACHE's size
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(data, dict) and data.get("v") == INDEX_VERSION and data.get("sig") == sig):
        return None
    index = RunIndex.from_json(run_dir, data)
    if index is None:
        return None
    info = read_run(run_dir)  # the cache may not rename the run
    return index if index.run_id == (info.run_id if info else run_dir.name) else None


def _headline(run_dir: Path) -> RunIndex | None:
    """A run's runs-page figures from its ``summary.json`` alone (no results read), or None when the summary cannot say.

    Used for a run not indexed yet, so the runs page of a folder never viewed
    does not wait for every ``results.jsonl``; the figures are the ones the
    index would give (the same pass-rate rule, percentile and review marks:
    a summary older than the run's marks is not used).
    """
    read = stored_json(run_dir / "summary.json", SUMMARY)
    if not isinstance(read, dict) or not isinstance(read.get("per_target"), dict) or not summary_is_current(run_dir, read):
        return None
    stored: dict[str, Any] = read  # as stored, possibly by an older evalx: read with care below
    info = read_run(run_dir)
    if info is None or info.status == "running":
        return None
    targets: dict[str, dict[str, Any]] = {}
    try:
        for target, figures in stored["per_target"].items():
            latency = figures.get("latency_ms") or {}
            targets[str(target)] = {
                **{k: int(figures.get(k) or 0) for k in ("cells", "pass", "fail", "error", "skipped")},
                "cost_usd": figures.get("cost_usd"),
                "reviewed": 0,
                "pass_rate": figures.get("pass_rate"),
                "p99_ms": latency.get("p99"),
            }
            if not all(v is None or _is_number(v) for k, v in targets[str(target)].items() if k in ("cost_usd", "pass_rate", "p99_ms")):
                return None  # a figure that is not a number (an edited summary): read from the run's cells instead
    except (AttributeError, TypeError, ValueError, OverflowError):  # (a count of 1e999 too)
        return None
    reviews = stored.get("reviews")
    reviews = reviews if isinstance(reviews, dict) else {}
    gates, baseline = stored.get("gates"), stored.get("baseline")
    return RunIndex(
        run_id=info.run_id,
        path=run_dir,
        name=str(info.name or ""),
        started_at=str(info.started_at or ""),
        started_unix=float(info.started_unix or 0.0),
        status=info.status,
        part=info.part,
        gates=bool(gates.get("passed")) if isinstance(gates, dict) and gates.get("active") else None,
        baseline=str(baseline.get("run_id")) if isinstance(baseline, dict) and baseline.get("run_id") else None,
        targets=targets,
        reviewed=int(reviews.get("reviewed_cells") or 0),
        overridden=int(reviews.get("overridden_cells") or 0),
        headline=True,
    )


@dataclass
class History:
    """Every run under a folder, oldest first, with its index; each run id once (see :func:`load_history`)."""

    runs: list[RunIndex]
    #: run id -> the other folders that hold a run of that id (copies: not shown, never written)
    duplicates: dict[str, list[Path]] = field(default_factory=dict)
    #: run folders left out because one of their files cannot be read (a FIFO, a device, too large): folder -> why
    unreadable: dict[str, str] = field(default_factory=dict)

    def by_id(self, run_id: str) -> RunIndex | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    def duplicate_notes(self) -> list[str]:
        """One line per run id found in more than one folder: which folder is the run's, which are left alone."""
        notes = []
        for run_id, copies in self.duplicates.items():
            run = self.by_id(run_id)
            where = run.path.name if run is not None else "?"
            others = ", ".join(p.name + "/" for p in copies)
            notes.append(f"run {run_id} is also in {others}: shown and marked from {where}/ only (the copies are left alone)")
        notes += [f"{folder}/ is not shown: {why}" for folder, why in self.unreadable.items()]
        return notes

    @property
    def targets(self) -> list[str]:
        seen: dict[str, None] = {}
        for run in self.runs:
            seen.update(dict.fromkeys(run.targets))
        return list(seen)


def load_history(runs_dir: Path, *, headlines: bool = False) -> History:
    """Every run under ``runs_dir`` that has results, oldest first (as :func:`evalx.results.history.list_runs` orders them).

    ``headlines``: a run not indexed yet is read from its summary alone when it
    can be (:func:`_headline`: its ``cases`` are then empty) — for the runs page.
    """
    runs: list[tuple[tuple[str, float, str], RunIndex]] = []
    unreadable: dict[str, str] = {}
    if runs_dir.is_dir():
        cache = runs_dir / INDEX_DIR
        for child in sorted(runs_dir.iterdir()):
            if child.name == INDEX_DIR or child.is_symlink() or not child.is_dir() or not (child / RESULTS).is_file():
                continue
            try:
                index = (_stored_index(child, cache) or _headline(child)) if headlines else None
                if index is None:
                    index = run_index(child, cache_dir=cache)
            except UnreadableFile as exc:  # one run's damaged folder is named, never every page's error
                unreadable[child.name] = str(exc)
                continue
            runs.append(((index.started_at, index.started_unix, index.run_id), index))
    runs.sort(key=lambda pair: pair[0])
    # one folder per run id: the one named for it (a `cp -r runs/ID runs/backup` is a copy), else the first by name
    chosen: dict[str, RunIndex] = {}
    duplicates: dict[str, list[Path]] = {}
    for _, index in runs:
        held = chosen.get(index.run_id)
        if held is None:
            chosen[index.run_id] = index
            continue
        if index.path.name == index.run_id and held.path.name != index.run_id:
            chosen[index.run_id] = index
            duplicates.setdefault(index.run_id, []).append(held.path)
        else:
            duplicates.setdefault(index.run_id, []).append(index.path)
    return History([r for _, r in runs if chosen.get(r.run_id) is r], duplicates, unreadable)
