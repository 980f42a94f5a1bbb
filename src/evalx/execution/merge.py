"""Merge shard runs (``evalx run --shard I/N``) into one run, written and judged as one process would have.

The shards are checked to be one plan's (the same plan fingerprint and
shard count, each shard once, none missing unless ``allow_partial``), of one
config and one version of it, and their cells to be what the plan deals each
shard (:func:`check_membership`). Each shard's review marks for its own cases
carry to the merged run. Their
results are read back through :func:`evalx.results.store.read_results`, one
cell at a time from each shard, in the order of the whole plan (a shard
keeps every cell's index in it), and written to the new run's
``results.jsonl`` with the same writer a run uses. The summary, the gates,
the exit status and the reports are made by the same functions as
``evalx run``'s (:class:`~evalx.results.summary.SummaryBuilder`,
:func:`~evalx.results.outcome.finish_summary`,
:func:`~evalx.results.outcome.decide_exit`,
:func:`~evalx.reports.render.write_reports`).
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from evalx.common.atomic import write_bytes
from evalx.common.documents import relative_path
from evalx.common.json_types import JSON, JSONObject, as_object
from evalx.common.reading import CONFIG_COPY, RUN_RECORD, SUMMARY, check_regular, read_bytes, stored_json
from evalx.config.loader import Config
from evalx.errors import MergeError, UnreadableFile, writing
from evalx.execution.resume import config_hash
from evalx.execution.run_record import RunMeta, read_run_meta
from evalx.execution.runner import RunOutcome, publish
from evalx.execution.shards import case_key, deal
from evalx.reports.render import ReportOptions
from evalx.reports.writers import Outputs
from evalx.results.model import CellResult, CostGuardReport, MergeReport, RunSummary
from evalx.results.outcome import RunFacts, decide_exit, finish_summary, nothing_graded
from evalx.results.store import RESULTS, ResultWriter, RunLock, by_case, new_run_id, read_results, write_json

__all__ = ["MergeError", "MergeOptions", "ShardRun", "merge", "read_shards"]

log = logging.getLogger(__name__)


@dataclass
class MergeOptions:
    out_dir: Path | None = None  # the merged run's folder (default: a new run id under the config's output dir)
    allow_partial: bool = False  # merge even when shards are missing (the summary says which)
    baseline: str | None = None  # --baseline: overrides gates.baseline
    reports: ReportOptions = field(default_factory=ReportOptions)
    outputs: Outputs = field(default_factory=Outputs)  # --junit, --html, --markdown


@dataclass
class ShardRun:
    """One shard's run folder, as its ``run.json`` describes it."""

    path: Path
    meta: JSONObject  # its run.json, whose shard record read_shards checked
    summary: JSONObject  # its summary.json (empty when it has none)

    @property
    def shard(self) -> JSONObject:
        return as_object(self.meta.get("shard"))

    @property
    def index(self) -> int:
        return _int(self.shard.get("index"))

    @property
    def count(self) -> int:
        return _int(self.shard.get("count"))

    @property
    def plan_digest(self) -> str:
        return str(self.shard.get("plan_digest"))

    @property
    def complete(self) -> bool:
        return self.meta.get("status") == "complete" and not self.summary.get("interrupted")


def _int(value: JSON) -> int:
    """A number read from a shard's files (checked by :func:`_shard_fields_ok` where it must be one)."""
    return int(value) if isinstance(value, (int, float)) else 0


def _read_json(path: Path) -> JSONObject | None:
    """A run file's object, None when it is missing or damaged (one that is not a regular file is named in a warning)."""
    value = stored_json(path, SUMMARY if path.name == "summary.json" else RUN_RECORD)
    return value if isinstance(value, dict) else None


def _shard_fields_ok(shard: JSON) -> bool:
    if not isinstance(shard, dict):
        return False
    index, count, cells = shard.get("index"), shard.get("count"), shard.get("plan_cells")
    return (
        type(index) is int
        and type(count) is int
        and type(cells) is int
        and 1 <= index <= count
        and isinstance(shard.get("plan_digest"), str)
    )


def read_shards(run_dirs: Iterable[Path], *, allow_partial: bool = False) -> tuple[list[ShardRun], list[int]]:
    """The shard runs in ``run_dirs``, by shard number, and the numbers of the missing shards.

    Raises :class:`MergeError` (one line, naming the run folders) for a folder
    that is not a shard run, shards of different plans, a shard given twice,
    and missing shards unless ``allow_partial``.
    """
    shards: list[ShardRun] = []
    for path in run_dirs:
        meta = read_run_meta(path / "run.json")
        if meta is None:
            raise MergeError(f"merge: {path} is not a run folder (no readable run.json there)")
        if "shard" not in meta:
            raise MergeError(f"merge: {path} is not a shard run (it was not started with --shard I/N): only shards are merged")
        if not _shard_fields_ok(meta["shard"]):
            raise MergeError(f"merge: {path}/run.json has no readable shard record (index, count, plan_digest, plan_cells)")
        try:
            check_regular(path / RESULTS)
        except UnreadableFile as exc:
            why = f"has no {RESULTS}" if exc.missing else f"{RESULTS} is {exc.reason}"
            raise MergeError(f"merge: {path} {why}: nothing of that shard to merge") from None
        shards.append(ShardRun(path, meta, read_run_meta(path / "summary.json", SUMMARY) or {}))
    if not shards:
        raise MergeError("merge: no run folders given")
    first = shards[0]
    for other in shards[1:]:
        if other.plan_digest != first.plan_digest or other.count != first.count:
            raise MergeError(
                f"merge: {first.path} (shard {first.index}/{first.count}) and {other.path} (shard {other.index}/{other.count}) "
                "are shards of different plans (the config, datasets, selection or shard count differ): merge the shards of one plan"
            )
    seen: dict[int, ShardRun] = {}
    for shard in shards:
        if shard.index in seen:
            raise MergeError(
                f"merge: {seen[shard.index].path} and {shard.path} are both shard {shard.index}/{shard.count}: give each shard once"
            )
        seen[shard.index] = shard
    missing = [i for i in range(1, first.count + 1) if i not in seen]
    if missing and not allow_partial:
        which = ", ".join(f"{i}/{first.count}" for i in missing)
        given = ", ".join(str(s.path) for s in sorted(shards, key=lambda s: s.index))
        raise MergeError(
            f"merge: shard{'s' if len(missing) > 1 else ''} {which} missing (given: {given}); "
            "give every shard's run folder, or --allow-partial to merge these and say so"
        )
    return sorted(shards, key=lambda s: s.index), missing


class _CaseSpans:
    """Where the case of the cell being written starts and how many cells it has (a run's case records, for the writer)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.first, self.cells = 0, 1
        self.grouped = True  # False once a shard's file is found out of order: then each cell carries its case

    def case_span(self, index: int) -> tuple[int, int]:
        return (self.first, self.cells) if self.grouped else (index, 1)


def _in_order(results: Iterator[CellResult], spans: _CaseSpans) -> Iterator[CellResult]:
    """``results`` as they come, noting in ``spans`` when they are not in index order (a killed shard's file)."""
    last = -1
    for result in results:
        index = result.get("index")
        if not isinstance(index, int) or index < last:
            spans.grouped = False
        else:
            last = index
        yield result


def _index(result: CellResult) -> int:
    index = result.get("index")
    return index if isinstance(index, int) else -1


def _cost_guard(shards: list[ShardRun]) -> CostGuardReport | None:
    """The shards' cost guards added up (each had its share of ``max_total_cost``)."""
    guards = [guard for s in shards if isinstance(guard := s.summary.get("cost_guard"), dict)]
    if not guards:
        return None
    messages = [g.get("message") for g in guards if g.get("message")]
    return {
        "limit_usd": round(sum(_number(g.get("limit_usd")) for g in guards), 8),
        "spent_usd": round(sum(_number(g.get("spent_usd")) for g in guards), 8),
        "skipped": sum(_int(g.get("skipped")) for g in guards),
        "message": str(messages[0]) if messages else None,
    }


def _number(value: JSON) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _target_failures(summary: RunSummary) -> list[str]:
    """One line for a target whose every cell errored (what a single run calls a run that could not complete)."""
    lines = []
    for target, figures in summary["per_target"].items():
        cells, errors = figures.get("cells"), figures.get("error")
        if cells and errors == cells:
            lines.append(f"target {target!r}: every cell failed ({errors})")
    return lines


def _cell_name(result: CellResult) -> str:
    return f"case {result.get('dataset')}/{result.get('case_id')}, target {result.get('target')}, repeat {result.get('repeat')}"


@dataclass(frozen=True)
class PlannedCells:
    """The shards' plan made again: which shard each cell index is dealt to, and which cell the index is."""

    #: a cell index -> the shard (1-based) the plan deals it to
    dealt: Callable[[int], int]
    #: a cell index -> (target, dataset, case id, repeat)
    key_of: Callable[[int], tuple[str, str, str, int]]


def _plan_shards(config: Config, shards: list[ShardRun]) -> PlannedCells | None:
    """The plan made again with ``config`` when it is the shards' plan (the same fingerprint): each cell's shard and
    identity; None when it cannot be made again (the config or its datasets changed)."""
    from evalx.execution.plan import build_plan
    from evalx.execution.resume import plan_fingerprint, selection_from_meta, stored_fingerprint_version

    first = shards[0]
    try:
        selection = dataclasses.replace(selection_from_meta(first.meta), shard=None)
        plan = build_plan(config, selection)
        if plan_fingerprint(config, plan, stored_fingerprint_version(first.meta)) != first.plan_digest:
            return None
    except Exception:  # an older shard, a changed config: the cells alone are checked
        return None
    return PlannedCells(plan.cells.shard_of(first.count), plan.cells.key_of)


def check_membership(shards: list[ShardRun], remade: PlannedCells | None = None, holders: dict[tuple[str, str], int] | None = None) -> int:
    """How many planned cells no shard holds, judged from the cells themselves, never from the shards' labels
    (``holders``, when given, gets each case's folder: its position in ``shards``, from 1).

    Raises :class:`MergeError` when a cell is held twice (a folder given twice, or one whose ``shard.index`` was edited),
    when a cell lies outside the plan, when one case's cells are in two folders (a shard holds whole cases), and —
    when the plan can be made again (``remade``), or else every cell of every planned case is there so the deal can
    be made again from them — when a folder holds cells of another shard than its ``run.json`` names. With the plan,
    each cell must also be the one its index names (its target, case and repeat): a file whose cells were edited to
    claim other cases is refused, never merged under the wrong case.
    """
    dealt = remade.dealt if remade is not None else None
    record = as_object(shards[0].meta.get("shard"))  # checked by read_shards: plan_cells and plan_cases are ints
    planned, planned_cases = record.get("plan_cells"), record.get("plan_cases")
    total, count = planned if isinstance(planned, int) else 0, shards[0].count
    holder = array("i", bytes(4 * total))  # the position (1-based) in ``shards`` of the folder holding each cell
    cases: dict[tuple[str, str], list[int]] = {}  # (dataset, case id) -> [its cells, the position of its folder]
    held = 0
    for pos, shard in enumerate(shards, 1):
        for result in read_results(shard.path / RESULTS, raw=True):
            index = result.get("index")
            if type(index) is not int or not 0 <= index < total:
                raise MergeError(f"merge: {shard.path} holds a cell outside the plan of {total} cells (index {index!r}): not a shard of it")
            if holder[index]:
                other = shards[holder[index] - 1]
                where = f"{other.path} and {shard.path} both hold" if other is not shard else f"{shard.path} holds twice"
                raise MergeError(
                    f"merge: {where} cell {index} ({_cell_name(result)}); {shard.path}/run.json says shard "
                    f"{shard.index}/{count}, its cells say otherwise: give each shard's own run folder once"
                )
            if remade is not None:
                claimed = (result.get("target"), result.get("dataset"), result.get("case_id"), result.get("repeat"))
                if claimed != remade.key_of(index):
                    target, dataset, case_id, repeat = remade.key_of(index)
                    raise MergeError(
                        f"merge: {shard.path} holds cell {index} as {_cell_name(result)}, but the plan's cell {index} is "
                        f"case {dataset}/{case_id}, target {target}, repeat {repeat}: its results were edited; "
                        "give each shard's own run folder"
                    )
            if dealt is not None and dealt(index) != shard.index:
                raise MergeError(
                    f"merge: {shard.path}/run.json says shard {shard.index}/{count}, but it holds cell {index} "
                    f"({_cell_name(result)}), which the plan deals to shard {dealt(index)}/{count}: its label was changed; "
                    "give each shard's own run folder"
                )
            holder[index] = pos
            held += 1
            key = (str(result.get("dataset")), str(result.get("case_id")))
            entry = cases.get(key)
            if entry is None:
                cases[key] = [1, pos]
            elif entry[1] != pos:
                raise MergeError(
                    f"merge: case {key[0]}/{key[1]} has cells in {shards[entry[1] - 1].path} and {shard.path}; "
                    "a shard holds whole cases: these are not shards of one plan"
                )
            else:
                entry[0] += 1
    if dealt is None and held == total and len(cases) == planned_cases:  # every case is here: the deal made again
        keys = list(cases)
        owners = deal([case_key(*k) for k in keys], [cases[k][0] for k in keys], count)
        for key, owner in zip(keys, owners):
            shard = shards[cases[key][1] - 1]
            if shard.index != owner + 1:
                raise MergeError(
                    f"merge: {shard.path}/run.json says shard {shard.index}/{count}, but it holds case {key[0]}/{key[1]}, "
                    f"which the plan deals to shard {owner + 1}/{count}: its label was changed; give each shard's own run folder"
                )
    if holders is not None:
        holders.update((key, entry[1]) for key, entry in cases.items())
    return total - held


def _carried_marks(shards: list[ShardRun], holders: dict[tuple[str, str], int], run_dir: Path) -> int:
    """The shards' review marks, each for a case its own shard holds, written to the merged run's ``reviews.jsonl``:
    a reviewer's verdict on a shard's cell is a verdict on the merged run's same cell (the merge copies it as it is).
    A mark in a folder for a case another shard holds was never about that output: it is left out. How many."""
    import json

    from evalx.results.reviews import REVIEWS, load_marks

    kept = []
    for pos, shard in enumerate(shards, 1):
        for mark in load_marks(shard.path).all_marks():
            if holders.get((str(mark["dataset"]), str(mark["case_id"]))) == pos:
                kept.append({k: v for k, v in mark.items() if v is not None})
    if kept:
        write_bytes(run_dir / REVIEWS, "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in kept).encode("utf-8", "backslashreplace"))
    return len(kept)


def merge(config: Config, run_dirs: list[Path], options: MergeOptions) -> RunOutcome:
    """Merge the shard runs in ``run_dirs`` into one new run; its summary, reports and exit status as ``evalx run`` makes them."""
    shards, missing = read_shards(run_dirs, allow_partial=options.allow_partial)
    first = shards[0]
    for shard in shards:  # every shard's, not only the first's: a shard of another config may have the same plan
        if shard.meta.get("name") not in (None, config.name):
            raise MergeError(f"merge: {shard.path} is a run of config {shard.meta.get('name')!r}, not of {config.name!r} ({config.path})")
    versions = {str(h): s for s in shards if (h := s.meta.get("config_hash")) is not None}
    if len(versions) > 1:
        one, other = list(versions.values())[:2]
        raise MergeError(
            f"merge: {one.path} and {other.path} ran different versions of the config (their config_hash differs: "
            "settings such as timeouts or retries may differ though the plan is the same): run every shard with one version"
        )
    if first.meta.get("config_hash") not in (None, config_hash(config)):
        log.info(f"note: {config.path} changed since the shards ran; its gates and output dir are used, the shards' cells as they are")
    holders: dict[tuple[str, str], int] = {}
    missing_cells = check_membership(shards, _plan_shards(config, shards), holders)
    for shard in shards:
        if not shard.complete:
            log.warning(
                f"shard {shard.index}/{shard.count} ({shard.path}) did not complete "
                f"(status: {shard.meta.get('status')}); finish it with `evalx run --resume {shard.meta.get('run_id')}`, then merge again"
            )
    run_id = new_run_id()
    run_dir = options.out_dir if options.out_dir is not None else config.output_dir / run_id
    if (run_dir / "run.json").exists() or (run_dir / RESULTS).exists():
        raise MergeError(f"merge: {run_dir} already holds a run; give a new folder with -o")
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir)
    try:
        return _merge_locked(config, shards, missing, missing_cells, run_id, run_dir, options, holders)
    finally:
        lock.release()


def _merge_locked(
    config: Config,
    shards: list[ShardRun],
    missing: list[int],
    missing_cells: int,
    run_id: str,
    run_dir: Path,
    options: MergeOptions,
    holders: dict[tuple[str, str], int],
) -> RunOutcome:
    from evalx.results.reviews import apply_marks, load_marks, marks_count
    from evalx.results.summary import SummaryBuilder

    t0 = time.monotonic()
    first = shards[0]
    plan = first.shard
    starts = sorted(shards, key=lambda s: (str(s.meta.get("started_at") or ""), _number(s.meta.get("started_unix"))))
    started_at = str(starts[0].meta.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"))
    merged: MergeReport = {
        "count": first.count,
        "shards": [{"index": s.index, "run_id": s.meta.get("run_id"), "path": str(s.path)} for s in shards],
        "partial": bool(missing),
        "missing": missing,
        "missing_cells": missing_cells,
    }
    selection_args = dict(as_object(first.meta.get("selection_args")))
    selection_args["shard"] = None
    meta: RunMeta = {
        "run_id": run_id,
        "name": config.name,
        "config": relative_path(config.path),
        "config_hash": first.meta.get("config_hash"),
        "started_at": started_at,
        "targets": first.meta.get("targets"),
        "cells": _int(plan.get("plan_cells")),
        "selection": first.meta.get("selection"),
        "selection_args": selection_args,
        "plan_digest": first.plan_digest,
        "plan_digest_version": first.meta.get("plan_digest_version"),
        "reports": {"junit_passes": options.reports.junit_passes, "html_max_cells": options.reports.html_max_cells},
        "started_unix": starts[0].meta.get("started_unix"),
        "status": "running",
        "merged": merged,
    }
    write_json(run_dir / "run.json", meta)
    stored_config = first.path / "config.yaml"
    if stored_config.is_file():  # the resolved config the cells ran with (secrets already redacted)
        try:
            text = read_bytes(stored_config, CONFIG_COPY)  # a regular file only, within its size
        except UnreadableFile as exc:
            log.warning(f"{exc}: the merged run has no config.yaml")
        else:
            write_bytes(run_dir / "config.yaml", text)  # atomic, never through a link

    matrix = next((matrix for s in shards if isinstance(matrix := s.summary.get("matrix"), dict)), None)
    cases = plan.get("plan_cases")
    builder = SummaryBuilder(
        run_id,
        config.name,
        started_at,
        repeat_pass_rule=config.typed.defaults.repeat_pass_rule or "majority",
        matrix=matrix,
        per_case=not isinstance(cases, int) or _int(plan.get("plan_cells")) > cases,
        slow_ms=config.typed.defaults.slow_ms,
    )
    spans = _CaseSpans(_int(plan.get("plan_cells")))
    types = plan.get("target_types")
    writer = ResultWriter(
        run_dir,
        run_id=run_id,
        target_types={str(k): str(v) for k, v in types.items()} if isinstance(types, dict) else {},
        cases=spans,
        dataset=dataset if isinstance(dataset := plan.get("dataset"), str) else None,
    )
    marks = load_marks(run_dir) if _carried_marks(shards, holders, run_dir) else None
    try:
        # one cell at a time from each shard, merged in the whole plan's order
        streams = [_in_order(read_results(s.path / RESULTS, raw=True), spans) for s in shards]
        for group in by_case(heapq.merge(*streams, key=_index)):
            spans.first, spans.cells = _index(group[0]), len(group)
            for result in group:
                writer.write(result)  # as the shard wrote it; the summary counts its review mark, as a read does
                builder.add(next(apply_marks([result], marks)) if marks else result)
    finally:
        writer.close(reorder=True)

    durations = [s.summary.get("duration_s") for s in shards]
    duration = max((float(d) for d in durations if isinstance(d, (int, float))), default=time.monotonic() - t0)
    finished = max((str(s.summary.get("finished_at") or s.meta.get("finished_at") or "") for s in shards), default="")
    figures = builder.finish(finished or datetime.now(timezone.utc).isoformat(timespec="seconds"), round(duration, 3))
    summary, warnings = finish_summary(
        figures,
        RunFacts(
            config=str(config.path),
            interrupted=not all(s.complete for s in shards) or (missing_cells > 0 and not missing),
            cells_planned=_int(plan.get("plan_cells")),
            cost_guard=_cost_guard(shards),
            merged=merged,
        ),
        gates=config.typed.gates,
        baseline_ref=options.baseline,
        output_dir=config.output_dir,
        run_dir=run_dir,
    )
    if marks:  # the summary counts these marks (as evalx report's would: its reviews are current)
        counts = summary.get("reviews") or {"reviewed_cells": 0, "overridden_cells": 0}
        summary["reviews"] = {**counts, "marks": marks_count(run_dir)}
    for warning in warnings:
        log.warning(warning)
    messages = _target_failures(summary)
    exit_code = decide_exit(summary, target_failed=bool(messages))
    why_nothing = nothing_graded(summary)
    if why_nothing and not messages:
        messages.append(why_nothing)
    if missing:
        which = ", ".join(f"{i}/{first.count}" for i in missing)
        messages.append(f"partial merge: shard{'s' if len(missing) > 1 else ''} {which} missing; their cells are not in this run")
    if missing_cells and not missing:
        messages.append(
            f"incomplete merge: {missing_cells} of {_int(plan.get('plan_cells'))} planned cells are in no shard (a shard had not finished); "
            "this run is not complete and is never `latest`"
        )
    # complete only when the cells say so: every planned cell held once, every shard finished
    complete = not missing_cells and all(s.complete for s in shards)
    status = "complete" if complete else "partial" if missing else "interrupted"
    meta["status"], meta["finished_at"], meta["exit_code"] = status, summary.get("finished_at"), exit_code
    publish(run_dir, summary, meta, options.reports, options.outputs)
    return RunOutcome(run_id, run_dir, summary, exit_code, messages)
