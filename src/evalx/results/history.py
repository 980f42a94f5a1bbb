"""Stored runs: list them newest first and resolve ``RUN`` (an id, a path or ``latest``).

A run is a directory holding ``run.json`` (metadata, status) and, once it
ended, ``summary.json``. ``latest`` is the newest *completed* run of the same
config name (its ``run.json`` says complete and its summary not interrupted),
never the run being made, nor a shard (``--shard I/N``: a part of a plan), a
partial merge of shards, or a merge missing cells of an unfinished shard.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from evalx.common.json_types import JSON, JSONObject
from evalx.common.reading import RUN_RECORD, SUMMARY, stored_json
from evalx.errors import RunNotFound
from evalx.results.display import one_line, show_id
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd

if TYPE_CHECKING:
    from evalx.results.model import RunSummary

__all__ = ["RunInfo", "RunNotFound", "format_runs", "list_runs", "read_run", "resolve_run"]

LATEST = "latest"


@dataclass
class RunInfo:
    run_id: str
    path: Path
    name: str | None
    status: str
    started_at: str | None
    started_unix: float | None
    config_hash: str | None
    cells: int | None
    pass_rate: float | None
    cost_usd: float | None
    p99_ms: float | None
    duration_s: float | None
    part: str | None = None  # a shard ("shard 1/3") or a partial merge ("partial merge"): never `latest`

    #: the summary says the run stopped before its end (a kill, Ctrl-C, an unfinished shard in a merge)
    interrupted: bool = False

    @property
    def complete(self) -> bool:
        return self.status == "complete" and not self.interrupted

    def as_dict(self) -> JSONObject:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def _read_json(path: Path) -> JSONObject | None:
    """A run file's object, None when it is missing or damaged (one that is not a regular file is named in a warning)."""
    data = stored_json(path, SUMMARY if path.name == "summary.json" else RUN_RECORD)
    return data if isinstance(data, dict) else None


def read_run(run_dir: Path) -> RunInfo | None:
    """A run's headline figures, or None when ``run_dir`` holds no run."""
    meta = _read_json(run_dir / "run.json")
    stored = _read_json(run_dir / "summary.json")
    if meta is None and stored is None:
        return None
    meta = meta or {}
    # as stored, possibly by an older evalx: every key is read with care
    summary = cast("RunSummary", stored or {})
    totals = summary.get("totals")
    latency = summary.get("latency_ms")
    status = str(meta.get("status") or ("complete" if summary else "unknown"))
    unix = meta.get("started_unix")
    if status == "running" and not summary:
        status = "running/killed"  # no summary: still running, or it died without one (resume it)
    return RunInfo(
        run_id=str(meta.get("run_id") or summary.get("run_id") or run_dir.name),
        path=run_dir,
        name=_text(meta.get("name")) or summary.get("name"),
        status=status,
        started_at=_text(meta.get("started_at")) or summary.get("started_at"),
        started_unix=unix if isinstance(unix, (int, float)) else None,
        config_hash=_text(meta.get("config_hash")),
        cells=totals.get("cells", meta.get("cells")) if totals else meta.get("cells"),
        pass_rate=totals.get("pass_rate") if totals else None,
        cost_usd=summary.get("cost_usd"),
        p99_ms=latency.get("p99") if latency else None,
        duration_s=summary.get("duration_s"),
        part=_part_of(meta),
        interrupted=summary.get("interrupted") is True,
    )


def _text(value: JSON) -> str | None:
    """A string of ``run.json`` (written by evalx, maybe an older one): None for anything else."""
    return value if isinstance(value, str) else None


def _part_of(meta: JSONObject) -> str | None:
    """What part of a plan a run holds, when it is not all of it: a shard, or a merge of some shards."""
    shard, merged = meta.get("shard"), meta.get("merged")
    if isinstance(shard, dict):
        return f"shard {shard.get('index')}/{shard.get('count')}"
    if isinstance(merged, dict) and merged.get("partial"):
        return "partial merge"
    if isinstance(merged, dict) and merged.get("missing_cells"):
        return "incomplete merge"
    return None


def list_runs(output_dir: Path, *, name: str | None = None) -> list[RunInfo]:
    """Every run under ``output_dir`` (of config ``name`` when given), newest first."""
    if not output_dir.is_dir():
        return []
    runs = []
    for child in output_dir.iterdir():
        if child.is_dir():
            info = read_run(child)
            if info is not None and (name is None or info.name == name):
                runs.append(info)
    # started_at is UTC to the second; started_unix orders runs started within one second
    runs.sort(key=lambda r: (r.started_at or "", r.started_unix or 0.0, r.run_id), reverse=True)
    return runs


def resolve_run(ref: str, output_dir: Path, *, name: str | None = None, exclude: str | None = None) -> Path:
    """The directory of run ``ref``: ``latest``, a run id under ``output_dir``, or a path."""
    if ref == LATEST:
        for info in list_runs(output_dir, name=name):
            if info.complete and info.part is None and info.run_id != exclude and (info.path / "results.jsonl").is_file():
                return info.path
        which = f" of {name!r}" if name else ""
        raise RunNotFound(f"no completed run{which} under {output_dir} to use as `latest`")
    candidates = [output_dir / ref, Path(ref)]
    for path in candidates:
        # a results.jsonl that is there but not a regular file (a FIFO) makes a run folder too: its reader names it
        if path.is_dir() and ((path / "run.json").is_file() or (path / "results.jsonl").exists()):
            return path.resolve()
    raise RunNotFound(f"no run {ref!r} (not a run id under {output_dir}, nor a run directory)")


def format_runs(runs: list[RunInfo]) -> str:
    from tabulate import tabulate  # type: ignore[import-untyped,unused-ignore]

    rows = [
        [
            show_id(r.run_id),  # (from run.json: a line break or a leading `::` in it is shown escaped)
            one_line(r.name) or "—",
            one_line(r.status + (f" ({r.part})" if r.part else "")),
            "—" if r.cells is None else str(r.cells),
            _pct(r.pass_rate),
            _usd(r.cost_usd),
            _ms(r.p99_ms),
            "—" if r.duration_s is None else f"{r.duration_s:.1f}s",
        ]
        for r in runs
    ]
    headers = ["run", "name", "status", "cells", "pass rate", "cost", "p99", "duration"]
    return str(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=["left"] * 3 + ["right"] * 5))
